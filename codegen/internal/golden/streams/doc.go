// Package streamspb is generated from streams/streams.proto: streaming
// methods of every kind next to unary ones, and a license header.
package streamspb

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I ../../../testdata/proto --out . --opt module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/streams ../../../testdata/proto/streams/streams.proto
