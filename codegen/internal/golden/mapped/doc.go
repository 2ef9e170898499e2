// Package mapped is generated from mapped/mapped.proto, which has no
// go_package option: an M option names its Go package.
package mapped

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I ../../../testdata/proto --out . --opt module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/mapped --opt Mmapped/mapped.proto=github.com/rdmarpc/rdmarpc/codegen/internal/golden/mapped ../../../testdata/proto/mapped/mapped.proto
