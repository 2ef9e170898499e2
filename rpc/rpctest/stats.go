package rpctest

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/stats"
)

// connRecorder is a stats handler that keeps what it is told of
// connections and counts RPC Begins and Ends.
type connRecorder struct {
	mu          sync.Mutex
	infos       []*stats.ConnTagInfo
	begun, done int
	ended       chan struct{} // closed at the first End
}

func (r *connRecorder) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	r.mu.Lock()
	r.infos = append(r.infos, info)
	r.mu.Unlock()
	return ctx
}

func (r *connRecorder) HandleConn(context.Context, stats.ConnStats) {}

func (r *connRecorder) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (r *connRecorder) HandleRPC(_ context.Context, s stats.RPCStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch s.(type) {
	case *stats.Begin:
		r.begun++
	case *stats.End:
		if r.done++; r.done == 1 {
			close(r.ended)
		}
	}
}

// testStats: both ends' stats handlers hear of the connection (the same
// transport named on both) and of the call; a transport that counts has
// counted the call once it is done.
func (s *suite) testStats(t *testing.T) {
	srv, cli := &connRecorder{ended: make(chan struct{})}, &connRecorder{ended: make(chan struct{})}
	e := s.start(t, rpc.StatsHandler(srv))
	_, c := s.dial(t, e, rpc.WithStatsHandler(cli))
	cli.mu.Lock()
	if len(cli.infos) != 1 {
		cli.mu.Unlock()
		t.Fatalf("the client's handler was told of %d connections, want 1", len(cli.infos))
	}
	info := cli.infos[0]
	cli.mu.Unlock()
	var before map[string]uint64
	if info.Counters != nil {
		before = info.Counters.Counters()
	}
	if _, err := c.Echo(s.ctx(t), &testpb.EchoRequest{Payload: []byte("stats")}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the server's End", srv.ended)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	cli.mu.Lock()
	defer cli.mu.Unlock()
	if srv.begun != 1 || srv.done != 1 || cli.begun != 1 || cli.done != 1 {
		t.Errorf("Begin/End: server %d/%d, client %d/%d; want 1/1 each", srv.begun, srv.done, cli.begun, cli.done)
	}
	if len(srv.infos) != 1 {
		t.Fatalf("the server's handler was told of %d connections, want 1", len(srv.infos))
	}
	if info.Transport == "" || srv.infos[0].Transport != info.Transport {
		t.Errorf("transport named %q by the client, %q by the server: want one name", info.Transport, srv.infos[0].Transport)
	}
	if info.RemoteAddr == nil || srv.infos[0].RemoteAddr == nil {
		t.Errorf("ConnTagInfo without a remote address: %+v, %+v", info, srv.infos[0])
	}
	if info.Counters == nil {
		return // this transport counts nothing
	}
	after := info.Counters.Counters()
	grew := false
	for name, v := range after {
		if v > before[name] {
			grew = true
		}
	}
	if !grew {
		t.Errorf("no transport counter grew over a call: before %v, after %v", before, maps.Clone(after))
	}
	t.Logf("transport %s, counters after one call: %v", info.Transport, after)
}
