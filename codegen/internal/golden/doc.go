// Package golden holds, in its subpackages, the code generated from the
// .proto files in codegen/testdata/proto: the golden files that codegen's
// tests compare fresh output with. They are real packages so that every
// build compiles them and vet checks them; this package's tests call
// through them, directly and over the TCP transport.
//
// Each subpackage regenerates itself with the go:generate line of its doc.go
// (make generate). When generated code no longer compiles (after a change to
// the rpc API, say), the rdmarpc command, which links the echo example, cannot
// be built to regenerate it; go test ./codegen -run TestGolden -update then
// regenerates every golden package and the echo example, since codegen's own
// tests import no generated code.
package golden
