// Package editionspb is generated from editions/editions.proto: an edition
// 2023 file, with Go features, in a nested package, with a service of every
// method kind.
package editionspb

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I ../../../testdata/proto --out . --opt module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/editions ../../../testdata/proto/editions/editions.proto
