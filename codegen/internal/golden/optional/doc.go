// Package optional is generated from optional/optional.proto, which has
// proto3 optional fields.
package optional

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I ../../../testdata/proto --out . --opt module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/optional ../../../testdata/proto/optional/optional.proto
