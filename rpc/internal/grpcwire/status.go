package grpcwire

import (
	"golang.org/x/net/http2"

	"github.com/rdmarpc/rdmarpc/codes"
)

// CodeForHTTPStatus is the status of a response that has no grpc-status, by
// its HTTP status (the spec's table: the peer was not a gRPC server, or a
// proxy answered).
func CodeForHTTPStatus(httpStatus int) codes.Code {
	switch httpStatus {
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	}
	return codes.Unknown
}

// CodeForReset is the status of a stream the peer reset before its
// trailers (the spec's table for RST_STREAM).
func CodeForReset(e http2.ErrCode) codes.Code {
	switch e {
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable // never processed: safe to retry
	case http2.ErrCodeCancel:
		return codes.Canceled
	case http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal // NO_ERROR before trailers, PROTOCOL_ERROR, INTERNAL_ERROR, ...
}

// ResetFor is the RST_STREAM code a side sends to end a stream early for a
// status: the client cancelling (Canceled, DeadlineExceeded) sends CANCEL,
// anything else INTERNAL_ERROR.
func ResetFor(c codes.Code) http2.ErrCode {
	if c == codes.Canceled || c == codes.DeadlineExceeded {
		return http2.ErrCodeCancel
	}
	return http2.ErrCodeInternal
}
