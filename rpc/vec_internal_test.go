package rpc

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// encodeVec encodes m as sendFrame does (Size, then VecSize and MarshalVec
// when VecSize finds large fields) and checks the vector: its
// concatenation decodes to a message equal to m, each large field's bytes
// are a part of their own, m's own memory, and m is unchanged. It returns
// the fields left in place (their values' first bytes), nil when VecSize
// found none.
func encodeVec(t rapid.TB, m proto.Message) (inPlace [][]byte) {
	t.Helper()
	c := ProtoCodec{}
	before, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	clone := proto.Clone(m)
	n := c.Size(m)
	small := c.VecSize(m)
	if small == 0 {
		return nil
	}
	if small >= n {
		t.Fatalf("VecSize %d of a %d-byte encoding", small, n)
	}
	b := make([]byte, small)
	vec, err := c.MarshalVec(b, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(vec) == 0 || &vec[0][:1][0] != &b[0] {
		t.Fatal("the vector does not start with b")
	}
	var whole []byte
	for i, p := range vec {
		whole = append(whole, p...)
		if i%2 == 1 {
			inPlace = append(inPlace, p)
			if len(p) < vecMin {
				t.Errorf("part %d: %d bytes left in place, under %d", i, len(p), vecMin)
			}
		} else if !within(p, b) && len(p) > 0 {
			t.Errorf("part %d is not in b", i)
		}
	}
	if len(whole) != n {
		t.Fatalf("%d bytes in the vector, Size %d", len(whole), n)
	}
	got := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(whole, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, m) {
		t.Fatalf("the vector decodes to another message:\n got %v\nwant %v", got, m)
	}
	after, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) || !proto.Equal(m, clone) {
		t.Fatal("encoding changed the message")
	}
	return inPlace
}

// isOneOf reports whether p is the memory of one of vals.
func isOneOf(p []byte, vals ...[]byte) bool {
	for _, v := range vals {
		if len(v) > 0 && len(p) == len(v) && &p[0] == &v[0] {
			return true
		}
	}
	return false
}

