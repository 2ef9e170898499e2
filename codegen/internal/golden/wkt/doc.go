// Package wktpb is generated from wkt/wkt.proto, which uses the well-known
// types. Its go:generate line spells the flags as protoc does.
package wktpb

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen --proto_path=../../../testdata/proto --go_out=. --go_opt=module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/wkt --go-rdmarpc_out=. --go-rdmarpc_opt=module=github.com/rdmarpc/rdmarpc/codegen/internal/golden/wkt ../../../testdata/proto/wkt/wkt.proto
