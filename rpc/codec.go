package rpc

import (
	"fmt"

	"google.golang.org/protobuf/proto"
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
