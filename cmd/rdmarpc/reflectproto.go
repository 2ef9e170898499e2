package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// The reflection protocol's messages, from reflection.proto (a copy of
// reflection/grpc_reflection_v1's, which a test holds identical) compiled
// when first needed: rdmarpc must not depend on generated code, which it
// regenerates, so it speaks the protocol with dynamic messages.

//go:embed reflection.proto
var reflectionProto string

const (
	reflectionProtoPath = "grpc/reflection/v1/reflection.proto"
	reflectionMethod    = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
)

var reflectionSchema = sync.OnceValues(func() (protoreflect.FileDescriptor, error) {
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{reflectionProtoPath: reflectionProto}),
	}}
	files, err := c.Compile(context.Background(), reflectionProtoPath)
	if err != nil {
		return nil, fmt.Errorf("compiling the built-in %s: %w", reflectionProtoPath, err)
	}
	return files[0], nil
})

// reflectionStream is one ServerReflectionInfo stream.
type reflectionStream struct {
	s         rpc.ClientStream
	req, resp protoreflect.MessageDescriptor
}

func openReflection(ctx context.Context, cc rpc.ClientConnInterface) (*reflectionStream, error) {
	fd, err := reflectionSchema()
	if err != nil {
		return nil, err
	}
	s, err := cc.NewStream(ctx, &rpc.StreamDesc{StreamName: "ServerReflectionInfo", ServerStreams: true, ClientStreams: true}, reflectionMethod)
	if err != nil {
		return nil, err
	}
	return newReflectionStream(s, fd), nil
}

func newReflectionStream(s rpc.ClientStream, fd protoreflect.FileDescriptor) *reflectionStream {
	return &reflectionStream{s: s,
		req:  fd.Messages().ByName("ServerReflectionRequest"),
		resp: fd.Messages().ByName("ServerReflectionResponse")}
}

// reflectionAnswer is what a ServerReflectionResponse says, of the kinds
// the commands ask for.
type reflectionAnswer struct {
	sentFiles bool
	files     [][]byte // serialized FileDescriptorProtos
	listed    bool
	services  []string
	failed    bool
	code      codes.Code
	message   string
}

// ask sends a request with its oneof field kind set to value, and decodes
// the answer. An error is the stream's: the server's status once it ended.
func (x *reflectionStream) ask(kind protoreflect.Name, value string) (*reflectionAnswer, error) {
	req := dynamicpb.NewMessage(x.req)
	req.Set(x.req.Fields().ByName(kind), protoreflect.ValueOfString(value))
	if err := x.s.SendMsg(req); errors.Is(err, io.EOF) {
		// The stream has ended: its status says why.
		if err := x.s.RecvMsg(dynamicpb.NewMessage(x.resp)); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return nil, errors.New("reflection: the server ended the stream")
	} else if err != nil {
		return nil, err // the request itself failed (to encode, say): nothing was sent
	}
	resp := dynamicpb.NewMessage(x.resp)
	if err := x.s.RecvMsg(resp); err != nil {
		return nil, err
	}
	a := &reflectionAnswer{}
	field := func(m protoreflect.Message, name protoreflect.Name) protoreflect.FieldDescriptor {
		return m.Descriptor().Fields().ByName(name)
	}
	if f := field(resp, "file_descriptor_response"); resp.Has(f) {
		m := resp.Get(f).Message()
		list := m.Get(field(m, "file_descriptor_proto")).List()
		a.sentFiles = true
		for i := range list.Len() {
			a.files = append(a.files, list.Get(i).Bytes())
		}
	}
	if f := field(resp, "list_services_response"); resp.Has(f) {
		m := resp.Get(f).Message()
		list := m.Get(field(m, "service")).List()
		a.listed = true
		for i := range list.Len() {
			svc := list.Get(i).Message()
			a.services = append(a.services, svc.Get(field(svc, "name")).String())
		}
	}
	if f := field(resp, "error_response"); resp.Has(f) {
		m := resp.Get(f).Message()
		a.failed = true
		a.code = codes.Code(m.Get(field(m, "error_code")).Int())
		a.message = m.Get(field(m, "error_message")).String()
	}
	return a, nil
}