func TestMarshalVec(t *testing.T) {
	big := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	set := func(m *dynamicpb.Message, name string, v protoreflect.Value) { m.Set(lendField(name), v) }
	bytesOf := protoreflect.ValueOfBytes

	t.Run("none", func(t *testing.T) {
		m := dynamicpb.NewMessage(lendDesc)
		set(m, "plain", bytesOf(big('p', vecMin-1)))
		set(m, "text", protoreflect.ValueOfString("hello"))
		l := m.Mutable(lendField("list")).List() // repeated: never left in place
		l.Append(bytesOf(big('l', 64<<10)))
		n := dynamicpb.NewMessage(lendDesc) // nested: never left in place
		set(n, "plain", bytesOf(big('n', 64<<10)))
		set(m, "nested", protoreflect.ValueOfMessage(n))
		if got := encodeVec(t, m); got != nil {
			t.Fatalf("%d fields left in place, want none", len(got))
		}
	})
	t.Run("alone", func(t *testing.T) {
		m := dynamicpb.NewMessage(lendDesc)
		p := big('p', 64<<10)
		set(m, "plain", bytesOf(p))
		if got := encodeVec(t, m); len(got) != 1 || !isOneOf(got[0], p) {
			t.Fatalf("%d fields left in place, want plain", len(got))
		}
	})
	t.Run("two and the rest", func(t *testing.T) {
		m := dynamicpb.NewMessage(lendDesc)
		p, s := big('p', 1<<20), big('s', vecMin)
		set(m, "plain", bytesOf(p))
		set(m, "second", bytesOf(s))
		set(m, "text", protoreflect.ValueOfString("hello"))
		set(m, "number", protoreflect.ValueOfInt64(-7))
		set(m, "one_string", protoreflect.ValueOfString("chosen"))
		m.Mutable(lendField("list")).List().Append(bytesOf(big('l', 20<<10)))
		n := dynamicpb.NewMessage(lendDesc)
		set(n, "plain", bytesOf(big('n', 64<<10)))
		set(n, "second", bytesOf([]byte("inner")))
		set(m, "nested", protoreflect.ValueOfMessage(n))
		got := encodeVec(t, m)
		if len(got) != 2 || !isOneOf(got[0], p, s) || !isOneOf(got[1], p, s) {
			t.Fatalf("%d fields left in place, want plain and second", len(got))
		}
	})
	t.Run("unknown fields", func(t *testing.T) {
		m := dynamicpb.NewMessage(lendDesc)
		p := big('p', 64<<10)
		set(m, "plain", bytesOf(p))
		u := protowire.AppendTag(nil, 100, protowire.VarintType)
		u = protowire.AppendVarint(u, 42)
		u = protowire.AppendTag(u, 101, protowire.BytesType)
		u = protowire.AppendBytes(u, big('u', 32<<10))
		m.SetUnknown(u)
		if got := encodeVec(t, m); len(got) != 1 || !isOneOf(got[0], p) {
			t.Fatalf("%d fields left in place, want plain", len(got))
		}
	})
	t.Run("large field also unknown", func(t *testing.T) {
		// Unknown fields are encoded after the known ones, so this
		// unknown copy of field 1 is what a parser keeps: left in place
		// after it, plain would win instead. The message goes as usual.
		m := dynamicpb.NewMessage(lendDesc)
		set(m, "plain", bytesOf(big('p', 64<<10)))
		u := protowire.AppendTag(nil, 1, protowire.BytesType)
		u = protowire.AppendBytes(u, []byte("unknown"))
		m.SetUnknown(u)
		if got := encodeVec(t, m); got != nil {
			t.Fatalf("%d fields left in place, want none", len(got))
		}
	})
	t.Run("explicit presence", func(t *testing.T) {
		m := dynamicpb.NewMessage(lendDesc)
		p := big('p', 64<<10)
		set(m, "plain", bytesOf(p))
		set(m, "optional", bytesOf([]byte{})) // present, empty: in the rest
		if got := encodeVec(t, m); len(got) != 1 || !isOneOf(got[0], p) {
			t.Fatalf("%d fields left in place, want plain", len(got))
		}
		q := big('q', 64<<10)
		set(m, "optional", bytesOf(q))
		if got := encodeVec(t, m); len(got) != 2 {
			t.Fatalf("%d fields left in place, want plain and optional", len(got))
		}
	})
	t.Run("oneof", func(t *testing.T) {
		m := dynamicpb.NewMessage(lendDesc)
		o := big('o', 64<<10)
		set(m, "one_bytes", bytesOf(o))
		set(m, "text", protoreflect.ValueOfString("hello"))
		if got := encodeVec(t, m); len(got) != 1 || !isOneOf(got[0], o) {
			t.Fatalf("%d fields left in place, want one_bytes", len(got))
		}
	})
	t.Run("generated", func(t *testing.T) {
		v := big('v', 1<<20)
		if got := encodeVec(t, wrapperspb.Bytes(v)); len(got) != 1 || !isOneOf(got[0], v) {
			t.Fatalf("BytesValue: %d fields left in place, want value", len(got))
		}
		if got := encodeVec(t, &anypb.Any{TypeUrl: "type.googleapis.com/x", Value: v}); len(got) != 1 || !isOneOf(got[0], v) {
			t.Fatalf("Any: %d fields left in place, want value", len(got))
		}
	})
}

// vecConn records what SendVec is given.
type vecConn struct {
	transport.Conn
	sent [][]byte
}

func (c *vecConn) SendVec(_ context.Context, bufs [][]byte) error {
	for _, b := range bufs {
		c.sent = append(c.sent, append([]byte(nil), b...))
	}
	return nil
}

// changingCodec is ProtoCodec, with change run right after VecSize.
type changingCodec struct {
	ProtoCodec
	change func()
}

func (c changingCodec) VecSize(v any) int {
	n := c.ProtoCodec.VecSize(v)
	c.change()
	return n
}

