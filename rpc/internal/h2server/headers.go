package h2server

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// request is what a request's HEADERS say.
type request struct {
	method      string        // ":path"
	timeout     time.Duration // grpc-timeout; 0: none
	md          metadata.MD   // the call's metadata: no pseudo or reserved headers, -bin values decoded
	contentType string        // the content-type to answer with
	encoding    string        // grpc-encoding: the messages' compressor, "" for none
}

// refusal is why a request cannot be served: an HTTP status other than 200
// (415 for a content type that is not gRPC's), or a gRPC status.
type refusal struct {
	httpStatus int
	code       codes.Code
	msg        string
}

// decodeRequest turns a request's header fields into a call, or says why
// it cannot be one. Metadata is bounded by the header list the framer let
// through; each entry is checked as rdmarpc's wire checks it.
func decodeRequest(fields []hpack.HeaderField) (request, *refusal) {
	var r request
	var method, ct string
	var sawCT bool
	for _, f := range fields {
		switch f.Name {
		case ":path":
			r.method = f.Value
		case ":method":
			method = f.Value
		case "content-type":
			ct, sawCT = f.Value, true
		case "grpc-timeout":
			d, err := grpcwire.DecodeTimeout(f.Value)
			if err != nil {
				return request{}, &refusal{code: codes.Internal, msg: fmt.Sprintf("malformed grpc-timeout %q", grpcwire.Clip(f.Value))}
			}
			if d == 0 {
				d = 1 // "0S": already past
			}
			r.timeout = d
		case "grpc-encoding":
			// The rpc layer decompresses (bounded) and answers in kind, or
			// answers Unimplemented for a compressor it does not have.
			if e := grpcwire.Encoding(f.Value); e != "" {
				if wire.CheckValue([]byte(f.Name), []byte(e)) != nil {
					return request{}, &refusal{code: codes.Internal, msg: fmt.Sprintf("malformed grpc-encoding %q", grpcwire.Clip(e))}
				}
				r.encoding = e
				r.md = appendMD(r.md, f.Name, e)
			}
		case "user-agent":
			if wire.CheckValue([]byte(f.Name), []byte(f.Value)) == nil {
				r.md = appendMD(r.md, f.Name, f.Value)
			}
		case "grpc-accept-encoding":
			// What the client can decompress: the rpc layer lets a handler
			// answer compressed with one of them (SetSendCompressor). In
			// the handler's metadata too, as gRPC-go's server puts it.
			if f.Value != "" && wire.CheckValue([]byte(f.Name), []byte(f.Value)) == nil {
				r.md = appendMD(r.md, f.Name, f.Value)
			}
		default:
			if grpcwire.IsReserved(f.Name) {
				continue
			}
			if wire.CheckKey([]byte(f.Name)) != nil {
				return request{}, &refusal{code: codes.Internal, msg: fmt.Sprintf("header name %q is not valid metadata", grpcwire.Clip(f.Name))}
			}
			v := f.Value
			if grpcwire.IsBinaryHeader(f.Name) {
				b, err := grpcwire.DecodeBinary(v)
				if err != nil {
					return request{}, &refusal{code: codes.Internal, msg: fmt.Sprintf("header %q: %v", grpcwire.Clip(f.Name), err)}
				}
				v = string(b)
			}
			// (A key of just "-bin" is no binary key for rdmarpc's wire.)
			if wire.CheckValue([]byte(f.Name), []byte(v)) != nil {
				return request{}, &refusal{code: codes.Internal, msg: fmt.Sprintf("header %q has a value that is not printable ASCII", grpcwire.Clip(f.Name))}
			}
			r.md = appendMD(r.md, f.Name, v)
		}
	}
	if !sawCT {
		return request{}, &refusal{httpStatus: 415, msg: "missing content-type: a gRPC request is application/grpc"}
	}
	sub, ok := grpcwire.ContentSubtype(ct)
	if !ok {
		return request{}, &refusal{httpStatus: 415, msg: fmt.Sprintf("content-type %q is not gRPC's", grpcwire.Clip(ct))}
	}
	if sub != "" && sub != "proto" {
		return request{}, &refusal{code: codes.Unimplemented, msg: fmt.Sprintf("content-subtype %q is not supported (only proto)", grpcwire.Clip(sub))}
	}
	r.contentType = grpcwire.ContentType(sub)
	if method != "POST" {
		return request{}, &refusal{httpStatus: 405, msg: fmt.Sprintf(":method %q, not POST", grpcwire.Clip(method))}
	}
	if !strings.HasPrefix(r.method, "/") {
		return request{}, &refusal{code: codes.Unimplemented, msg: fmt.Sprintf("malformed method name %q", grpcwire.Clip(r.method))}
	}
	return r, nil
}

func appendMD(md metadata.MD, k, v string) metadata.MD {
	if md == nil {
		md = make(metadata.MD)
	}
	md[k] = append(md[k], v)
	return md
}
