// Package echopb holds the messages and rdmarpc stubs generated from
// echo.proto: the Echo service that the README demo and the benchmarks use.
package echopb

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen --out . --opt paths=source_relative echo.proto
