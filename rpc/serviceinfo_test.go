package rpc_test

import (
	"reflect"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
)

func TestGetServiceInfo(t *testing.T) {
	s := rpc.NewServer()
	if got := s.GetServiceInfo(); len(got) != 0 {
		t.Fatalf("GetServiceInfo of a server with no service = %v", got)
	}
	testpb.RegisterTestServer(s, newGate())
	s.RegisterService(&rpc.ServiceDesc{
		ServiceName: "x.v1.Feed",
		Streams: []rpc.StreamDesc{
			{StreamName: "Watch", ServerStreams: true},
			{StreamName: "Chat", ServerStreams: true, ClientStreams: true},
		},
		Methods:  []rpc.MethodDesc{{MethodName: "Get"}},
		Metadata: "feed.proto",
	}, struct{}{})
	got := s.GetServiceInfo()
	want := map[string]rpc.ServiceInfo{
		"rdmarpc.test.v1.Test": {
			Methods:  []rpc.MethodInfo{{Name: "Block"}, {Name: "Echo"}, {Name: "Fail"}, {Name: "Metadata"}, {Name: "Panic"}},
			Metadata: "test.proto",
		},
		"x.v1.Feed": {
			Methods: []rpc.MethodInfo{
				{Name: "Get"},
				{Name: "Chat", IsClientStream: true, IsServerStream: true},
				{Name: "Watch", IsServerStream: true},
			},
			Metadata: "feed.proto",
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GetServiceInfo =\n %+v\nwant\n %+v", got, want)
	}
}
