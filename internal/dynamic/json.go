package dynamic

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// Decoder reads request messages from JSON: a stream of JSON objects, one
// after another (on one line each, or spread over many), as grpcurl's -d
// takes them. An empty input is one empty message.
type Decoder struct {
	dec   *json.Decoder
	desc  protoreflect.MessageDescriptor
	opts  protojson.UnmarshalOptions
	count int
}

// NewDecoder reads messages of type desc from r. The decoder holds one JSON
// value in memory at a time.
func NewDecoder(r io.Reader, desc protoreflect.MessageDescriptor, types Resolver) *Decoder {
	return &Decoder{
		dec:  json.NewDecoder(r),
		desc: desc,
		opts: protojson.UnmarshalOptions{Resolver: types},
	}
}

// Next returns the next message, or io.EOF after the last. An input with no
// JSON value at all gives one empty message, so that a call without -d
// sends the request's zero value.
func (d *Decoder) Next() (*dynamicpb.Message, error) {
	var raw json.RawMessage
	err := d.dec.Decode(&raw)
	if errors.Is(err, io.EOF) {
		if d.count == 0 {
			d.count++
			return dynamicpb.NewMessage(d.desc), nil
		}
		return nil, io.EOF
	}
	d.count++
	if err != nil {
		return nil, fmt.Errorf("request %d: not JSON: %w", d.count, err)
	}
	m := dynamicpb.NewMessage(d.desc)
	if err := d.opts.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("request %d: not a %s: %w", d.count, d.desc.FullName(), err)
	}
	return m, nil
}

// Encoder writes messages as protojson, one per line.
type Encoder struct {
	w    io.Writer
	opts protojson.MarshalOptions
}

// NewEncoder writes to w; emitDefaults writes fields that hold their zero
// value too (grpcurl's --emit-defaults).
func NewEncoder(w io.Writer, types Resolver, emitDefaults bool) *Encoder {
	return &Encoder{w: w, opts: protojson.MarshalOptions{Resolver: types, EmitUnpopulated: emitDefaults}}
}

// Encode writes m on one line.
func (e *Encoder) Encode(m proto.Message) error {
	b, err := e.opts.Marshal(m)
	if err != nil {
		return err
	}
	// protojson's output is randomly spaced on purpose; compact it so that
	// every message is one stable line.
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = e.w.Write(out.Bytes())
	return err
}

// Detail writes a status detail as JSON when its type is known, and as its
// type URL with the value in base64 otherwise.
func Detail(a *anypb.Any, types Resolver) string {
	b, err := protojson.MarshalOptions{Resolver: types}.Marshal(a)
	if err == nil {
		var out bytes.Buffer
		if json.Compact(&out, b) == nil {
			return out.String()
		}
	}
	return fmt.Sprintf("%s (unknown type; value %s)", a.GetTypeUrl(), base64.StdEncoding.EncodeToString(a.GetValue()))
}
