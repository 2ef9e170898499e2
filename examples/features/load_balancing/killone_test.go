package load_balancing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

// countingServer is an echo backend that counts the calls it served.
type countingServer struct {
	echoServer
	calls atomic.Int64
}

func (s *countingServer) Say(ctx context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	s.calls.Add(1)
	return s.echoServer.Say(ctx, in)
}

// TestKillOneBackend: round_robin over three tcp backends with a retry
// policy on UNAVAILABLE; eight callers call without pause, one backend is
// stopped while they do, and no call fails while the other two keep
// serving.
func TestKillOneBackend(t *testing.T) {
	const backends, callers = 3, 8
	var (
		servers = make([]*rpc.Server, backends)
		counts  = make([]*countingServer, backends)
		served  = make([]chan error, backends)
		addrs   []string
	)
	for i := range backends {
		lis, err := transport.Listen("tcp://127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, "tcp://"+lis.Addr().String())
		counts[i] = &countingServer{echoServer: echoServer{addr: lis.Addr().String()}}
		servers[i] = rpc.NewServer()
		echopb.RegisterEchoServer(servers[i], counts[i])
		served[i] = make(chan error, 1)
		go func() { served[i] <- servers[i].Serve(lis) }()
	}
	defer func() {
		for i := range backends {
			servers[i].Stop()
			<-served[i]
		}
	}()
	target, err := cli.StaticTarget(addrs)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := rpc.NewClient(target, rpc.WithDefaultServiceConfig(`{
		"loadBalancingConfig": [{"round_robin":{}}],
		"methodConfig": [{"name": [{"service": "rdmarpc.echo.v1.Echo"}],
			"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := echopb.NewEchoClient(cc)

	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		ok       atomic.Int64
		failMu   sync.Mutex
		failures []string
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Say(context.Background(), &echopb.SayRequest{Message: fmt.Sprintf("caller %d call %d", i, n)}); err != nil {
					failMu.Lock()
					failures = append(failures, err.Error())
					failMu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	// waitFor waits until every backend in live has served at least n
	// calls more than in base: progress, not time, decides.
	waitFor := func(base []int64, live []int, n int64) {
		for {
			done := true
			for _, i := range live {
				if counts[i].calls.Load() < base[i]+n {
					done = false
				}
			}
			if done {
				return
			}
			failMu.Lock()
			bad := len(failures)
			failMu.Unlock()
			if bad > 0 {
				return // reported below
			}
			_, _ = c.Say(context.Background(), &echopb.SayRequest{Message: "poll"}, rpc.WaitForReady(true))
		}
	}
	snapshot := func() []int64 {
		s := make([]int64, backends)
		for i, b := range counts {
			s[i] = b.calls.Load()
		}
		return s
	}
	waitFor(make([]int64, backends), []int{0, 1, 2}, 200)
	servers[1].Stop() // the killed backend: its connections break mid-call
	<-served[1]
	served[1] <- nil
	after := snapshot()
	waitFor(after, []int{0, 2}, 500)
	close(stop)
	wg.Wait()

	if len(failures) > 0 {
		t.Fatalf("%d calls failed (of %d), first: %s", len(failures), int64(len(failures))+ok.Load(),
			strings.Join(failures[:min(3, len(failures))], "; "))
	}
	final := snapshot()
	for _, i := range []int{0, 2} {
		if final[i] < after[i]+500 {
			t.Errorf("backend %d served %d calls after the kill, want at least 500", i, final[i]-after[i])
		}
	}
	t.Logf("%d calls, none failed; served before the kill %v, at the end %v", ok.Load(), after, final)
}
