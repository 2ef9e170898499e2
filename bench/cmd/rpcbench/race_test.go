//go:build race

package main

// The race detector's instrumentation multiplies the instructions a call
// executes: TestCallgrind's bounds hold without it.
func init() { raceEnabled = true }
