package grpcwire

import (
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rdmarpc/rdmarpc/metadata"
)

// AppendMetadata appends md as header fields, for either side: reserved
// keys left out, -bin values in base64.
func AppendMetadata(fs []hpack.HeaderField, md metadata.MD) []hpack.HeaderField {
	for k, vs := range md {
		if IsReserved(k) {
			continue
		}
		bin := IsBinaryHeader(k)
		for _, v := range vs {
			if bin {
				v = EncodeBinary([]byte(v))
			}
			fs = append(fs, hpack.HeaderField{Name: k, Value: v})
		}
	}
	return fs
}

// WriteHeaderBlock writes an encoded header block for stream id as one
// HEADERS frame and the CONTINUATIONs it needs, each at most maxFrame
// bytes; endStream sets END_STREAM on the HEADERS (trailers, a
// trailers-only response). The caller flushes.
func WriteHeaderBlock(fr *http2.Framer, id uint32, block []byte, maxFrame int, endStream bool) error {
	first := true
	for first || len(block) > 0 {
		n := min(len(block), maxFrame)
		frag := block[:n]
		block = block[n:]
		var err error
		if first {
			err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: endStream, EndHeaders: len(block) == 0})
			first = false
		} else {
			err = fr.WriteContinuation(id, len(block) == 0, frag)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Clip shortens s, a value from the peer, for an error message.
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
