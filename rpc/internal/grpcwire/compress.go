package grpcwire

import (
	"bytes"
	"strings"

	"github.com/rdmarpc/rdmarpc/encoding"
)

// Encoding is the compressor a grpc-encoding header names: "" for none
// (absent, or identity). A name no compressor is registered under is
// returned as it is; the rpc layer answers it (Unimplemented on a server,
// Internal on a client), as gRPC-go does.
func Encoding(v string) string {
	if v == encoding.Identity {
		return ""
	}
	return v
}

// Compress is msg compressed by the compressor registered under name. The
// rpc layer takes every message of a call whose grpc-encoding names a
// compressor as that compressor's output, while gRPC lets a sender leave
// any message uncompressed (flag 0; gRPC-go does so for empty messages):
// such a message is compressed here on its way in. ok is false when no
// compressor is registered under name: the rpc layer fails the call.
func Compress(name string, msg []byte) (out []byte, ok bool, err error) {
	c := encoding.GetCompressor(name)
	if c == nil {
		return msg, false, nil
	}
	var buf bytes.Buffer
	w, err := c.Compress(&buf)
	if err != nil {
		return nil, true, err
	}
	if _, err := w.Write(msg); err != nil {
		w.Close()
		return nil, true, err
	}
	if err := w.Close(); err != nil {
		return nil, true, err
	}
	return buf.Bytes(), true, nil
}

// AcceptEncoding is a grpc-accept-encoding value naming the compressors
// registered in this process, "" when there are none.
func AcceptEncoding() string {
	return strings.Join(encoding.RegisteredCompressorNames(), ",")
}
