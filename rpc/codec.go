package rpc

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
)

// Codec turns messages into payload bytes and back. Both ends of a
// connection must use the same codec; the wire does not name it.
type Codec interface {
	Name() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// SizedCodec is a Codec that can say how large an encoding will be and
// write it in place, so a message is encoded straight into the transport's
// (registered) send memory instead of being copied there.
type SizedCodec interface {
	Codec
	// Size returns the length of v's encoding.
	Size(v any) int
	// MarshalTo encodes v into b, whose length is what Size returned.
	MarshalTo(b []byte, v any) error
}

// VectorCodec is a SizedCodec that can leave a message's large parts
// (ProtoCodec: large bytes fields) in the message's own memory instead of
// copying them into the encoding. Where the connection sends a message
// given in parts (transport.VectorSender: tcp://), the RPC layer sends such
// a message as its frame's head and the encoding's small parts in one
// buffer and the large parts straight from the message, so they reach the
// socket without a copy. It asks only about uncompressed messages of at
// least 16 KiB.
type VectorCodec interface {
	SizedCodec
	// VecSize returns how many bytes of v's encoding, whose Size has just
	// been taken, MarshalVec writes into its buffer, the others being left
	// in v's memory; 0 when v has no part worth leaving there (the caller
	// then uses MarshalTo).
	VecSize(v any) int
	// MarshalVec encodes v, into b, whose length is what VecSize returned,
	// and v's own memory: it appends to vec slices whose concatenation is
	// v's encoding, the first of them b[:k] for some k, then more pieces of
	// b in b's order and pieces of v's memory, which stay valid while v is
	// unchanged.
	MarshalVec(b []byte, vec [][]byte, v any) ([][]byte, error)
}

// ProtoCodec is the default codec: protobuf's binary encoding.
type ProtoCodec struct{}

func (ProtoCodec) Name() string { return "proto" }

func asProto(v any) (proto.Message, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto codec: %T is not a proto.Message", v)
	}
	return m, nil
}

func (ProtoCodec) Marshal(v any) ([]byte, error) {
	m, err := asProto(v)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(m)
}

func (ProtoCodec) Unmarshal(data []byte, v any) error {
	m, err := asProto(v)
	if err != nil {
		return err
	}
	return proto.Unmarshal(data, m)
}

func (ProtoCodec) Size(v any) int {
	m, err := asProto(v)
	if err != nil {
		return 0
	}
	return proto.Size(m)
}

func (ProtoCodec) MarshalTo(b []byte, v any) error {
	m, err := asProto(v)
	if err != nil {
		return err
	}
	// Size has just computed and cached the sizes of m and its parts.
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b[:0], m)
	if err != nil {
		return err
	}
	if len(out) != len(b) || (len(b) > 0 && &out[0] != &b[0]) {
		return fmt.Errorf("proto codec: %T changed while being encoded (%d bytes, sized %d)", v, len(out), len(b))
	}
	return nil
}

// vecMin is the smallest bytes field MarshalVec leaves in the message:
// below it, the copy saved costs less than what the vector adds (an iovec
// more, and a shallow copy of the message when it has other fields).
const vecMin = 16 << 10

// maxVec is how many fields MarshalVec leaves in the message at most;
// further large ones are encoded with the rest.
const maxVec = 4

// largeFields are the fields of a message MarshalVec leaves in place.
type largeFields struct {
	n    int
	num  [maxVec]protowire.Number
	val  [maxVec][]byte
	size int // the bytes of their values
}

// findLarge finds r's large fields: the singular bytes fields of its own
// (not nested, not repeated, not extensions; a oneof's member too, as at
// most one member is set) of at least vecMin bytes, up to maxVec. Encoded
// after the rest of r, each is the last occurrence of its field, so it is
// the value a parser keeps. Unless r's unknown fields hold one of their
// numbers (only a program setting unknown fields itself can do that):
// then it finds none, and the message is encoded as usual.
func findLarge(r protoreflect.Message) (l largeFields) {
	fields := r.Descriptor().Fields()
	for i := 0; i < fields.Len() && l.n < maxVec; i++ {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.BytesKind || fd.Cardinality() == protoreflect.Repeated || !r.Has(fd) {
			continue
		}
		b := r.Get(fd).Bytes()
		if len(b) < vecMin {
			continue
		}
		l.num[l.n], l.val[l.n] = fd.Number(), b
		l.n++
		l.size += len(b)
	}
	if u := r.GetUnknown(); l.n > 0 && len(u) > 0 && l.inUnknown(u) {
		return largeFields{}
	}
	return l
}

// inUnknown reports whether u, unknown fields, holds one of l's fields
// (or cannot be read).
func (l *largeFields) inUnknown(u protoreflect.RawFields) bool {
	for len(u) > 0 {
		num, _, n := protowire.ConsumeField(u)
		if n < 0 || slices.Contains(l.num[:l.n], num) {
			return true
		}
		u = u[n:]
	}
	return false
}

// VecSize implements VectorCodec: the bytes of v's encoding but those of
// its large bytes fields' values.
func (ProtoCodec) VecSize(v any) int {
	m, ok := v.(proto.Message)
	if !ok {
		return 0
	}
	l := findLarge(m.ProtoReflect())
	if l.n == 0 {
		return 0
	}
	return proto.MarshalOptions{UseCachedSize: true}.Size(m) - l.size
}

