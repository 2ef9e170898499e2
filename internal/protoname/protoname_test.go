package protoname

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	_ "google.golang.org/protobuf/types/known/apipb" // more files in the global registry
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"", true},
		{"grpc.health.v1.Health.Check", true},
		{strings.Repeat("b", MaxLen), true},
		{strings.Repeat("b", MaxLen+1), false},
		{strings.Repeat("a.", MaxParts-1) + "a", true},
		{strings.Repeat("a.", MaxParts) + "a", false},
		{strings.Repeat("a.", 1<<19), false},
	} {
		if err := Check(tc.name); (err == nil) != tc.ok {
			t.Errorf("Check(%s) = %v, want ok %v", Quote(tc.name), err, tc.ok)
		} else if err != nil && len(err.Error()) > 256 {
			t.Errorf("Check(%s): an error of %d bytes: it should not echo the name whole", Quote(tc.name), len(err.Error()))
		}
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("pkg.Msg"); got != `"pkg.Msg"` {
		t.Errorf("Quote(pkg.Msg) = %s", got)
	}
	if got, want := Quote(strings.Repeat("x", 100)), `"`+strings.Repeat("x", 64)+`"… (100 bytes)`; got != want {
		t.Errorf("Quote(100 bytes) = %s, want %s", got, want)
	}
}

// TestRealFilesPass: every file linked into the test binary is within the
// bounds, as protodesc.ToFileDescriptorProto (and protoc) write it.
func TestRealFilesPass(t *testing.T) {
	n := 0
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		n++
		if err := CheckFile(protodesc.ToFileDescriptorProto(fd)); err != nil {
			t.Errorf("%s: %v", fd.Path(), err)
		}
		return true
	})
	if n < 5 {
		t.Fatalf("only %d files in the global registry", n)
	}
}

// file is a FileDescriptorProto whose one message m holds the field f.
func file(pkg string, m *descriptorpb.DescriptorProto) *descriptorpb.FileDescriptorProto {
	return &descriptorpb.FileDescriptorProto{Name: proto.String("f.proto"), Package: proto.String(pkg), MessageType: []*descriptorpb.DescriptorProto{m}}
}

func message(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
	return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
}

func field(name, typeName string) *descriptorpb.FieldDescriptorProto {
	f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(1)}
	if typeName != "" {
		f.TypeName = proto.String(typeName)
	}
	return f
}

// nested is a message n levels deep, named "a" at each level, holding the
// field f at the bottom.
func nested(n int, f *descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
	m := message("a", f)
	for range n - 1 {
		m = &descriptorpb.DescriptorProto{Name: proto.String("a"), NestedType: []*descriptorpb.DescriptorProto{m}}
	}
	return m
}

func TestCheckFile(t *testing.T) {
	long := strings.Repeat("b", MaxLen)
	for _, tc := range []struct {
		name string
		fd   *descriptorpb.FileDescriptorProto
		ok   bool
	}{
		{"plain", file("p.v1", message("M", field("f", ".p.v1.M"))), true},
		{"scalar field", file("p.v1", message("M", field("f", ""))), true},
		{"relative reference", file("p.v1", message("M", field("f", "M"))), false},
		{"long reference", file("p.v1", message("M", field("f", "."+long+"x"))), false},
		{"reference of too many parts", file("p.v1", message("M", field("f", "."+strings.Repeat("a.", MaxParts)+"a"))), false},
		{"long package", file(long, message("M")), false},
		// p, then 62 levels, then the field: 64 parts.
		{"nested to the bound", file("p", nested(MaxParts-2, field("f", ""))), true},
		{"nested beyond", file("p", nested(MaxParts-1, field("f", ""))), false},
		{"long field name", file("p", message("M", field(long, ""))), false},
		{"long enum value", &descriptorpb.FileDescriptorProto{Name: proto.String("f.proto"), Package: proto.String("p"), EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("E"), Value: []*descriptorpb.EnumValueDescriptorProto{{Name: proto.String(long[:MaxLen-2]), Number: proto.Int32(0)}}}}}, true}, // "p." + value: values are declared beside the enum
		{"long method input", &descriptorpb.FileDescriptorProto{Name: proto.String("f.proto"), Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("S"), Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("M"), InputType: proto.String("." + long + "x"), OutputType: proto.String(".p.M")}}}}}, false},
		{"long extendee", &descriptorpb.FileDescriptorProto{Name: proto.String("f.proto"), Extension: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("x"), Number: proto.Int32(100), Extendee: proto.String("." + long + "x")}}}, false},
	} {
		err := CheckFile(tc.fd)
		if (err == nil) != tc.ok {
			t.Errorf("%s: CheckFile = %v, want ok %v", tc.name, err, tc.ok)
		} else if err != nil && len(err.Error()) > 512 {
			t.Errorf("%s: an error of %d bytes: it should not echo names whole", tc.name, len(err.Error()))
		}
	}
}