// A message changed while it is encoded (a data race of the caller's)
// fails to encode, with codes.Internal, rather than being sent as a frame
// of another size than its flow control and budget took.
func TestSendVecChangedMessage(t *testing.T) {
	head := []byte("head")
	for _, c := range []struct {
		name   string
		change func(*wrapperspb.BytesValue)
	}{
		{"grown", func(m *wrapperspb.BytesValue) { m.Value = make([]byte, 1<<20) }},
		{"grown past a length byte", func(m *wrapperspb.BytesValue) { m.Value = make([]byte, 4<<20) }},
		{"gone", func(m *wrapperspb.BytesValue) { m.Value = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := wrapperspb.Bytes(make([]byte, 64<<10))
			n := ProtoCodec{}.Size(m)
			var tc vecConn
			sent, err := sendVec(context.Background(), &tc, changingCodec{change: func() { c.change(m) }}, head, m, n)
			if !sent || status.Code(err) != codes.Internal || len(tc.sent) != 0 {
				t.Fatalf("sendVec: %v, %v, %d parts sent; want an Internal error and nothing sent", sent, err, len(tc.sent))
			}
		})
	}
	// Unchanged, it goes: head and the tag and length in one part, the
	// value in another.
	m := wrapperspb.Bytes(bytes.Repeat([]byte{'v'}, 64<<10))
	var tc vecConn
	sent, err := sendVec(context.Background(), &tc, ProtoCodec{}, head, m, ProtoCodec{}.Size(m))
	if !sent || err != nil || len(tc.sent) != 2 || !bytes.HasPrefix(tc.sent[0], head) || !bytes.Equal(tc.sent[1], m.Value) {
		t.Fatalf("sendVec: %v, %v, %d parts", sent, err, len(tc.sent))
	}
}

// randomMessage draws a message of lendDesc: any field set or not, bytes
// fields of sizes around vecMin, a nested message, unknown fields.
func randomMessage(t *rapid.T, depth int) *dynamicpb.Message {
	m := dynamicpb.NewMessage(lendDesc)
	size := rapid.SampledFrom([]int{0, 1, 100, vecMin - 1, vecMin, 40 << 10})
	data := func(label string) protoreflect.Value {
		n := size.Draw(t, label)
		return protoreflect.ValueOfBytes(bytes.Repeat([]byte{byte(n)}, n))
	}
	for _, name := range []string{"plain", "second", "optional"} {
		if rapid.Bool().Draw(t, name+" set") {
			m.Set(lendField(name), data(name))
		}
	}
	switch rapid.IntRange(0, 2).Draw(t, "choice") {
	case 1:
		m.Set(lendField("one_bytes"), data("one_bytes"))
	case 2:
		m.Set(lendField("one_string"), protoreflect.ValueOfString("s"))
	}
	for i := range rapid.IntRange(0, 2).Draw(t, "list") {
		m.Mutable(lendField("list")).List().Append(data("list " + string(rune('0'+i))))
	}
	if rapid.Bool().Draw(t, "text set") {
		m.Set(lendField("text"), protoreflect.ValueOfString(rapid.String().Draw(t, "text")))
	}
	if n := rapid.Int64().Draw(t, "number"); n != 0 {
		m.Set(lendField("number"), protoreflect.ValueOfInt64(n))
	}
	if depth < 2 && rapid.Bool().Draw(t, "nested set") {
		m.Set(lendField("nested"), protoreflect.ValueOfMessage(randomMessage(t, depth+1)))
	}
	var u []byte
	for range rapid.IntRange(0, 2).Draw(t, "unknown") {
		u = protowire.AppendTag(u, protowire.Number(rapid.IntRange(20, 30).Draw(t, "unknown number")), protowire.BytesType)
		u = protowire.AppendBytes(u, data("unknown").Bytes())
	}
	m.SetUnknown(u)
	return m
}

// For any message, the vector decodes to it, m is unchanged, and exactly
// its own singular bytes fields of vecMin bytes or more are left in place.
func TestMarshalVecProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := randomMessage(t, 0)
		want := 0
		for _, name := range []string{"plain", "second", "optional", "one_bytes"} {
			if fd := lendField(name); m.Has(fd) && len(m.Get(fd).Bytes()) >= vecMin {
				want++
			}
		}
		if got := encodeVec(t, m); len(got) != want {
			t.Fatalf("%d fields left in place, want %d", len(got), want)
		}
	})
}
