package peers

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// Large messages both ways on concurrent streams, far past every HTTP/2
// window (64 KiB per stream): flow control moves them all, with the
// client's stream windows larger than the default and not.
func TestClientLargeStreams(t *testing.T) {
	addr, _ := grpcgoServer(t, grpc.MaxRecvMsgSize(8<<20), grpc.MaxSendMsgSize(8<<20))
	for _, opts := range [][]rpc.DialOption{nil, {rpc.WithInitialWindowSize(1 << 20)}} {
		tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr, append(opts, rpc.WithDefaultCallOptions(rpc.MaxCallRecvMsgSize(8<<20)))...)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := tc.FullDuplexCall(ctx)
				if err != nil {
					errs <- err
					return
				}
				for i := range 4 {
					size := int32(1<<20 + i)
					if err := st.Send(&testpb.StreamingOutputCallRequest{
						ResponseParameters: []*testpb.ResponseParameters{{Size: size}, {Size: 3}},
						Payload:            &testpb.Payload{Body: make([]byte, 2<<20)},
					}); err != nil {
						errs <- err
						return
					}
					for _, want := range []int{int(size), 3} {
						r, err := st.Recv()
						if err != nil {
							errs <- err
							return
						}
						if len(r.GetPayload().GetBody()) != want {
							errs <- errors.New("a response of the wrong size")
							return
						}
					}
				}
				st.CloseSend()
				if _, err := st.Recv(); err != io.EOF {
					errs <- err
				}
			}()
		}
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			t.Errorf("options %v: %v", opts, err)
		}
	}
}

// With the server's SETTINGS_MAX_CONCURRENT_STREAMS of 2 and both slots
// held by streams, twenty concurrent calls all succeed once the streams
// end (the client waits for slots; that it never opens a stream past the
// limit is rpc/internal/h2client's TestStreamSlots).
func TestClientMaxConcurrentStreams(t *testing.T) {
	addr, _ := grpcgoServer(t, grpc.MaxConcurrentStreams(2))
	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Two streams hold both slots; a unary call waits for one.
	var streams []testpb.TestService_FullDuplexCallClient
	for range 2 {
		st, err := tc.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
				errs <- err
			}
		}()
	}
	for _, st := range streams {
		st.CloseSend()
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("stream end: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
