// Package common is generated from common/common.proto, which has messages
// only: it gets no stub file.
package common

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I ../../../testdata/proto --out . --opt module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/common ../../../testdata/proto/common/common.proto
