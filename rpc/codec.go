package rpc

import (
	"fmt"

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
