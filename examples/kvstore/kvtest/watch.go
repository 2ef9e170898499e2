package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvwatch"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// watch opens a Watch; it ends with the test.
func (s *suite) watch(t *testing.T, kv kvpb.KVClient, prefix string, from int64) kvpb.KV_WatchClient {
	t.Helper()
	w, err := kv.Watch(s.ctx(t), &kvpb.WatchRequest{Prefix: []byte(prefix), FromRevision: from})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	return w
}

// recv returns the next response of w that has events (progress reports
// are checked to move forward and skipped).
func recv(t *testing.T, w kvpb.KV_WatchClient, after int64) *kvpb.WatchResponse {
	t.Helper()
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("Watch.Recv after revision %d: %v", after, err)
		}
		if r.GetRevision() <= after && !(r.GetRevision() == after && len(r.GetEvents()) == 0) {
			t.Fatalf("revision %d after %d: out of order", r.GetRevision(), after)
		}
		after = r.GetRevision()
		if len(r.GetEvents()) > 0 {
			return r
		}
	}
}

// line renders one event as "REV TYPE key=value".
func line(rev int64, e *kvpb.Event) string {
	return fmt.Sprintf("%d %v %s=%s", rev, e.GetType(), e.GetKey(), e.GetValue())
}

// collect receives until n events arrived, and returns them as lines.
func collect(t *testing.T, w kvpb.KV_WatchClient, n int) []string {
	t.Helper()
	var lines []string
	rev := int64(0)
	for len(lines) < n {
		r := recv(t, w, rev)
		rev = r.GetRevision()
		for _, e := range r.GetEvents() {
			lines = append(lines, line(rev, e))
		}
	}
	return lines
}

// testWatchConcurrentWriters: writers on the watched prefix and off it; a
// live watcher sees every write to the prefix once, in revision order,
// each writer's in its own order; a replay from revision 1 afterwards
// sees the same; playing the events gives what a Scan shows.
func (s *suite) testWatchConcurrentWriters(t *testing.T) {
	addr := s.start(t, "")
	kv := s.dial(t, addr)
	live := s.watch(t, kv, "w/", 0)
	if r, err := live.Recv(); err != nil || r.GetRevision() != 0 || len(r.GetEvents()) != 0 {
		t.Fatalf("first response of a watch from now: %v, %v; want a progress report at 0", r, err)
	}
	const writers, perWriter = 4, 40
	var wg sync.WaitGroup
	for w := range writers {
		c := s.dial(t, addr)
		wg.Go(func() {
			for i := range perWriter {
				key := fmt.Sprintf("w/%d", i%5) // shared by the writers
				val := fmt.Sprintf("%d-%02d", w, i)
				var err error
				if i%4 == 3 {
					_, err = c.Batch(s.ctx(t), &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
						{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: []byte("x/" + val), Value: []byte(val)}}},
						{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: []byte(key), Value: []byte(val)}}},
					}})
				} else {
					_, err = c.Put(s.ctx(t), &kvpb.PutRequest{Key: []byte(key), Value: []byte(val)})
				}
				if err == nil && i%10 == 0 {
					_, err = c.Put(s.ctx(t), &kvpb.PutRequest{Key: []byte("x/other"), Value: []byte(val)})
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := collect(t, live, writers*perWriter)
	last := map[int]int{}
	state := map[string]string{}
	for _, l := range got {
		var rev, w, i int
		var key string
		if _, err := fmt.Sscanf(l, "%d PUT %s", &rev, &key); err != nil {
			t.Fatalf("event %q: %v", l, err)
		}
		k, v, _ := strings.Cut(key, "=")
		fmt.Sscanf(v, "%d-%d", &w, &i)
		if prev, ok := last[w]; ok && i <= prev {
			t.Fatalf("writer %d's write %d (%q) came after its write %d", w, i, l, prev)
		}
		last[w] = i
		state[k] = v
	}
	replay := collect(t, s.watch(t, kv, "w/", 1), writers*perWriter)
	if strings.Join(replay, "\n") != strings.Join(got, "\n") {
		t.Fatalf("a replay from 1 differs from the live watch:\n%s\nlive:\n%s", strings.Join(replay, "\n"), strings.Join(got, "\n"))
	}
	resp, err := kv.Scan(s.ctx(t), &kvpb.ScanRequest{Prefix: []byte("w/")})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.GetPairs() {
		if state[string(p.GetKey())] != string(p.GetValue()) {
			t.Errorf("the events play %s to %q, Scan shows %q", p.GetKey(), state[string(p.GetKey())], p.GetValue())
		}
	}
	if len(resp.GetPairs()) != len(state) {
		t.Errorf("the events play %d keys, Scan shows %d", len(state), len(resp.GetPairs()))
	}
	if want := int64(writers*perWriter + writers*perWriter/10); resp.GetRevision() != want {
		t.Errorf("Scan's revision is %d, want %d (one per write)", resp.GetRevision(), want)
	}
}

