package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// The streaming Echo: one bidirectional method that sends back every
// message it receives, described by hand (as grpcecho describes gRPC's) so
// that the bench needs no .proto of its own. Its messages are echopb's.
const (
	StreamServiceName    = "rdmarpc.bench.v1.StreamEcho"
	StreamEchoFullMethod = "/" + StreamServiceName + "/Echo"
)

var streamDesc = rpc.ServiceDesc{
	ServiceName: StreamServiceName,
	HandlerType: (*any)(nil),
	Streams: []rpc.StreamDesc{{
		StreamName:    "Echo",
		Handler:       streamEchoHandler,
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: "bench/stream.go",
}

// streamEchoHandler echoes until the client half-closes.
func streamEchoHandler(_ any, stream rpc.ServerStream) error {
	for {
		req := new(echopb.SayRequest)
		if err := stream.RecvMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := stream.SendMsg(&echopb.SayResponse{Message: req.Message, Payload: req.Payload}); err != nil {
			return err
		}
	}
}

// EchoStream is one open stream of the streaming Echo: one goroutine may
// Send while another Receives.
type EchoStream interface {
	Send(*echopb.SayRequest) error
	Recv() (*echopb.SayResponse, error)
	CloseSend() error
}

// Streamer opens streams of the streaming Echo; both implementations'
// clients are one.
type Streamer interface {
	OpenStream(ctx context.Context) (EchoStream, error)
}

type rdmarpcStream struct{ cs rpc.ClientStream }

func (s rdmarpcStream) Send(m *echopb.SayRequest) error { return s.cs.SendMsg(m) }
func (s rdmarpcStream) Recv() (*echopb.SayResponse, error) {
	m := new(echopb.SayResponse)
	if err := s.cs.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}
func (s rdmarpcStream) CloseSend() error { return s.cs.CloseSend() }

// OpenStream opens a streaming Echo on the client's connection.
func (c rdmarpcClient) OpenStream(ctx context.Context) (EchoStream, error) {
	cs, err := c.cc.NewStream(ctx, &streamDesc.Streams[0], StreamEchoFullMethod)
	if err != nil {
		return nil, err
	}
	return rdmarpcStream{cs}, nil
}

// The modes of a cell: what one "call" is.
const (
	ModeUnary    = ""         // a unary Say
	ModePingPong = "pingpong" // one message each way on a long-lived stream
	ModeStream   = "stream"   // a one-way flood: messages sent back to back, the echoes counted
)

// RunPingPong is Run over streams: each caller opens one stream and sends
// one message, waits for its echo, and sends the next. Latency is that
// round trip.
func RunPingPong(ctx context.Context, s Streamer, cfg Config) (Result, error) {
	conc := max(cfg.Concurrency, 1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]EchoStream, conc)
	for i := range streams {
		st, err := s.OpenStream(sctx)
		if err != nil {
			return Result{}, err
		}
		streams[i] = st
	}
	defer func() {
		for _, st := range streams {
			st.CloseSend()
			st.Recv() // io.EOF: the server's end
		}
	}()
	callers := make([]caller, conc)
	for i, st := range streams {
		callers[i] = func(req *echopb.SayRequest) (*echopb.SayResponse, error) {
			if err := st.Send(req); err != nil {
				return nil, err
			}
			return st.Recv()
		}
	}
	return run(ctx, callers, cfg)
}

// RunStream floods: each of cfg.Concurrency streams has a sender that
// sends messages back to back (as fast as flow control lets it) and a
// receiver that counts the echoes. A "call" is one message echoed: its
// throughput is messages per second, MB/s counts the payload once per
// message. Latency is not measured (the figures are zero): a flood's
// latency is its queue.
func RunStream(ctx context.Context, s Streamer, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	r := Result{Impl: cfg.Impl, Transport: cfg.Transport, Size: cfg.Size, Concurrency: cfg.Concurrency}
	payload := make([]byte, cfg.Size)
	warm, _, err := flood(ctx, s, payload, cfg.Concurrency, cfg.Warmup)
	if err != nil {
		return r, err
	}
	m := startMeasure(cfg.Server)
	n, elapsed, err := flood(ctx, s, payload, cfg.Concurrency, cfg.Duration)
	if merr := m.stop(&r, n); err == nil {
		err = merr
	}
	if err != nil {
		return r, err
	}
	r.Calls, r.WarmupCalls, r.Elapsed = n, warm, elapsed
	return r, nil
}

// flood runs conc streams for d and returns the echoes received and the
// time from the start until the last stream ended.
func flood(ctx context.Context, s Streamer, payload []byte, conc int, d time.Duration) (int64, time.Duration, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		counts = make([]int64, conc)
		errs   = make([]error, 2*conc)
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		st, err := s.OpenStream(sctx)
		if err != nil {
			cancel()
			wg.Wait()
			return 0, 0, err
		}
		wg.Go(func() { // the sender
			req := &echopb.SayRequest{Payload: payload}
			for time.Now().Before(deadline) && sctx.Err() == nil {
				if err := st.Send(req); err != nil {
					errs[2*w] = err
					cancel()
					return
				}
			}
			errs[2*w] = st.CloseSend()
		})
		wg.Go(func() { // the receiver, until the server's end
			for {
				resp, err := st.Recv()
				if errors.Is(err, io.EOF) {
					return
				}
				if err == nil && len(resp.GetPayload()) != len(payload) {
					err = fmt.Errorf("bench: echo returned %d payload bytes, sent %d", len(resp.GetPayload()), len(payload))
				}
				if err != nil {
					errs[2*w+1] = err
					cancel()
					return
				}
				counts[w]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var n int64
	for _, k := range counts {
		n += k
	}
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return n, elapsed, err
	}
	return n, elapsed, nil
}
