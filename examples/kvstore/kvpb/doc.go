// Package kvpb holds the messages and rdmarpc stubs generated from kv.proto:
// the KV service of the bundled key-value store (Get, Put, Delete, Scan,
// Batch, CompareAndSwap). kv.proto documents the limits and status codes.
//
// It is generated code only; the server and the storage live in sibling
// packages.
package kvpb

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen --out . --opt paths=source_relative kv.proto
