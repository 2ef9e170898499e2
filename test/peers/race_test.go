//go:build race

package peers

// The server process is built with the race detector when the tests are.
func init() { serverBuildFlags = append(serverBuildFlags, "-race") }
