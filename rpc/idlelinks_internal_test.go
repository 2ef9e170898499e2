package rpc

import (
	"context"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// linkGoroutines counts the goroutines running one of a link's methods
// (before issue 10, every link's control loop).
func linkGoroutines() int {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "rpc.(*link).") {
			n++
		}
	}
	return n
}

// pipePairs dials n pipe connections and returns both ends of each.
func pipePairs(t *testing.T, n int) (dialed, accepted []transport.Conn) {
	tr := pipe.New(pipe.Options{})
	lis, err := tr.Listen("idle:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx := context.Background()
	acc := make(chan transport.Conn, n)
	errc := make(chan error, 1)
	go func() {
		for range n {
			c, err := lis.Accept(ctx)
			if err != nil {
				errc <- err
				return
			}
			acc <- c
		}
		errc <- nil
	}()
	for range n {
		c, err := tr.Dial(ctx, lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		dialed = append(dialed, c)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for range n {
		accepted = append(accepted, <-acc)
	}
	return dialed, accepted
}

// TestIdleLinksNoGoroutines (issue 10 item 3): a thousand idle links,
// with keepalive and the response watch armed, run no goroutine of their
// own (their timers share the process's one), and keepalive still pings
// on every one of them.
func TestIdleLinksNoGoroutines(t *testing.T) {
	const n = 1000
	for _, c := range []struct {
		name string
		ka   Keepalive
	}{
		// Nothing falls due while the goroutines are counted.
		{"idle", Keepalive{Time: time.Hour, Timeout: time.Hour}},
		// Every link pings its silent peer; none is given up.
		{"pinging", Keepalive{Time: 20 * time.Millisecond, Timeout: time.Hour}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dialed, accepted := pipePairs(t, n)
			before := runtime.NumGoroutine()
			links := make([]*conn.Link, n)
			for i, tc := range dialed {
				links[i] = conn.NewLink(tc, conn.LinkConfig{Log: zap.NewNop(), Keepalive: c.ka.link(), Watch: conn.SendWatch{After: time.Hour, Stuck: func() {}}})
			}
			defer func() {
				for i, l := range links {
					l.Close(status.New(codes.Canceled, "test over"))
					l.Wait()
					accepted[i].Close()
				}
			}()
			if c.ka.Time == time.Hour {
				if g := linkGoroutines(); g != 0 {
					t.Fatalf("%d goroutines in links' methods for %d idle links, want 0", g, n)
				}
				if d := runtime.NumGoroutine() - before; d > 10 {
					t.Fatalf("%d idle links added %d goroutines", n, d)
				}
				return
			}
			// Each peer, in turn, receives its link's keepalive ping.
			ctx := context.Background()
			for i, peer := range accepted {
				b, err := peer.Recv(ctx)
				if err != nil {
					t.Fatalf("peer %d: %v", i, err)
				}
				h, _, err := wire.ParseHeader(b.Bytes())
				if err != nil || h.Kind != wire.KindPing || h.Flags != 0 {
					t.Fatalf("peer %d received %+v (%v), want a keepalive PING", i, h, err)
				}
				b.Release()
				if links[i].Ctx.Err() != nil {
					t.Fatalf("link %d closed: %v", i, links[i].CloseStatus())
				}
			}
		})
	}
}

// TestIdleTimeoutNoGoroutine: the idle timeout of a ClientConn is a timer
// on the shared goroutine, not a goroutine per ClientConn.
func TestIdleTimeoutNoGoroutine(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	ccs := make([]*ClientConn, 100)
	for i := range ccs {
		cc, err := NewClient("pipe://nowhere", WithTransport(tr), WithIdleTimeout(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ccs[i] = cc
	}
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	if n := strings.Count(string(buf), "rpc.(*ClientConn)."); n != 0 {
		t.Fatalf("%d goroutines in ClientConn methods for %d idle ClientConns, want 0", n, len(ccs))
	}
}
