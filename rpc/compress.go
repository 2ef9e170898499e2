package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/status"
)

// Compression on rdmarpc's own framing (docs/wire.md): a call that
// compresses names its compressor in the request metadata under
// encodingKey, and every message it sends is that compressor's output; the
// server answers with the same compressor, naming it in the response
// headers under the same key. The key never reaches a handler's or a
// caller's metadata. Which compressors the client has is advertised under
// acceptEncodingKey, with the request that compresses.
const (
	encodingKey       = "grpc-encoding"
	acceptEncodingKey = "grpc-accept-encoding"
)

// UseCompressor makes the call compress its messages with the compressor
// registered (encoding.RegisterCompressor) under name, as gRPC-go's; the
// server answers compressed with it too. A name no compressor is
// registered under fails the call with Internal before anything is sent;
// a server without it answers Unimplemented.
func UseCompressor(name string) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.compressor = name })
}

// sendCompressor is the compressor a call named, nil for none.
func sendCompressor(name string) (encoding.Compressor, error) {
	if name == "" || name == encoding.Identity {
		return nil, nil
	}
	c := encoding.GetCompressor(name)
	if c == nil {
		return nil, status.Errorf(codes.Internal, "grpc: Compressor is not installed for requested grpc-encoding %q", name)
	}
	return c, nil
}

// withEncoding is md, the request metadata of a call (the caller's copy,
// or nil), naming c and the compressors this side accepts.
func withEncoding(md metadata.MD, c encoding.Compressor) metadata.MD {
	if c == nil {
		return md
	}
	if md == nil {
		md = make(metadata.MD, 2)
	}
	md[encodingKey] = []string{c.Name()}
	md[acceptEncodingKey] = []string{strings.Join(encoding.RegisteredCompressorNames(), ",")}
	return md
}

// takeEncoding removes the compressor's name from md, received metadata,
// and returns the compressor: nil when the messages are not compressed,
// ok false when no compressor of that name is registered.
func takeEncoding(md metadata.MD) (c encoding.Compressor, name string, ok bool) {
	v, found := md[encodingKey]
	if !found {
		return nil, "", true
	}
	delete(md, encodingKey)
	if len(v) == 0 || v[0] == encoding.Identity {
		return nil, "", true
	}
	name = v[0]
	c = encoding.GetCompressor(name)
	return c, name, c != nil
}

// headerWithEncoding is a server's response headers with c's name: a copy,
// so that what the handler set stays as it set it.
func headerWithEncoding(header metadata.MD, c encoding.Compressor) metadata.MD {
	if c == nil {
		return header
	}
	md := make(metadata.MD, len(header)+1)
	for k, v := range header {
		md[k] = v
	}
	md[encodingKey] = []string{c.Name()}
	return md
}

// compressingCodec is a codec whose encodings are compressed. It is not a
// SizedCodec: a compressed size is known only once compressed.
type compressingCodec struct {
	Codec
	c encoding.Compressor
}

// sendCodec is the codec a side sends with: codec, compressed by c unless
// c is nil.
func sendCodec(codec Codec, c encoding.Compressor) Codec {
	if c == nil {
		return codec
	}
	return compressingCodec{codec, c}
}

func (z compressingCodec) Marshal(v any) ([]byte, error) {
	b, err := z.Codec.Marshal(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w, err := z.c.Compress(&buf)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		w.Close()
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeMsg decodes data into v, decompressing it first with c (nil: data
// is not compressed). What decompression produces is read as it comes and
// never beyond max bytes: more fails ResourceExhausted, whatever the
// compressed size, so a small message that inflates (a gzip bomb) costs
// at most about max bytes. Decompression errors are status errors; the
// codec's are returned as they are, for the caller to wrap.
func decodeMsg(codec Codec, c encoding.Compressor, data []byte, max int, v any) error {
	if c != nil {
		d, err := decompress(c, data, max)
		if err != nil {
			return err
		}
		data = d
	}
	return codec.Unmarshal(data, v)
}

func decompress(c encoding.Compressor, data []byte, max int) ([]byte, error) {
	r, err := c.Decompress(bytes.NewReader(data))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	if n > int64(max) {
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message after decompression larger than max (%d)", max)
	}
	return buf.Bytes(), nil
}

// decodeError is the status of a message decodeMsg could not decode into
// v: its own, else Internal, what says what was decoded.
func decodeError(err error, what string, v any) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "decoding %s into %T: %v", what, v, err)
}

// SetSendCompressor makes the responses of the call ctx (a handler's
// context) belongs to compressed with the compressor registered under
// name, or not compressed when name is encoding.Identity, as gRPC-go's
// does. By default a call answers with its request's compressor. It fails
// when the compressor is not registered, when the client did not
// advertise it (ClientSupportedCompressors), or when the header has gone
// (SendHeader, a stream's first SendMsg).
func SetSendCompressor(ctx context.Context, name string) error {
	c, err := callFromContext(ctx)
	if err != nil {
		return err
	}
	var comp encoding.Compressor
	if name != encoding.Identity {
		if comp = encoding.GetCompressor(name); comp == nil {
			return fmt.Errorf("rpc: unable to set send compressor: compressor not registered %q", name)
		}
		if !slices.Contains(splitAccept(c.accept), name) {
			return fmt.Errorf("rpc: unable to set send compressor: client does not support compressor %q", name)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent {
		return errors.New("rpc: SetSendCompressor after the header was sent")
	}
	c.comp = comp
	return nil
}

// ClientSupportedCompressors returns the names of the compressors the
// client of the call ctx (a handler's context) belongs to advertised in
// grpc-accept-encoding, as gRPC-go's does. An rdmarpc client advertises
// the compressors registered in its process when it connects.
func ClientSupportedCompressors(ctx context.Context) ([]string, error) {
	c, err := callFromContext(ctx)
	if err != nil {
		return nil, err
	}
	return splitAccept(c.accept), nil
}

// splitAccept is a grpc-accept-encoding value's names.
func splitAccept(v string) []string {
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}
