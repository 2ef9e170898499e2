// Package testpb holds the Test service that the RPC conformance suite
// (rpc/rpctest) calls, generated from test.proto by rdmarpc gen.
package testpb

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen --out . --opt paths=source_relative test.proto
