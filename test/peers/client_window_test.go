package peers

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
)

// Some 300 server streams, each sent more than its 64 KiB window while
// nobody reads: together past the rpc layer's connection window (16 MiB).
// The grpc:// client hands the rpc layer no more than that window (the
// rest waits in HTTP/2's windows), and every stream completes once all
// are read: holding back does not deadlock. (That the window was overrun
// before is shown by rpc/internal/h2client's TestRPCConnectionWindow;
// here the timing rarely lets it happen.)
func TestClientConnectionWindowManyStreams(t *testing.T) {
	const streams, msgs, size = 300, 3, 60000
	addr, _ := grpcgoServer(t)
	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr)))
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	params := make([]*testpb.ResponseParameters, msgs)
	for i := range params {
		params[i] = &testpb.ResponseParameters{Size: size}
	}
	var sts []testpb.TestService_StreamingOutputCallClient
	for i := range streams {
		st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params})
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		sts = append(sts, st)
	}
	// Every stream's headers came: the server is sending to all of them.
	for i, st := range sts {
		if _, err := st.Header(); err != nil {
			t.Fatalf("stream %d: headers: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i, st := range sts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range msgs {
				r, err := st.Recv()
				if err != nil {
					errs <- fmt.Errorf("stream %d, message %d: %w", i, k, err)
					return
				}
				if len(r.GetPayload().GetBody()) != size {
					errs <- fmt.Errorf("stream %d, message %d: %d bytes", i, k, len(r.GetPayload().GetBody()))
					return
				}
			}
			if _, err := st.Recv(); err != io.EOF {
				errs <- fmt.Errorf("stream %d ended with %v, not io.EOF", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 5 {
		t.Errorf("and %d more", n-5)
	}
}
