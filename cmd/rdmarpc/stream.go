package main

import (
	"context"
	"errors"
	"io"

	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// statusErr is a call's own failure (a status from the server, or the
// connection's), as opposed to one of the command's: main exits 64 + its
// code.
type statusErr struct{ err error }

func (e *statusErr) Error() string { return e.err.Error() }
func (e *statusErr) Unwrap() error { return e.err }

// streamer opens streams: *rpc.ClientConn, or a test's fake.
type streamer interface {
	NewStream(ctx context.Context, desc *rpc.StreamDesc, method string, opts ...rpc.CallOption) (rpc.ClientStream, error)
}

// callStream runs a streaming method: it sends every request next gives
// (JSON objects from -d or stdin, read as they are sent), half-closes, and
// prints each response as it arrives, one line each. Sending runs in a
// goroutine of its own so that a bidi stream's responses print while its
// requests are still being read; callStream waits for it before returning.
//
// A request that is not valid JSON cancels the stream (the server must not
// take a cut-short stream for a complete one) and is the error returned.
//
// Without rdmarpc's streaming runtime, ClientConn.NewStream answers
// Unimplemented and that is what the command prints.
func callStream(ctx context.Context, cc streamer, m dynamic.Method, next func() (*dynamicpb.Message, error), enc *dynamic.Encoder) (x exchange, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	desc := &rpc.StreamDesc{
		StreamName:    string(m.Desc.Name()),
		ServerStreams: m.Desc.IsStreamingServer(),
		ClientStreams: m.Desc.IsStreamingClient(),
	}
	cs, err := cc.NewStream(ctx, desc, m.FullMethod)
	if err != nil {
		return x, &statusErr{err}
	}
	inputErr := make(chan error, 1)
	go func() { inputErr <- sendAll(cs, next, cancel, &x.sent) }()

	var recvErr, outErr error
	for {
		resp := dynamicpb.NewMessage(m.Desc.Output())
		if recvErr = cs.RecvMsg(resp); recvErr != nil {
			break
		}
		x.received++
		if outErr = enc.Encode(resp); outErr != nil {
			cancel()
			break
		}
	}
	x.header, _ = cs.Header()
	x.trailer = cs.Trailer()
	cancel()            // the sender stops at its next message, if it has not yet
	inErr := <-inputErr // after this, x.sent is final
	switch {
	case inErr != nil:
		return x, inErr
	case outErr != nil:
		return x, outErr
	case recvErr != nil && !errors.Is(recvErr, io.EOF):
		return x, &statusErr{recvErr}
	}
	return x, nil
}

// sendAll sends the requests, then half-closes. It returns only input
// errors (a send that fails means the stream ended, and RecvMsg reports
// why); on one it cancels the stream. It counts the messages sent in *sent.
func sendAll(cs rpc.ClientStream, next func() (*dynamicpb.Message, error), cancel context.CancelFunc, sent *int) error {
	for {
		if cs.Context().Err() != nil {
			return nil
		}
		req, err := next()
		if errors.Is(err, io.EOF) {
			cs.CloseSend()
			return nil
		}
		if err != nil {
			cancel()
			return err
		}
		if cs.SendMsg(req) != nil {
			return nil
		}
		*sent++
	}
}
