// Package b is generated from nested/a/b/nested.proto: a proto2 file in a
// nested package that uses nested messages and another package's.
package b

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I ../../../../../testdata/proto --out ../../.. --opt paths=source_relative ../../../../../testdata/proto/nested/a/b/nested.proto
