package dynamic

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func load(t *testing.T) *Files {
	t.Helper()
	src, err := LoadProtos(context.Background(), []string{"../../cmd/rdmarpc/testdata"}, []string{"probe.proto"})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestLoadProtosErrors(t *testing.T) {
	if _, err := LoadProtos(context.Background(), nil, nil); err == nil || !strings.Contains(err.Error(), "--proto") {
		t.Errorf("no files: %v", err)
	}
	if _, err := LoadProtos(context.Background(), []string{t.TempDir()}, []string{"missing.proto"}); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestFindMethod(t *testing.T) {
	src := load(t)
	for _, name := range []string{"probe.v1.Probe/Echo", "/probe.v1.Probe/Echo", "probe.v1.Probe.Echo"} {
		m, err := FindMethod(context.Background(), src, name)
		if err != nil || m.FullMethod != "/probe.v1.Probe/Echo" || m.Streaming() || m.Kind() != "unary" {
			t.Errorf("%s: %+v, %v", name, m, err)
		}
	}
	m, err := FindMethod(context.Background(), src, "probe.v1.Probe.Watch")
	if err != nil || !m.Streaming() || m.Kind() != "server streaming" {
		t.Errorf("Watch: %v, %v", m.Kind(), err)
	}
	for name, want := range map[string]string{
		"probe.v1.Probe/Nope":       `has no method "Nope"`,
		"probe.v1.Nope/Echo":        `service "probe.v1.Nope" not found`,
		"probe.v1.EchoRequest/Echo": "is a message, not a service",
		"Echo":                      "want package.Service/Method",
		"probe.":                    "want package.Service/Method",
	} {
		if _, err := FindMethod(context.Background(), src, name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", name, err, want)
		}
	}
}

func TestDecoder(t *testing.T) {
	src := load(t)
	d, _ := src.FindSymbol(context.Background(), "probe.v1.EchoRequest")
	md := d.(protoreflect.MessageDescriptor)
	next := func(in string) ([]*dynamicpb.Message, error) {
		dec := NewDecoder(strings.NewReader(in), md, src.Types())
		var out []*dynamicpb.Message
		for {
			m, err := dec.Next()
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}
	if ms, err := next(""); err != nil || len(ms) != 1 || proto.Size(ms[0]) != 0 {
		t.Errorf("empty input: %v, %v; want one empty message", ms, err)
	}
	if ms, err := next("{\"text\": \"a\"}\n{\"count\": 2, \"color\": \"COLOR_RED\"}\n"); err != nil || len(ms) != 2 {
		t.Errorf("two messages: %v, %v", ms, err)
	}
	for in, want := range map[string]string{
		`{"text": `:         "request 1: not JSON",
		`{} {"nope": 1}`:    "request 2: not a probe.v1.EchoRequest",
		`{"count": "many"}`: "not a probe.v1.EchoRequest",
		`[1, 2]`:            "not a probe.v1.EchoRequest",
	} {
		if _, err := next(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", in, err, want)
		}
	}
}

func TestEncoderAndDetail(t *testing.T) {
	src := load(t)
	mt, err := src.Types().FindMessageByName("probe.v1.EchoResponse")
	if err != nil {
		t.Fatal(err)
	}
	m := mt.New()
	m.Set(m.Descriptor().Fields().ByName("text"), protoreflect.ValueOfString("hi"))
	var buf bytes.Buffer
	if err := NewEncoder(&buf, src.Types(), false).Encode(m.Interface()); err != nil || buf.String() != `{"text":"hi"}`+"\n" {
		t.Errorf("encode: %q, %v", buf.String(), err)
	}
	buf.Reset()
	if err := NewEncoder(&buf, src.Types(), true).Encode(m.Interface()); err != nil || buf.String() != `{"text":"hi","metadata":[],"count":0}`+"\n" {
		t.Errorf("encode with defaults: %q, %v", buf.String(), err)
	}
	known, _ := anypb.New(wrapperspb.String("w"))
	if got := Detail(known, src.Types()); got != `{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"w"}` {
		t.Errorf("known detail: %s", got)
	}
	b, _ := proto.Marshal(m.Interface())
	if got := Detail(&anypb.Any{TypeUrl: "type.googleapis.com/probe.v1.EchoResponse", Value: b}, src.Types()); got != `{"@type":"type.googleapis.com/probe.v1.EchoResponse","text":"hi"}` {
		t.Errorf("detail of a .proto file's type: %s", got)
	}
	if got := Detail(&anypb.Any{TypeUrl: "x/y.Z", Value: []byte{0xff}}, src.Types()); got != "x/y.Z (unknown type; value /w==)" {
		t.Errorf("unknown detail: %s", got)
	}
}

func TestRawCodec(t *testing.T) {
	var c RawCodec
	enc := Encoded{1, 2, 3}
	if b, err := c.Marshal(enc); err != nil || !bytes.Equal(b, enc) || c.Size(enc) != 3 {
		t.Fatalf("Marshal: %v, %v", b, err)
	}
	b := make([]byte, 3)
	if err := c.MarshalTo(b, enc); err != nil || !bytes.Equal(b, enc) {
		t.Fatalf("MarshalTo: %v, %v", b, err)
	}
	if err := c.MarshalTo(make([]byte, 2), enc); err == nil {
		t.Fatal("MarshalTo into a buffer of the wrong size succeeded")
	}
	var d Discard
	if err := c.Unmarshal([]byte{9, 9}, &d); err != nil || d.Size != 2 {
		t.Fatalf("Discard: %+v, %v", d, err)
	}
	// Other messages go as with the proto codec.
	w := wrapperspb.String("abc")
	out := make([]byte, c.Size(w))
	if err := c.MarshalTo(out, w); err != nil {
		t.Fatal(err)
	}
	var back wrapperspb.StringValue
	if err := c.Unmarshal(out, &back); err != nil || back.GetValue() != "abc" {
		t.Fatalf("round trip: %v, %v", back.GetValue(), err)
	}
	if _, err := c.Marshal(42); err == nil {
		t.Fatal("Marshal(42) succeeded")
	}
	if err := c.Unmarshal(nil, new(int)); err == nil {
		t.Fatal("Unmarshal into *int succeeded")
	}
}