// FuzzCheckFile: whatever file a server sends, CheckFile answers, and a
// file it passes has every declared full name and every reference within
// the bounds, as found by building each name whole.
func FuzzCheckFile(f *testing.F) {
	for _, fd := range []protoreflect.FileDescriptor{descriptorpb.File_google_protobuf_descriptor_proto} {
		b, err := proto.Marshal(protodesc.ToFileDescriptorProto(fd))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	b, _ := proto.Marshal(file("p", nested(3, field("f", ".p.a.a.a"))))
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		fd := new(descriptorpb.FileDescriptorProto)
		if proto.Unmarshal(b, fd) != nil {
			return
		}
		if CheckFile(fd) != nil {
			return
		}
		var names []string // declared full names
		join := func(scope, name string) string {
			if scope == "" {
				return name
			}
			return scope + "." + name
		}
		var refs []string
		fieldNames := func(scope string, fs []*descriptorpb.FieldDescriptorProto) {
			for _, f := range fs {
				names = append(names, join(scope, f.GetName()))
				refs = append(refs, f.GetTypeName(), f.GetExtendee())
			}
		}
		enumNames := func(scope string, es []*descriptorpb.EnumDescriptorProto) {
			for _, e := range es {
				names = append(names, join(scope, e.GetName()))
				for _, v := range e.GetValue() {
					names = append(names, join(scope, v.GetName()))
				}
			}
		}
		var messageNames func(scope string, m *descriptorpb.DescriptorProto)
		messageNames = func(scope string, m *descriptorpb.DescriptorProto) {
			in := join(scope, m.GetName())
			names = append(names, in)
			fieldNames(in, m.GetField())
			fieldNames(in, m.GetExtension())
			for _, o := range m.GetOneofDecl() {
				names = append(names, join(in, o.GetName()))
			}
			enumNames(in, m.GetEnumType())
			for _, n := range m.GetNestedType() {
				messageNames(in, n)
			}
		}
		pkg := fd.GetPackage()
		names = append(names, pkg)
		for _, m := range fd.GetMessageType() {
			messageNames(pkg, m)
		}
		enumNames(pkg, fd.GetEnumType())
		fieldNames(pkg, fd.GetExtension())
		for _, s := range fd.GetService() {
			in := join(pkg, s.GetName())
			names = append(names, in)
			for _, m := range s.GetMethod() {
				names = append(names, join(in, m.GetName()))
				refs = append(refs, m.GetInputType(), m.GetOutputType())
			}
		}
		for _, n := range names {
			if err := Check(n); err != nil {
				t.Fatalf("CheckFile passed a file declaring %s: %v", Quote(n), err)
			}
		}
		for _, r := range refs {
			if r == "" {
				continue
			}
			if !strings.HasPrefix(r, ".") {
				t.Fatalf("CheckFile passed the relative reference %s", Quote(r))
			}
			if err := Check(r[1:]); err != nil {
				t.Fatalf("CheckFile passed a reference to %s: %v", Quote(r), err)
			}
		}
	})
}
