package health

import (
	"context"
	"testing"

	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// gatedStream is a Watch stream whose first Send blocks until release
// closes: a watcher that does not read.
type gatedStream struct {
	rpc.ServerStream // nil: only Context and Send are used
	ctx              context.Context
	entered, release chan struct{}
	sent             chan healthpb.HealthCheckResponse_ServingStatus // unbuffered: the test takes each
	n                int
}

func (g *gatedStream) Context() context.Context { return g.ctx }

func (g *gatedStream) Send(m *healthpb.HealthCheckResponse) error {
	if g.n == 0 {
		close(g.entered)
		<-g.release
	}
	g.n++
	select {
	case g.sent <- m.GetStatus():
		return nil
	case <-g.ctx.Done():
		return g.ctx.Err()
	}
}

// TestWatchCoalesces: while a watcher is stuck sending, a thousand status
// changes leave it one status to send, the latest, not a queue of them.
func TestWatchCoalesces(t *testing.T) {
	s := NewServer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := &gatedStream{ctx: ctx, entered: make(chan struct{}), release: make(chan struct{}), sent: make(chan healthpb.HealthCheckResponse_ServingStatus)}
	done := make(chan error, 1)
	go func() { done <- s.Watch(&healthpb.HealthCheckRequest{Service: "kv"}, g) }()

	<-g.entered // sending SERVICE_UNKNOWN, and stuck there
	for i := range 1000 {
		st := healthpb.HealthCheckResponse_SERVING
		if i%2 == 0 {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		s.SetServingStatus("kv", st)
	}
	close(g.release)
	if got := <-g.sent; got != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("first status sent = %v, want SERVICE_UNKNOWN", got)
	}
	if got := <-g.sent; got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("second status sent = %v, want SERVING (the latest)", got)
	}
	cancel()
	<-done
	if g.n != 2 {
		t.Errorf("Watch sent %d statuses, want 2: the first and the latest", g.n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.watchers) != 0 {
		t.Errorf("watchers left after Watch returned: %v", s.watchers)
	}
}
