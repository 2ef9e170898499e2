// Package golden holds, in its subpackages, the code generated from the
// .proto files in codegen/testdata/proto: the golden files that codegen's
// tests compare fresh output with. They are real packages so that every
// build compiles them and vet checks them, and the end-to-end tests call
// through them.
//
// Each subpackage regenerates itself with the go:generate line of its doc.go
// (make generate); go test ./codegen -run TestGolden -update does the same.
package golden
