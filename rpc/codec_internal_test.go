package rpc

import (
	"bytes"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// lendDesc is a message with every kind of bytes field UnmarshalLent must
// tell apart: a plain one (lent), repeated, in a oneof, proto3 optional
// (a synthetic oneof: lent), inside a nested message (not lent), and
// fields of other kinds around them.
var lendDesc = func() protoreflect.MessageDescriptor {
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	by := descriptorpb.FieldDescriptorProto_TYPE_BYTES
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	i64 := descriptorpb.FieldDescriptorProto_TYPE_INT64
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	f := func(name string, num int32, l descriptorpb.FieldDescriptorProto_Label, t descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(num), Label: l.Enum(), Type: t.Enum()}
	}
	inOneof := func(fd *descriptorpb.FieldDescriptorProto, i int32) *descriptorpb.FieldDescriptorProto {
		fd.OneofIndex = proto.Int32(i)
		return fd
	}
	nested := f("nested", 7, opt, msg)
	nested.TypeName = proto.String(".lend.M")
	optional := inOneof(f("optional", 5, opt, by), 1)
	optional.Proto3Optional = proto.Bool(true)
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("lend.proto"),
		Package: proto.String("lend"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("M"),
			Field: []*descriptorpb.FieldDescriptorProto{
				f("plain", 1, opt, by),
				f("list", 2, rep, by),
				inOneof(f("one_bytes", 3, opt, by), 0),
				inOneof(f("one_string", 4, opt, str), 0),
				optional,
				f("text", 6, opt, str),
				nested,
				f("number", 8, opt, i64),
				f("second", 9, opt, by),
			},
			OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("choice")}, {Name: proto.String("_optional")}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().Get(0)
}()

func lendField(name string) protoreflect.FieldDescriptor {
	return lendDesc.Fields().ByName(protoreflect.Name(name))
}

// within reports whether b's bytes lie inside data's.
func within(b, data []byte) bool {
	if len(b) == 0 || len(data) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	return p >= lo && p < lo+uintptr(len(data))
}

// checkLent decodes data with Unmarshal and UnmarshalLent and fails when
// they disagree on the error or the message.
func checkLent(t *testing.T, data []byte) *dynamicpb.Message {
	t.Helper()
	want, got := dynamicpb.NewMessage(lendDesc), dynamicpb.NewMessage(lendDesc)
	werr := ProtoCodec{}.Unmarshal(data, want)
	gerr := ProtoCodec{}.UnmarshalLent(data, got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("Unmarshal: %v; UnmarshalLent: %v", werr, gerr)
	}
	if werr == nil && !proto.Equal(want, got) {
		t.Fatalf("UnmarshalLent decoded %v, Unmarshal %v", got, want)
	}
	return got
}

func TestUnmarshalLent(t *testing.T) {
	big := func(c byte) []byte { return bytes.Repeat([]byte{c}, 4096) }
	m := dynamicpb.NewMessage(lendDesc)
	m.Set(lendField("plain"), protoreflect.ValueOfBytes(big('p')))
	l := m.Mutable(lendField("list")).List()
	l.Append(protoreflect.ValueOfBytes(big('l')))
	m.Set(lendField("one_bytes"), protoreflect.ValueOfBytes(big('o')))
	m.Set(lendField("optional"), protoreflect.ValueOfBytes(big('q')))
	m.Set(lendField("text"), protoreflect.ValueOfString("hello"))
	n := dynamicpb.NewMessage(lendDesc)
	n.Set(lendField("plain"), protoreflect.ValueOfBytes(big('n')))
	m.Set(lendField("nested"), protoreflect.ValueOfMessage(n))
	m.Set(lendField("number"), protoreflect.ValueOfInt64(-7))
	m.Set(lendField("second"), protoreflect.ValueOfBytes([]byte("small")))
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := checkLent(t, data)
	for name, lent := range map[string]bool{"plain": true, "optional": true, "one_bytes": false, "second": false} {
		if b := got.Get(lendField(name)).Bytes(); within(b, data) != lent {
			t.Errorf("%s: lent %v, want %v", name, !lent, lent)
		}
	}
	if b := got.Get(lendField("list")).List().Get(0).Bytes(); within(b, data) {
		t.Error("a repeated field was lent")
	}
	if b := got.Get(lendField("nested")).Message().Get(lendField("plain")).Bytes(); within(b, data) {
		t.Error("a nested message's field was lent")
	}

	// A field that appears twice: the last wins, whichever was large.
	twice := protowire.AppendTag(nil, 1, protowire.BytesType)
	twice = protowire.AppendBytes(twice, big('a'))
	twice = protowire.AppendTag(twice, 1, protowire.BytesType)
	twice = protowire.AppendBytes(twice, []byte("b"))
	if b := checkLent(t, twice).Get(lendField("plain")).Bytes(); string(b) != "b" {
		t.Errorf("a field twice, small last: got %d bytes", len(b))
	}
	// Cut short inside the lent field: both fail.
	checkLent(t, data[:20])
}

// FuzzUnmarshalLent: for any bytes, UnmarshalLent fails when Unmarshal
// does and otherwise decodes the same message.
func FuzzUnmarshalLent(f *testing.F) {
	big := bytes.Repeat([]byte{'x'}, 2048)
	for _, num := range []protowire.Number{1, 2, 3, 5, 7, 9, 100} {
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		f.Add(protowire.AppendBytes(b, big))
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, big)
	b = protowire.AppendTag(b, 8, protowire.VarintType)
	f.Add(protowire.AppendVarint(b, 3))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLent(t, data)
	})
}
