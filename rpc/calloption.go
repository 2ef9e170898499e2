package rpc

import (
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/metadata"
)

// CallOption configures one call made through Invoke.
type CallOption interface {
	apply(*callInfo)
}

// callInfo is what the call options of one call add up to.
type callInfo struct {
	// compressor is UseCompressor's name ("" for none), comp the
	// compressor it names, once the call looked it up.
	compressor string
	comp       encoding.Compressor

	header      *metadata.MD
	trailer     *metadata.MD
	maxRecvSize int // 0: the connection's limit
	maxSendSize int // 0: the connection's limit
	peer        *Peer
	// waitForReady: wait for a connection while the ClientConn backs off
	// after failed dials, instead of failing at once.
	waitForReady bool
	creds        []credentials.PerRPCCredentials // the call's own, after the client's
	// attemptHeader, set by the retry loop, receives the response
	// headers: once the server sent some, the call is committed.
	attemptHeader *metadata.MD
	// attemptTrailer, set by the retry loop, receives the response
	// trailers: the server's grpc-retry-pushback-ms is there.
	attemptTrailer *metadata.MD
	// pickTrailer, set when the balancer's pick has a Done, receives
	// the attempt's trailer for its DoneInfo.
	pickTrailer *metadata.MD
	// retryBuffer bounds what a call keeps to replay on a retry
	// (MaxRetryRPCBufferSize); 0: defaultRetryBufferSize.
	retryBuffer int
}

type callOptionFunc func(*callInfo)

func (f callOptionFunc) apply(ci *callInfo) { f(ci) }

// Header stores the response headers the server sent into *md once the call
// has returned.
func Header(md *metadata.MD) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.header = md })
}

// Trailer stores the response trailers the server sent into *md once the call
// has returned.
func Trailer(md *metadata.MD) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.trailer = md })
}

// MaxCallRecvMsgSize caps the size of this call's response; a larger one
// fails the call with ResourceExhausted.
func MaxCallRecvMsgSize(n int) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.maxRecvSize = n })
}

// MaxCallSendMsgSize caps the size of this call's request; a larger one fails
// the call with ResourceExhausted before anything is sent.
func MaxCallSendMsgSize(n int) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.maxSendSize = n })
}

// PeerOption stores the address of the server that served the call into *p.
func PeerOption(p *Peer) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.peer = p })
}

// WaitForReady, with true, makes a call made while the ClientConn cannot
// connect wait (within its context) for the next connection attempt to
// succeed, instead of failing at once with Unavailable, as gRPC-go's.
func WaitForReady(waitForReady bool) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.waitForReady = waitForReady })
}

// MaxRetryRPCBufferSize bounds the bytes of requests a call keeps to send
// again on a retry, as gRPC-go's (default 256 KiB): a call whose requests
// outgrow it is committed to its current attempt and not retried.
func MaxRetryRPCBufferSize(bytes int) CallOption {
	return callOptionFunc(func(ci *callInfo) { ci.retryBuffer = bytes })
}

// retryBufferOf is the retry buffer the client's default call options,
// then the call's own, set.
func retryBufferOf(defaults, opts []CallOption) int {
	var ci callInfo
	for _, list := range [2][]CallOption{defaults, opts} {
		for _, o := range list {
			if o != nil {
				o.apply(&ci)
			}
		}
	}
	if ci.retryBuffer <= 0 {
		return defaultRetryBufferSize
	}
	return ci.retryBuffer
}