// MarshalVec implements VectorCodec: b gets the encoding of v without its
// large bytes fields, then each field's tag and length, and vec the pieces
// of b with each field's own bytes after its length. Protobuf's parsers
// take fields in any order. v is not changed: the rest is encoded from a
// shallow copy of it (when it has anything but its large fields).
func (ProtoCodec) MarshalVec(b []byte, vec [][]byte, v any) ([][]byte, error) {
	m, err := asProto(v)
	if err != nil {
		return vec, err
	}
	r := m.ProtoReflect()
	l := findLarge(r)
	if l.n == 0 {
		return vec, changed(v)
	}
	if err := proto.CheckInitialized(m); err != nil {
		return vec, err
	}
	restLen := len(b)
	for i := range l.n {
		restLen -= protowire.SizeTag(l.num[i]) + protowire.SizeVarint(uint64(len(l.val[i])))
	}
	if restLen < 0 {
		return vec, changed(v)
	}
	out := b[:0]
	if restLen > 0 {
		rest := without(r, l.num, l.n)
		// The fields shared with v have their sizes cached by Size.
		out, err = proto.MarshalOptions{AllowPartial: true, UseCachedSize: true}.MarshalAppend(out, rest.Interface())
		if err != nil {
			return vec, err
		}
		if len(out) != restLen || &out[0] != &b[0] {
			return vec, changed(v)
		}
	}
	start := 0
	for i := range l.n {
		out = protowire.AppendTag(out, l.num[i], protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(len(l.val[i])))
		vec = append(vec, out[start:len(out):len(out)], l.val[i])
		start = len(out)
	}
	if len(out) != len(b) || &out[0] != &b[0] {
		return vec, changed(v)
	}
	return vec, nil
}

// without is a new message with r's fields but the first n of nums, their
// values shared with r, and r's unknown fields.
func without(r protoreflect.Message, nums [maxVec]protowire.Number, n int) protoreflect.Message {
	rest := r.New()
	r.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if !fd.IsExtension() {
			for i := range n {
				if nums[i] == fd.Number() {
					return true
				}
			}
		}
		rest.Set(fd, val)
		return true
	})
	rest.SetUnknown(r.GetUnknown())
	return rest
}

func changed(v any) error {
	return fmt.Errorf("proto codec: %T changed while being encoded", v)
}

// LendingCodec is implemented by codecs that can decode a message whose
// parts keep pointing into the bytes they were decoded from, instead of
// copies. A server given LendRequestBytes(true) decodes requests with
// UnmarshalLent, so a large bytes field reaches the handler without a copy;
// the bytes are lent, valid until the handler returns (for a unary
// request: until its response is sent; on a stream: until the handler's
// next RecvMsg or its return).
type LendingCodec interface {
	Codec
	// UnmarshalLent is Unmarshal, except that v may keep references into
	// data.
	UnmarshalLent(data []byte, v any) error
}

// lendMin is the smallest bytes field ProtoCodec lends: below it, copying
// costs less than the second look at the message that lending takes.
const lendMin = 1024

// maxLent is how many lendable fields a message may have for UnmarshalLent
// to lend them; with more, it copies them all.
const maxLent = 4

// UnmarshalLent decodes data into v as Unmarshal does, except that each
// singular bytes field of v's own (not nested, not repeated, not in a
// oneof) of at least 1 KiB points into data (up to maxLent such fields). protobuf-go always copies
// bytes fields, so the message is decoded without those fields' bytes and
// they are set afterwards. A message where such a field appears more than
// once is decoded by Unmarshal.
func (c ProtoCodec) UnmarshalLent(data []byte, v any) error {
	m, err := asProto(v)
	if err != nil {
		return err
	}
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	type span struct {
		fd         protoreflect.FieldDescriptor
		val        []byte
		start, end int
	}
	var lent [maxLent]span
	n, kept := 0, 0
	for off := 0; off < len(data); {
		num, typ, tagLen := protowire.ConsumeTag(data[off:])
		if tagLen < 0 {
			return c.Unmarshal(data, v) // its error
		}
		valLen := protowire.ConsumeFieldValue(num, typ, data[off+tagLen:])
		if valLen < 0 {
			return c.Unmarshal(data, v)
		}
		end := off + tagLen + valLen
		if fd := fields.ByNumber(num); fd != nil && typ == protowire.BytesType && lendable(fd) {
			for _, s := range lent[:n] {
				if s.fd == fd {
					return c.Unmarshal(data, v) // the last one wins: leave it to protobuf
				}
			}
			if n == maxLent {
				return c.Unmarshal(data, v)
			}
			val, _ := protowire.ConsumeBytes(data[off+tagLen:])
			if len(val) < lendMin {
				lent[n] = span{fd: fd, start: off, end: off} // copied with the rest, and seen
			} else {
				lent[n] = span{fd: fd, val: val, start: off, end: end}
			}
			n++
		}
		off = end
	}
	for _, s := range lent[:n] {
		kept += s.end - s.start
	}
	if kept == 0 {
		return c.Unmarshal(data, v)
	}
	rest := bufpool.Get(len(data) - kept)[:0]
	prev := 0
	for _, s := range lent[:n] {
		rest = append(rest, data[prev:s.start]...)
		prev = s.end
	}
	rest = append(rest, data[prev:]...)
	// Nothing decoded from rest points into it (no alias flag), so it goes
	// back to the pool at once.
	err = proto.UnmarshalOptions{AllowPartial: true}.Unmarshal(rest, m)
	bufpool.Put(rest)
	if err != nil {
		return err
	}
	for _, s := range lent[:n] {
		if s.val != nil {
			r.Set(s.fd, protoreflect.ValueOfBytes(s.val))
		}
	}
	return proto.CheckInitialized(m)
}

// lendable reports whether fd is a field UnmarshalLent may lend.
func lendable(fd protoreflect.FieldDescriptor) bool {
	if fd.Kind() != protoreflect.BytesKind || fd.Cardinality() == protoreflect.Repeated || fd.IsExtension() {
		return false
	}
	o := fd.ContainingOneof()
	return o == nil || o.IsSynthetic()
}
