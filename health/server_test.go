package health_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hang bounds every wait that should end promptly; reaching it is a hang,
// not slowness.
const hang = time.Minute

// transports are what the tests run over: the in-memory pipe and TCP.
var transports = []struct {
	name string
	tr   func() transport.Transport
	addr string
}{
	{"pipe", func() transport.Transport { return pipe.New(pipe.Options{}) }, "health:0"},
	{"tcp", func() transport.Transport { return tcp.New(tcp.Options{}) }, "127.0.0.1:0"},
}

// forEach runs fn over each transport with a server serving hs and a
// client connected to it; both are stopped when the subtest ends.
func forEach(t *testing.T, fn func(t *testing.T, hs *health.Server, c healthpb.HealthClient)) {
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			tr := x.tr()
			hs := health.NewServer()
			srv := rpc.NewServer()
			healthpb.RegisterHealthServer(srv, hs)
			lis, err := tr.Listen(x.addr)
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(lis) }()
			t.Cleanup(func() {
				srv.Stop()
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			cc, err := rpc.Dial(ctx, lis.Addr().String(), rpc.WithTransport(tr))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			fn(t, hs, healthpb.NewHealthClient(cc))
		})
	}
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	t.Cleanup(cancel)
	return ctx
}

const (
	serving        = healthpb.HealthCheckResponse_SERVING
	notServing     = healthpb.HealthCheckResponse_NOT_SERVING
	serviceUnknown = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
)

func TestCheck(t *testing.T) {
	forEach(t, func(t *testing.T, hs *health.Server, c healthpb.HealthClient) {
		hs.SetServingStatus("kv", notServing)
		for _, tc := range []struct {
			service string
			want    healthpb.HealthCheckResponse_ServingStatus
			code    codes.Code
		}{
			{service: "", want: serving}, // the server itself, from the start
			{service: "kv", want: notServing},
			{service: "nope", code: codes.NotFound},
		} {
			resp, err := c.Check(ctx(t), &healthpb.HealthCheckRequest{Service: tc.service})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("Check(%q): %v, want code %v", tc.service, err, tc.code)
			}
			if err == nil && resp.GetStatus() != tc.want {
				t.Errorf("Check(%q) = %v, want %v", tc.service, resp.GetStatus(), tc.want)
			}
		}
	})
}

func TestList(t *testing.T) {
	forEach(t, func(t *testing.T, hs *health.Server, c healthpb.HealthClient) {
		hs.SetServingStatus("a", serving)
		hs.SetServingStatus("b", notServing)
		resp, err := c.List(ctx(t), &healthpb.HealthListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]healthpb.HealthCheckResponse_ServingStatus{"": serving, "a": serving, "b": notServing}
		if len(resp.GetStatuses()) != len(want) {
			t.Fatalf("List = %v, want %v", resp.GetStatuses(), want)
		}
		for name, st := range want {
			if got := resp.GetStatuses()[name].GetStatus(); got != st {
				t.Errorf("List[%q] = %v, want %v", name, got, st)
			}
		}
		// Past 100 services List refuses rather than grow its answer.
		for i := range 100 {
			hs.SetServingStatus(string(rune('A'+i%26))+string(rune('a'+i/26)), serving)
		}
		if _, err := c.List(ctx(t), &healthpb.HealthListRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("List of 103 services: %v, want ResourceExhausted", err)
		}
	})
}

// TestWatch follows one service through every kind of change: unknown,
// set, set to the same status (not sent again), Shutdown and Resume.
func TestWatch(t *testing.T) {
	forEach(t, func(t *testing.T, hs *health.Server, c healthpb.HealthClient) {
		wctx, cancel := context.WithCancel(ctx(t))
		defer cancel()
		w, err := c.Watch(wctx, &healthpb.HealthCheckRequest{Service: "kv"})
		if err != nil {
			t.Fatal(err)
		}
		next := func(want healthpb.HealthCheckResponse_ServingStatus) {
			t.Helper()
			resp, err := w.Recv()
			if err != nil {
				t.Fatalf("Recv: %v, want %v", err, want)
			}
			if resp.GetStatus() != want {
				t.Fatalf("Recv = %v, want %v", resp.GetStatus(), want)
			}
		}
		next(serviceUnknown)
		hs.SetServingStatus("kv", serving)
		next(serving)
		hs.SetServingStatus("kv", serving) // no change: nothing sent
		hs.SetServingStatus("kv", notServing)
		next(notServing)
		hs.SetServingStatus("other", serving) // another service: nothing sent
		hs.Resume()
		next(serving)
		hs.Shutdown()
		next(notServing)
		hs.SetServingStatus("kv", serving) // ignored while shut down
		hs.Resume()
		next(serving)
		if resp, err := c.Check(ctx(t), &healthpb.HealthCheckRequest{Service: "kv"}); err != nil || resp.GetStatus() != serving {
			t.Fatalf("Check after Resume = %v, %v; want SERVING", resp, err)
		}
		cancel()
		if _, err := w.Recv(); status.Code(err) != codes.Canceled {
			t.Fatalf("Recv after cancel: %v, want Canceled", err)
		}
	})
}

// TestWatchManyWatchers: every watcher of a service sees its change, and
// watchers of other services see nothing.
func TestWatchManyWatchers(t *testing.T) {
	forEach(t, func(t *testing.T, hs *health.Server, c healthpb.HealthClient) {
		hs.SetServingStatus("kv", serving)
		var ws []healthpb.Health_WatchClient
		for range 8 {
			w, err := c.Watch(ctx(t), &healthpb.HealthCheckRequest{Service: "kv"})
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := w.Recv(); err != nil || resp.GetStatus() != serving {
				t.Fatalf("first Recv = %v, %v; want SERVING", resp, err)
			}
			ws = append(ws, w)
		}
		hs.SetServingStatus("kv", notServing)
		for i, w := range ws {
			if resp, err := w.Recv(); err != nil || resp.GetStatus() != notServing {
				t.Fatalf("watcher %d: Recv = %v, %v; want NOT_SERVING", i, resp, err)
			}
		}
	})
}
