package grpc_reflection_v1_test

import (
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	reflectionpb "github.com/rdmarpc/rdmarpc/reflection/grpc_reflection_v1"
)

// TestWireIdenticalToGRPCGo compares the file's descriptor with gRPC-go's
// (testdata, dumped from google.golang.org/grpc/reflection/grpc_reflection_v1):
// the same file name, package, messages, fields, numbers, oneofs,
// service and options, go_package aside.
func TestWireIdenticalToGRPCGo(t *testing.T) {
	text, err := os.ReadFile("testdata/grpc-go-reflection.textproto")
	if err != nil {
		t.Fatal(err)
	}
	want := new(descriptorpb.FileDescriptorProto)
	if err := prototext.Unmarshal(text, want); err != nil {
		t.Fatal(err)
	}
	got := protodesc.ToFileDescriptorProto(reflectionpb.File_grpc_reflection_v1_reflection_proto)
	got.Options.GoPackage = nil
	got.SourceCodeInfo = nil
	if !proto.Equal(got, want) {
		t.Errorf("descriptor differs from gRPC-go's:\n got %v\nwant %v", prototext.Format(got), prototext.Format(want))
	}
}
