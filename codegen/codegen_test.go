package codegen_test

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/rdmarpc/rdmarpc/codegen"
	"github.com/rdmarpc/rdmarpc/internal/compile"
)

func request(t *testing.T, importPath, file, param string) *pluginpb.CodeGeneratorRequest {
	t.Helper()
	req, err := compile.Request(t.Context(), compile.Config{
		ImportPaths: []string{importPath},
		Files:       []string{filepath.Join(importPath, file)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if param != "" {
		req.Parameter = proto.String(param)
	}
	return req
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		param   string
		wantErr string // substring; "" means success
		mustEmb bool   // whether XServer requires embedding
	}{
		{param: "", mustEmb: true},
		{param: "paths=source_relative", mustEmb: true},
		{param: "require_unimplemented_servers=false", mustEmb: false},
		{param: "require_unimplemented_servers=true,paths=source_relative", mustEmb: true},
		{param: "require_unimplemented_servers=maybe", wantErr: "option require_unimplemented_servers=maybe: want true or false"},
		{param: "paths=source_relative,plugins=grpc", wantErr: `unknown option "plugins"; protoc-gen-go-rdmarpc takes require_unimplemented_servers`},
		{param: "paths=nowhere", wantErr: `unknown path type "nowhere"`},
	} {
		t.Run(tc.param, func(t *testing.T) {
			resp := codegen.Run(request(t, filepath.Join("..", "examples", "echo", "echopb"), "echo.proto", tc.param))
			if tc.wantErr != "" {
				if !strings.Contains(resp.GetError(), tc.wantErr) {
					t.Fatalf("error %q; want it to contain %q", resp.GetError(), tc.wantErr)
				}
				return
			}
			if resp.Error != nil {
				t.Fatal(resp.GetError())
			}
			if len(resp.File) != 1 {
				t.Fatalf("%d files; want 1", len(resp.File))
			}
			got := strings.Contains(resp.File[0].GetContent(), "\tmustEmbedUnimplementedEchoServer()\n}")
			if got != tc.mustEmb {
				t.Errorf("EchoServer requires embedding UnimplementedEchoServer: %v; want %v", got, tc.mustEmb)
			}
		})
	}
}

func TestFileWithoutServicesGetsNoStubs(t *testing.T) {
	resp := codegen.Run(request(t, filepath.Join("testdata", "proto"), "common/common.proto", ""))
	if resp.Error != nil || len(resp.File) != 0 {
		t.Errorf("error %q, %d files; want no error and no file", resp.GetError(), len(resp.File))
	}
}

func TestSupportedFeatures(t *testing.T) {
	resp := codegen.Run(request(t, filepath.Join("testdata", "proto"), "optional/optional.proto", ""))
	want := uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL)
	if resp.GetSupportedFeatures()&want == 0 {
		t.Errorf("supported features %b lack proto3 optional: protoc would refuse optional.proto", resp.GetSupportedFeatures())
	}
}

// TestEdition2024 feeds the plugin an edition 2024 file, as protoc 30 and
// later send it: protoc-gen-go and protoc-gen-go-grpc take it, so must we.
func TestEdition2024(t *testing.T) {
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("e/e.proto"),
		Package: proto.String("e.v1"),
		Syntax:  proto.String("editions"),
		Edition: descriptorpb.Edition_EDITION_2024.Enum(),
		Options: &descriptorpb.FileOptions{GoPackage: proto.String("example.com/e")},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("R"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("a"), JsonName: proto.String("a"), Number: proto.Int32(1),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
				Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
			}},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("S"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("M"), InputType: proto.String(".e.v1.R"), OutputType: proto.String(".e.v1.R"),
				ServerStreaming: proto.Bool(true),
			}},
		}},
	}
	resp := codegen.Run(&pluginpb.CodeGeneratorRequest{FileToGenerate: []string{"e/e.proto"}, ProtoFile: []*descriptorpb.FileDescriptorProto{file}})
	if resp.Error != nil {
		t.Fatal(resp.GetError())
	}
	if len(resp.File) != 1 || !strings.Contains(resp.File[0].GetContent(), "M(ctx context.Context, in *R, opts ...rpc.CallOption) (rpc.ServerStreamingClient[R], error)") {
		t.Errorf("generated %d files, not the stubs of S.M", len(resp.File))
	}
	if got := resp.GetMaximumEdition(); got < int32(descriptorpb.Edition_EDITION_2024) {
		t.Errorf("maximum edition %d; want at least 2024", got)
	}
}
