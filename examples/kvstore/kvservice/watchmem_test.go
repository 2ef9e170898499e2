package kvservice

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// stallingPipe dials connections whose reading the test can stop: a client
// that does not read, as far as the server can tell.
type stallingPipe struct {
	transport.Transport
	dialed chan *pipe.Conn
}

func (s stallingPipe) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := s.Transport.Dial(ctx, addr)
	if err == nil {
		s.dialed <- c.(*pipe.Conn)
	}
	return c, err
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestWatchersOfAStalledClientHoldLittle: many watches from the oldest
// revision, over a long history, on a connection whose client reads
// nothing. Each reads the change log only when its client can take what it
// sends, a little at a time, so together they hold a few MiB, not the
// history once each. (Issue 20 item 2: 500 such watches took a kvserver
// from 63 MiB to 2.4 GiB, each holding 4 MiB of changes in a blocked Send.)
func TestWatchersOfAStalledClientHoldLittle(t *testing.T) {
	const (
		watchers = 50
		revs     = 32
		value    = 256 << 10 // 8 MiB of history
	)
	s, st := openService(t)
	big := make([]byte, value)
	for i := range revs {
		if err := st.Put([]byte(fmt.Sprint("k", i)), big); err != nil {
			t.Fatal(err)
		}
	}
	tr := stallingPipe{pipe.New(pipe.Options{}), make(chan *pipe.Conn, 1)}
	srv := rpc.NewServer()
	kvpb.RegisterKVServer(srv, s)
	lis, err := tr.Listen("watchmem:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { s.Shutdown(); srv.Stop(); <-served }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc, err := rpc.Dial(ctx, "pipe://"+lis.Addr().String(), rpc.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := <-tr.dialed
	before := liveHeap()
	client.Stall(true)
	c := kvpb.NewKVClient(cc)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for range watchers {
		if _, err := c.Watch(wctx, &kvpb.WatchRequest{FromRevision: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Once the watchers wait, what they hold stays; a watcher that reads
	// and holds its whole history would reach 8 MiB × 50 on its own.
	held := func() uint64 {
		if h := liveHeap(); h > before {
			return h - before
		}
		return 0
	}
	var peak uint64
	for range 20 {
		peak = max(peak, held())
		time.Sleep(20 * time.Millisecond) // a sample, not a verdict: the bound holds at every one
	}
	// 16–25 MiB on an idle machine; one sample reached 51 MiB on a loaded one
	// (watchers still mid-read when sampled). The defect this guards
	// against holds the history once per watcher: 8 MiB × 50 = 400 MiB.
	const bound = 96 << 20
	t.Logf("%d watchers of a stalled client: %d MiB more in the heap (bound %d MiB)", watchers, peak>>20, bound>>20)
	if peak > bound {
		t.Fatalf("%d watchers of a client that reads nothing hold %d MiB, bound %d MiB", watchers, peak>>20, bound>>20)
	}
	client.Stall(false)
}
