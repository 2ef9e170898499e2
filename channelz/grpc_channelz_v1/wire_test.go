package grpc_channelz_v1_test

import (
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	channelzpb "github.com/rdmarpc/rdmarpc/channelz/grpc_channelz_v1"
)

// TestWireIdenticalToGRPCGo compares the file's descriptor with gRPC-go's
// (testdata, dumped from google.golang.org/grpc/channelz/grpc_channelz_v1
// v1.85.0): the same file name, package, imports, messages, fields,
// numbers, enum values, service and options, go_package aside.
func TestWireIdenticalToGRPCGo(t *testing.T) {
	text, err := os.ReadFile("testdata/grpc-go-channelz.textproto")
	if err != nil {
		t.Fatal(err)
	}
	want := new(descriptorpb.FileDescriptorProto)
	if err := prototext.Unmarshal(text, want); err != nil {
		t.Fatal(err)
	}
	got := protodesc.ToFileDescriptorProto(channelzpb.File_grpc_channelz_v1_channelz_proto)
	got.Options.GoPackage = nil
	want.Options.GoPackage = nil
	got.SourceCodeInfo = nil
	if !proto.Equal(got, want) {
		t.Errorf("descriptor differs from gRPC-go's:\n got %v\nwant %v", prototext.Format(got), prototext.Format(want))
	}
}
