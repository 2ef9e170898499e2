package h2client

import (
	"fmt"
	"strconv"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// refusedKey is the rdmarpc refusal mark (docs/wire.md, "The refusal
// mark"): a call the server never processed, which the rpc layer may send
// again. A REFUSED_STREAM or a stream above a GOAWAY's last id carries it.
const refusedKey = "rdmarpc-refused"

// response is what one HEADERS block of a response says.
type response struct {
	httpStatus  int // 0: absent
	contentType string
	hasGRPC     bool // grpc-status present
	code        uint32
	message     string
	details     [][]byte
	md          metadata.MD
	encoding    string // grpc-encoding: the messages' compressor, "" for none
}

// parseResponseHeaders reads a decoded response header block: the
// pseudo-header, the reserved gRPC headers, and the rest as metadata
// (binary values decoded). Entries that rdmarpc metadata cannot hold (a
// key outside a-z 0-9 - _ ., a non-printable value of a non-binary key)
// are dropped; a malformed grpc-status or binary value is an error.
func parseResponseHeaders(fields []hpack.HeaderField) (response, error) {
	var r response
	for _, f := range fields {
		switch f.Name {
		case ":status":
			s, err := strconv.Atoi(f.Value)
			if err != nil || s < 100 || s > 999 {
				return r, fmt.Errorf("malformed :status %q", grpcwire.Clip(f.Value))
			}
			r.httpStatus = s
		case "content-type":
			r.contentType = f.Value
		case "grpc-status":
			c, err := strconv.ParseUint(f.Value, 10, 32)
			if err != nil {
				return r, fmt.Errorf("malformed grpc-status %q", grpcwire.Clip(f.Value))
			}
			r.hasGRPC, r.code = true, uint32(c)
		case "grpc-encoding":
			if e := grpcwire.Encoding(f.Value); e != "" {
				if wire.CheckValue([]byte(f.Name), []byte(e)) != nil {
					return r, fmt.Errorf("malformed grpc-encoding %q", grpcwire.Clip(e))
				}
				r.encoding = e
			}
		case "grpc-message":
			r.message = grpcwire.DecodeMessage(f.Value)
		case "grpc-status-details-bin":
			b, err := grpcwire.DecodeBinary(f.Value)
			if err != nil {
				return r, err
			}
			d, err := statusDetails(b)
			if err != nil {
				return r, err
			}
			r.details = d
		default:
			if grpcwire.IsReserved(f.Name) || wire.CheckKey([]byte(f.Name)) != nil {
				continue
			}
			v := f.Value
			if grpcwire.IsBinaryHeader(f.Name) {
				b, err := grpcwire.DecodeBinary(v)
				if err != nil {
					return r, fmt.Errorf("header %q: %w", f.Name, err)
				}
				v = string(b)
			} else if wire.CheckValue([]byte(f.Name), []byte(v)) != nil {
				continue
			}
			if r.md == nil {
				r.md = make(metadata.MD)
			}
			r.md[f.Name] = append(r.md[f.Name], v)
		}
	}
	return r, nil
}

// statusDetails returns the details (field 3, each a serialized
// google.protobuf.Any) of a serialized google.rpc.Status. They alias b.
func statusDetails(b []byte) ([][]byte, error) {
	var details [][]byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: grpc-status-details-bin: %v", grpcwire.ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if num == 3 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: grpc-status-details-bin: %v", grpcwire.ErrMalformed, protowire.ParseError(n))
			}
			details = append(details, v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("%w: grpc-status-details-bin: %v", grpcwire.ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return details, nil
}

// httpFailure is the status of a response whose HTTP status or
// content-type says it is not gRPC, as PROTOCOL-HTTP2.md and
// http-grpc-status-mapping.md say: the code from the HTTP status.
func httpFailure(r response) (codes.Code, string) {
	if r.httpStatus != 200 {
		return grpcwire.CodeForHTTPStatus(r.httpStatus), fmt.Sprintf("unexpected HTTP status code received from server: %d (content-type %q)", r.httpStatus, grpcwire.Clip(r.contentType))
	}
	return codes.Unknown, fmt.Sprintf("unexpected content-type %q from the server: not gRPC", grpcwire.Clip(r.contentType))
}