// testWatchResume: a watch cut short and opened again from the revision
// after the last one received misses nothing and repeats nothing; a Get's
// revision is where a watch picks up after the read.
func (s *suite) testWatchResume(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	for i := range 30 {
		s.put(t, kv, fmt.Sprintf("k%02d", i), fmt.Sprint(i))
	}
	ctx, cancel := context.WithCancel(s.ctx(t))
	w, err := kv.Watch(ctx, &kvpb.WatchRequest{FromRevision: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	rev := int64(0)
	for range 10 {
		r := recv(t, w, rev)
		rev = r.GetRevision()
		got = append(got, line(rev, r.GetEvents()[0]))
	}
	cancel()
	got = append(got, collect(t, s.watch(t, kv, "", rev+1), 20)...)
	for i, l := range got {
		if want := fmt.Sprintf("%d PUT k%02d=%d", i+1, i, i); l != want {
			t.Fatalf("event %d: %q, want %q", i, l, want)
		}
	}

	g, err := kv.Get(s.ctx(t), &kvpb.GetRequest{Key: []byte("k00")})
	if err != nil || g.GetRevision() != 30 {
		t.Fatalf("Get: revision %d, %v; want 30", g.GetRevision(), err)
	}
	w = s.watch(t, kv, "k00", g.GetRevision()+1)
	s.put(t, kv, "k00", "new")
	r := recv(t, w, 30)
	if l := line(r.GetRevision(), r.GetEvents()[0]); l != "31 PUT k00=new" {
		t.Fatalf("read then watch: %q", l)
	}
}

// testWatchCompacted: a watch from a revision the log dropped fails with
// OutOfRange, saying so; a watch from a Get's revision goes on.
func (s *suite) testWatchCompacted(t *testing.T) {
	addr, _ := s.startWith(t, s.cfg.Addr, store.Options{InMemory: true, LogRetention: store.LogRetention{Revisions: 8}})
	kv := s.dial(t, addr)
	for i := range 50 {
		s.put(t, kv, "k", fmt.Sprint(i))
	}
	_, err := s.watch(t, kv, "", 1).Recv()
	wantCode(t, "Watch from a compacted revision", err, codes.OutOfRange, "required revision 1 has been compacted")
	g, err := kv.Get(s.ctx(t), &kvpb.GetRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	w := s.watch(t, kv, "", g.GetRevision()+1)
	s.put(t, kv, "k", "after")
	if r := recv(t, w, g.GetRevision()); r.GetRevision() != 51 || string(r.GetEvents()[0].GetValue()) != "after" {
		t.Fatalf("watch from the Get's revision: %v", r)
	}
}

// testWatchSlowWatcher: a watcher that stops reading never holds up
// writers, and the server keeps no queue for it: it reads the log on
// when it reads again, whole while the log kept its revisions, and ended
// with OutOfRange once they were dropped (receiving a bounded part of
// what was written, not all of it).
func (s *suite) testWatchSlowWatcher(t *testing.T) {
	value := string(bytes.Repeat([]byte("v"), 4<<10))
	t.Run("within retention", func(t *testing.T) {
		kv := s.dial(t, s.start(t, ""))
		w := s.watch(t, kv, "", 0)
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		const n = 200 // about 800 KiB: far past the stream's window
		for i := range n {
			s.put(t, kv, fmt.Sprint(i), value)
		}
		for i, l := range collect(t, w, n) {
			if want := fmt.Sprintf("%d PUT %d=%s", i+1, i, value); l != want {
				t.Fatalf("event %d: %.40q…, want %.40q…", i, l, want)
			}
		}
	})
	t.Run("past retention", func(t *testing.T) {
		addr, _ := s.startWith(t, s.cfg.Addr, store.Options{InMemory: true, LogRetention: store.LogRetention{Bytes: 256 << 10}})
		kv := s.dial(t, addr)
		w := s.watch(t, kv, "", 0)
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		const n = 1000 // 4 MiB, sixteen times the retention
		for i := range n {
			s.put(t, kv, fmt.Sprint(i), value)
		}
		var err error
		received := int64(0)
		for {
			var r *kvpb.WatchResponse
			if r, err = w.Recv(); err != nil {
				break
			}
			if r.GetRevision() != received+1 {
				t.Fatalf("revision %d after %d", r.GetRevision(), received)
			}
			received = r.GetRevision()
		}
		wantCode(t, "a watcher past the retention", err, codes.OutOfRange, "has been compacted")
		if received >= n {
			t.Fatalf("the slow watcher received all %d revisions: the server queued them", received)
		}
		t.Logf("the slow watcher received %d of %d revisions, then OutOfRange", received, n)
	})
}

// testWatchCancel: a client's cancel ends its watch with Canceled, and the
// connection goes on serving.
func (s *suite) testWatchCancel(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	ctx, cancel := context.WithCancel(s.ctx(t))
	w, err := kv.Watch(ctx, &kvpb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	if n := watchHandlers(); n != 1 {
		t.Fatalf("%d Watch handlers running, want 1", n)
	}
	cancel()
	_, err = w.Recv()
	wantCode(t, "Recv after cancel", err, codes.Canceled, "")
	// The server's handler ends too, while the server goes on (goleak
	// at the end of the test runs only after the server stopped, which
	// ends every watch anyway).
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for watchHandlers() > 0 {
		select {
		case <-tick.C:
		case <-s.ctx(t).Done():
			t.Fatal("the server's Watch handler still runs after the client canceled")
		}
	}
	s.put(t, kv, "after", "cancel")
	if got := s.get(t, kv, "after"); got != "cancel" {
		t.Fatalf("Get after a canceled watch: %q", got)
	}
}

// testWatchAcrossRestart: kvwatch.Follow (what kvctl watch runs) hands
// over every revision once, in order, across a server restart on the
// same address and data directory.
func (s *suite) testWatchAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	addr, stop := s.startWith(t, s.cfg.Addr, store.Options{Dir: dir})
	kv := s.dial(t, addr)
	dial := func(ctx context.Context) (kvpb.KVClient, func() error, error) {
		cc, err := rpc.Dial(ctx, addr, rpc.WithTransport(s.cfg.Transport))
		if err != nil {
			return nil, nil, err
		}
		return kvpb.NewKVClient(cc), cc.Close, nil
	}
	events := make(chan string, 100)
	retries := make(chan int64, 100)
	ctx, cancel := context.WithCancel(s.ctx(t))
	followed := make(chan error, 1)
	go func() {
		followed <- kvwatch.Follow(ctx, dial, kvwatch.Options{From: 1, OnRetry: func(_ error, from int64) { retries <- from }},
			func(r *kvpb.WatchResponse) error {
				for _, e := range r.GetEvents() {
					events <- line(r.GetRevision(), e)
				}
				return nil
			})
	}()
	var got []string
	take := func(n int) {
		for range n {
			select {
			case l := <-events:
				got = append(got, l)
			case <-s.ctx(t).Done():
				t.Fatalf("waiting for events: %d so far", len(got))
			}
		}
	}
	for i := range 10 {
		s.put(t, kv, fmt.Sprint(i), "before")
	}
	take(10)
	stop()
	_, stop2 := s.startWith(t, addr, store.Options{Dir: dir})
	kv = s.dial(t, addr)
	for i := 10; i < 20; i++ {
		s.put(t, kv, fmt.Sprint(i), "after")
	}
	take(10)
	cancel()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow: %v, want context.Canceled", err)
	}
	stop2()
	for i, l := range got {
		want := fmt.Sprintf("%d PUT %d=before", i+1, i)
		if i >= 10 {
			want = fmt.Sprintf("%d PUT %d=after", i+1, i)
		}
		if l != want {
			t.Fatalf("event %d: %q, want %q", i, l, want)
		}
	}
	select {
	case l := <-events:
		t.Fatalf("an event more than written: %q", l)
	default:
	}
	select {
	case from := <-retries:
		if from != 11 {
			t.Fatalf("Follow resumed from %d, want 11", from)
		}
	default:
		t.Fatal("Follow never reconnected: the restart went unnoticed")
	}
}

// watchHandlers counts the goroutines running the server's Watch handler.
func watchHandlers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "kvservice.(*Service).Watch(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
