package bench_test

import (
	"path/filepath"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "google.golang.org/grpc/interop/grpc_testing" // gRPC-go's grpc.testing, registered
)

// TestGRPCTestingWireIdentical checks the grpc.testing .proto files that
// rdmarpc's interop package was generated from against gRPC-go's own
// descriptors of the same package: every message field has gRPC's number,
// name, kind and cardinality, every method gRPC's types and streaming, so
// the messages and method names on the wire are gRPC's. (The two generated
// packages cannot share a binary: both register grpc/testing/*.proto.)
func TestGRPCTestingWireIdentical(t *testing.T) {
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		ImportPaths: []string{filepath.Join("..", "interop", "grpc_testing", "proto")},
	})}
	files, err := c.Compile(t.Context(), "grpc/testing/empty.proto", "grpc/testing/messages.proto", "grpc/testing/test.proto")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		msgs := f.Messages()
		for i := range msgs.Len() {
			checkMessage(t, msgs.Get(i))
		}
		enums := f.Enums()
		for i := range enums.Len() {
			checkEnum(t, enums.Get(i))
		}
		svcs := f.Services()
		for i := range svcs.Len() {
			checkService(t, svcs.Get(i))
		}
	}
}

func checkMessage(t *testing.T, ours protoreflect.MessageDescriptor) {
	t.Helper()
	if ours.IsMapEntry() {
		return // checked as its map field
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(ours.FullName())
	if err != nil {
		t.Errorf("message %s: gRPC-go has none: %v", ours.FullName(), err)
		return
	}
	theirs := mt.Descriptor()
	fields := ours.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		g := theirs.Fields().ByNumber(f.Number())
		if g == nil {
			t.Errorf("%s: field %d (%s) is not gRPC's", ours.FullName(), f.Number(), f.Name())
			continue
		}
		if f.Name() != g.Name() || f.Kind() != g.Kind() || f.Cardinality() != g.Cardinality() || f.IsMap() != g.IsMap() || typeName(f) != typeName(g) {
			t.Errorf("%s field %d: ours %s %v %v %s, gRPC's %s %v %v %s", ours.FullName(), f.Number(),
				f.Name(), f.Cardinality(), f.Kind(), typeName(f), g.Name(), g.Cardinality(), g.Kind(), typeName(g))
		}
	}
	nested := ours.Messages()
	for i := range nested.Len() {
		checkMessage(t, nested.Get(i))
	}
}

// typeName is the message or enum a field holds ("" for scalars); for a
// map, its value's.
func typeName(f protoreflect.FieldDescriptor) protoreflect.FullName {
	if f.IsMap() {
		f = f.MapValue()
	}
	switch {
	case f.Message() != nil:
		return f.Message().FullName()
	case f.Enum() != nil:
		return f.Enum().FullName()
	}
	return ""
}

func checkEnum(t *testing.T, ours protoreflect.EnumDescriptor) {
	t.Helper()
	et, err := protoregistry.GlobalTypes.FindEnumByName(ours.FullName())
	if err != nil {
		t.Errorf("enum %s: gRPC-go has none: %v", ours.FullName(), err)
		return
	}
	vals := ours.Values()
	for i := range vals.Len() {
		v := vals.Get(i)
		g := et.Descriptor().Values().ByNumber(v.Number())
		if g == nil || g.Name() != v.Name() {
			t.Errorf("%s value %d (%s) is not gRPC's", ours.FullName(), v.Number(), v.Name())
		}
	}
}

func checkService(t *testing.T, ours protoreflect.ServiceDescriptor) {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(ours.FullName())
	if err != nil {
		t.Errorf("service %s: gRPC-go has none: %v", ours.FullName(), err)
		return
	}
	theirs := d.(protoreflect.ServiceDescriptor)
	methods := ours.Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		g := theirs.Methods().ByName(m.Name())
		if g == nil {
			t.Errorf("%s/%s is not a method of gRPC's", ours.FullName(), m.Name())
			continue
		}
		if m.Input().FullName() != g.Input().FullName() || m.Output().FullName() != g.Output().FullName() ||
			m.IsStreamingClient() != g.IsStreamingClient() || m.IsStreamingServer() != g.IsStreamingServer() {
			t.Errorf("%s/%s: ours (%s) returns (%s), streams %v/%v; gRPC's (%s) returns (%s), streams %v/%v", ours.FullName(), m.Name(),
				m.Input().FullName(), m.Output().FullName(), m.IsStreamingClient(), m.IsStreamingServer(),
				g.Input().FullName(), g.Output().FullName(), g.IsStreamingClient(), g.IsStreamingServer())
		}
	}
}
