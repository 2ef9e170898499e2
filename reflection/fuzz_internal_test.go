package reflection

import (
	"testing"

	"google.golang.org/protobuf/proto"
	_ "google.golang.org/protobuf/types/known/apipb" // files with imports, in the global registry

	rpb "github.com/rdmarpc/rdmarpc/reflection/grpc_reflection_v1"
)

// FuzzServerReflectionRequest feeds requests as a client could send them:
// whatever the bytes, the service answers (or refuses the request's kind)
// with a response that encodes, and a file's imports go once per stream.
func FuzzServerReflectionRequest(f *testing.F) {
	for _, req := range []*rpb.ServerReflectionRequest{
		{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}},
		{Host: "h", MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: "google/protobuf/api.proto"}},
		{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "google.protobuf.Type.fields"}},
		{MessageRequest: &rpb.ServerReflectionRequest_FileContainingExtension{FileContainingExtension: &rpb.ExtensionRequest{ContainingType: "google.protobuf.MessageOptions", ExtensionNumber: 1}}},
		{MessageRequest: &rpb.ServerReflectionRequest_AllExtensionNumbersOfType{AllExtensionNumbersOfType: "google.protobuf.Api"}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s := NewServerV1(ServerOptions{}).(*server)
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(rpb.ServerReflectionRequest)
		if proto.Unmarshal(b, req) != nil {
			return // the RPC layer refuses what does not decode
		}
		sent := make(map[string]bool)
		for i := range 2 { // the same request twice on one stream
			resp, err := s.answer(req, sent)
			if err != nil {
				if req.GetMessageRequest() != nil {
					t.Fatalf("answer(%v): %v", req, err)
				}
				return
			}
			if _, err := proto.Marshal(resp); err != nil {
				t.Fatalf("the response to %v does not encode: %v", req, err)
			}
			// Asked again, a file comes alone: its imports went the
			// first time.
			if n := len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()); i == 1 && n > 1 {
				t.Fatalf("%v asked twice: %d files the second time, want 1", req, n)
			}
		}
	})
}
