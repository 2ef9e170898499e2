// Package multipb is generated from multi/multi.proto: several services in
// one file, comments and deprecation.
package multipb

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I ../../../testdata/proto --out . --opt module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/multi ../../../testdata/proto/multi/multi.proto
