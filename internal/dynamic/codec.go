package dynamic

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// Encoded is a message already encoded in protobuf's binary form, for
// RawCodec: a load generator encodes its request once, not once per call.
type Encoded []byte

// Discard takes a response without decoding it, keeping only its size.
type Discard struct{ Size int }

// RawCodec is rpc.ProtoCodec's encoding for messages given already encoded
// (Encoded) or taken without decoding (*Discard), so that what a bench
// measures is the transport and the server, not protobuf in the client.
// Other proto.Message values are encoded and decoded as with
// rpc.ProtoCodec. It is an rpc.SizedCodec: requests are copied straight into
// the transport's send memory.
type RawCodec struct{}

func (RawCodec) Name() string { return "proto" }

func (RawCodec) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case Encoded:
		return v, nil
	case proto.Message:
		return proto.Marshal(v)
	}
	return nil, fmt.Errorf("raw codec: cannot encode %T", v)
}

func (RawCodec) Unmarshal(data []byte, v any) error {
	switch v := v.(type) {
	case *Discard:
		v.Size = len(data)
		return nil
	case proto.Message:
		return proto.Unmarshal(data, v)
	}
	return fmt.Errorf("raw codec: cannot decode into %T", v)
}

func (RawCodec) Size(v any) int {
	switch v := v.(type) {
	case Encoded:
		return len(v)
	case proto.Message:
		return proto.Size(v)
	}
	return 0
}

func (c RawCodec) MarshalTo(b []byte, v any) error {
	switch v := v.(type) {
	case Encoded:
		if len(v) != len(b) {
			return fmt.Errorf("raw codec: %d bytes sized %d", len(v), len(b))
		}
		copy(b, v)
		return nil
	case proto.Message:
		out, err := proto.MarshalOptions{}.MarshalAppend(b[:0], v)
		if err != nil {
			return err
		}
		if len(out) != len(b) {
			return fmt.Errorf("raw codec: %T changed while being encoded (%d bytes, sized %d)", v, len(out), len(b))
		}
		return nil
	}
	return fmt.Errorf("raw codec: cannot encode %T", v)
}
