package peers

import (
	"context"
	"io"
	"sync"
	"testing"

	gtesting "google.golang.org/grpc/interop/grpc_testing"
)

// TestServerGRPCGoLargeConcurrentStreams: 32 bidirectional streams at
// once, each sending and receiving 1 MiB messages (16 times each way the
// stream window, and together twice the connection window), all arrive
// whole: HTTP/2 flow control both ways, through the server's own windows.
func TestServerGRPCGoLargeConcurrentStreams(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			cc := dial(t, target(startServer(t, false), network))
			tc := gtesting.NewTestServiceClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			const streams, msgs, size = 32, 3, 1 << 20
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			for range streams {
				wg.Go(func() {
					stream, err := tc.FullDuplexCall(ctx)
					if err != nil {
						errs <- err
						return
					}
					req := &gtesting.StreamingOutputCallRequest{
						ResponseParameters: []*gtesting.ResponseParameters{{Size: size}},
						Payload:            &gtesting.Payload{Body: make([]byte, size)},
					}
					for range msgs {
						if err := stream.Send(req); err != nil {
							errs <- err
							return
						}
						r, err := stream.Recv()
						if err != nil {
							errs <- err
							return
						}
						if len(r.GetPayload().GetBody()) != size {
							errs <- io.ErrShortBuffer
							return
						}
					}
					if err := stream.CloseSend(); err != nil {
						errs <- err
						return
					}
					if _, err := stream.Recv(); err != io.EOF {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestServerGRPCGoManyUnary: many concurrent unary calls of 256 KiB each
// way, more than the server's concurrency limit and its connection window
// at once.
func TestServerGRPCGoManyUnary(t *testing.T) {
	cc := dial(t, startServer(t, false).tcp)
	tc := gtesting.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	const calls, size = 200, 256 << 10
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			r, err := tc.UnaryCall(ctx, &gtesting.SimpleRequest{ResponseSize: size, Payload: &gtesting.Payload{Body: make([]byte, size)}})
			if err != nil {
				errs <- err
				return
			}
			if len(r.GetPayload().GetBody()) != size {
				errs <- io.ErrShortBuffer
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
