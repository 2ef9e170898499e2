package kvtest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvservice"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/server"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/test/conformance"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Config says which transport the suite runs over.
type Config = conformance.Config

// Run runs the suite over cfg.Transport.
func Run(t *testing.T, cfg Config) {
	s := &suite{cfg: cfg.WithDefaults()}
	conformance.Run(t, s.cfg, []conformance.Test{
		{"GetPutDelete", s.testGetPutDelete},
		{"Scan", s.testScan},
		{"ScanPaging", s.testScanPaging},
		{"ScanPageBytes", s.testScanPageBytes},
		{"ScanBadInput", s.testScanBadInput},
		{"Batch", s.testBatch},
		{"BatchAtomic", s.testBatchAtomic},
		{"CompareAndSwap", s.testCompareAndSwap},
		{"Limits", s.testLimits},
		{"ConcurrentClients", s.testConcurrentClients},
		{"Restart", s.testRestart},
		{"WatchConcurrentWriters", s.testWatchConcurrentWriters},
		{"WatchResume", s.testWatchResume},
		{"WatchCompacted", s.testWatchCompacted},
		{"WatchSlowWatcher", s.testWatchSlowWatcher},
		{"WatchCancel", s.testWatchCancel},
		{"WatchAcrossRestart", s.testWatchAcrossRestart},
	})
}

type suite struct{ cfg Config }

// ctx returns a context that ends with the test, or at the suite's timeout.
func (s *suite) ctx(t *testing.T) context.Context { return s.cfg.Context(t) }

// start runs a server over the transport under test until the test ends;
// an empty dir means an in-memory store. It returns the address to dial.
func (s *suite) start(t *testing.T, dir string) string {
	t.Helper()
	addr, _ := s.startWith(t, s.cfg.Addr, store.Options{Dir: dir, InMemory: dir == ""})
	return addr
}

// startStoppable starts a server on the data directory dir, like start,
// and returns with its address a function that stops it at once (checking
// that it shut down cleanly); the test's end stops it otherwise.
func (s *suite) startStoppable(t *testing.T, dir string) (addr string, stop func()) {
	t.Helper()
	return s.startWith(t, s.cfg.Addr, store.Options{Dir: dir})
}

// startWith starts a server listening on listenAddr with the store so
// configured, like startStoppable.
func (s *suite) startWith(t *testing.T, listenAddr string, so store.Options) (addr string, stop func()) {
	t.Helper()
	lis, err := s.cfg.Transport.Listen(listenAddr)
	if err != nil {
		t.Fatalf("Listen(%q): %v", listenAddr, err)
	}
	srv, err := server.New(server.Config{
		Listeners: []transport.Listener{lis},
		Store:     so,
		Logger:    zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// dial returns a client of the server at addr, closed when the test ends.
func (s *suite) dial(t *testing.T, addr string) kvpb.KVClient {
	t.Helper()
	cc, err := rpc.Dial(s.ctx(t), addr, rpc.WithTransport(s.cfg.Transport))
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	return kvpb.NewKVClient(cc)
}

func wantCode(t *testing.T, what string, err error, c codes.Code, msg string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != c || !strings.Contains(st.Message(), msg) {
		t.Fatalf("%s: got %v (%v), want code %v with a message containing %q", what, st.Code(), err, c, msg)
	}
}

func (s *suite) put(t *testing.T, kv kvpb.KVClient, k, v string) {
	t.Helper()
	if _, err := kv.Put(s.ctx(t), &kvpb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
		t.Fatalf("Put(%q): %v", k, err)
	}
}

// get returns k's value, or "<none>" when k does not exist.
func (s *suite) get(t *testing.T, kv kvpb.KVClient, k string) string {
	t.Helper()
	resp, err := kv.Get(s.ctx(t), &kvpb.GetRequest{Key: []byte(k)})
	if err != nil {
		t.Fatalf("Get(%q): %v", k, err)
	}
	if !resp.GetFound() {
		if len(resp.GetValue()) != 0 {
			t.Fatalf("Get(%q): not found, yet a value of %d bytes", k, len(resp.GetValue()))
		}
		return "<none>"
	}
	return string(resp.GetValue())
}

// scanAll pages through a scan and returns every pair as "k=v" lines.
func (s *suite) scanAll(t *testing.T, kv kvpb.KVClient, req *kvpb.ScanRequest) (string, int) {
	t.Helper()
	var b strings.Builder
	pages := 0
	for {
		resp, err := kv.Scan(s.ctx(t), req)
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		pages++
		for _, p := range resp.GetPairs() {
			fmt.Fprintf(&b, "%s=%s\n", p.GetKey(), p.GetValue())
		}
		if len(resp.GetNextPageToken()) == 0 {
			return b.String(), pages
		}
		req.PageToken = resp.GetNextPageToken()
		if pages > 10000 {
			t.Fatal("a scan that never ends")
		}
	}
}

func (s *suite) dump(t *testing.T, kv kvpb.KVClient) string {
	t.Helper()
	d, _ := s.scanAll(t, kv, &kvpb.ScanRequest{})
	return d
}

func (s *suite) testGetPutDelete(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	if got := s.get(t, kv, "greeting"); got != "<none>" {
		t.Fatalf("Get of a missing key: %q", got)
	}
	s.put(t, kv, "greeting", "hello")
	if got := s.get(t, kv, "greeting"); got != "hello" {
		t.Fatalf("Get after Put: %q, want hello", got)
	}
	s.put(t, kv, "greeting", "bonjour")
	if got := s.get(t, kv, "greeting"); got != "bonjour" {
		t.Fatalf("Get after a second Put: %q, want bonjour", got)
	}
	s.put(t, kv, "empty", "")
	if resp, err := kv.Get(s.ctx(t), &kvpb.GetRequest{Key: []byte("empty")}); err != nil || !resp.GetFound() || len(resp.GetValue()) != 0 {
		t.Fatalf("Get of a key with an empty value: %v, %v; want found and empty", resp, err)
	}
	binKey, binVal := []byte{0, 0xff, '\n', 1}, bytes.Repeat([]byte{0, 1, 2, 0xfe}, 1000)
	if _, err := kv.Put(s.ctx(t), &kvpb.PutRequest{Key: binKey, Value: binVal}); err != nil {
		t.Fatal(err)
	}
	if resp, err := kv.Get(s.ctx(t), &kvpb.GetRequest{Key: binKey}); err != nil || !bytes.Equal(resp.GetValue(), binVal) {
		t.Fatalf("binary key and value did not round-trip: %v", err)
	}
	for range 2 { // the second time the key is already gone: still OK
		if _, err := kv.Delete(s.ctx(t), &kvpb.DeleteRequest{Key: []byte("greeting")}); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if got := s.get(t, kv, "greeting"); got != "<none>" {
		t.Fatalf("Get after Delete: %q", got)
	}
}

func (s *suite) testScan(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	for _, k := range []string{"a", "app", "apple", "apq", "b", "b\xff", "b\xff\xff", "c"} {
		s.put(t, kv, k, "v-"+k)
	}
	tests := []struct {
		name string
		req  *kvpb.ScanRequest
		want string // keys, comma separated
	}{
		{"everything", &kvpb.ScanRequest{}, "a,app,apple,apq,b,b\xff,b\xff\xff,c"},
		{"prefix", &kvpb.ScanRequest{Prefix: []byte("app")}, "app,apple"},
		{"prefix ending in 0xff", &kvpb.ScanRequest{Prefix: []byte("b\xff")}, "b\xff,b\xff\xff"},
		{"prefix matching nothing", &kvpb.ScanRequest{Prefix: []byte("zz")}, ""},
		{"start", &kvpb.ScanRequest{Start: []byte("apq")}, "apq,b,b\xff,b\xff\xff,c"},
		{"end", &kvpb.ScanRequest{End: []byte("apple")}, "a,app"},
		{"start and end", &kvpb.ScanRequest{Start: []byte("ap"), End: []byte("b")}, "app,apple,apq"},
		{"start equals end", &kvpb.ScanRequest{Start: []byte("b"), End: []byte("b")}, ""},
		{"limit", &kvpb.ScanRequest{Limit: 3}, "a,app,apple"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := kv.Scan(s.ctx(t), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, p := range resp.GetPairs() {
				keys = append(keys, string(p.GetKey()))
				if string(p.GetValue()) != "v-"+string(p.GetKey()) {
					t.Fatalf("value of %q = %q", p.GetKey(), p.GetValue())
				}
			}
			if got := strings.Join(keys, ","); got != tc.want {
				t.Fatalf("keys %q, want %q", got, tc.want)
			}
			if more := len(resp.GetNextPageToken()) > 0; more != (tc.name == "limit") {
				t.Fatalf("next page token present: %v", more)
			}
		})
	}
	resp, err := kv.Scan(s.ctx(t), &kvpb.ScanRequest{Prefix: []byte("ap"), KeysOnly: true})
	if err != nil || len(resp.GetPairs()) != 3 {
		t.Fatalf("keys-only scan: %v, %v", resp, err)
	}
	for _, p := range resp.GetPairs() {
		if len(p.GetValue()) != 0 {
			t.Fatalf("keys-only scan returned a value for %q", p.GetKey())
		}
	}
}

func (s *suite) testScanPaging(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	var want strings.Builder
	req := &kvpb.BatchRequest{}
	for i := range 250 {
		k, v := fmt.Sprintf("page/%04d", i), fmt.Sprint(i)
		req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: []byte(k), Value: []byte(v)}}})
		fmt.Fprintf(&want, "%s=%s\n", k, v)
	}
	for _, k := range []string{"pag", "page", "pagf", "other"} { // around the prefix
		req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: []byte(k), Value: []byte("x")}}})
	}
	if _, err := kv.Batch(s.ctx(t), req); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []uint32{1, 7, 40, 250, 0} {
		got, pages := s.scanAll(t, kv, &kvpb.ScanRequest{Prefix: []byte("page/"), Limit: limit})
		if got != want.String() {
			t.Fatalf("limit %d: paging returned\n%s\nwant\n%s", limit, got, want.String())
		}
		wantPages := 3 // limit 0 means 100
		if limit > 0 {
			wantPages = (250 + int(limit) - 1) / int(limit)
		}
		// A page that ends exactly at the last key cannot know it is
		// the last: one empty page may follow.
		if pages != wantPages && pages != wantPages+1 {
			t.Fatalf("limit %d: %d pages, want %d", limit, pages, wantPages)
		}
	}
	// A range scan pages the same way.
	got, _ := s.scanAll(t, kv, &kvpb.ScanRequest{Start: []byte("page/0100"), End: []byte("page/0200"), Limit: 30})
	if n := strings.Count(got, "\n"); n != 100 || !strings.HasPrefix(got, "page/0100=") {
		t.Fatalf("range scan in pages: %d pairs from %q", n, got[:min(len(got), 20)])
	}
	// Limits above the maximum are lowered, not refused.
	big := &kvpb.BatchRequest{}
	for i := range kvservice.MaxScanLimit + 10 {
		big.Mutations = append(big.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: fmt.Appendf(nil, "many/%05d", i)}}})
	}
	if _, err := kv.Batch(s.ctx(t), big); err != nil {
		t.Fatal(err)
	}
	resp, err := kv.Scan(s.ctx(t), &kvpb.ScanRequest{Prefix: []byte("many/"), Limit: 1 << 30})
	if err != nil || len(resp.GetPairs()) != kvservice.MaxScanLimit || len(resp.GetNextPageToken()) == 0 {
		t.Fatalf("scan with a huge limit: %d pairs, err %v; want %d and a next page", len(resp.GetPairs()), err, kvservice.MaxScanLimit)
	}
}

// testScanPageBytes: pages stop near MaxScanBytes, whatever the limit.
func (s *suite) testScanPageBytes(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	val := bytes.Repeat([]byte("v"), store.MaxValueSize)
	for i := range 5 {
		if _, err := kv.Put(s.ctx(t), &kvpb.PutRequest{Key: fmt.Appendf(nil, "big/%d", i), Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	req := &kvpb.ScanRequest{Prefix: []byte("big/"), Limit: 100}
	total := 0
	for {
		resp, err := kv.Scan(s.ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		n := len(resp.GetPairs())
		if n == 0 && len(resp.GetNextPageToken()) > 0 {
			t.Fatal("an empty page that is not the last")
		}
		if size := n * store.MaxValueSize; size > kvservice.MaxScanBytes {
			t.Fatalf("a page of %d values of 1 MiB: over MaxScanBytes", n)
		}
		total += n
		if req.PageToken = resp.GetNextPageToken(); len(req.PageToken) == 0 {
			break
		}
	}
	if total != 5 {
		t.Fatalf("paged through %d big values, want 5", total)
	}
}

func (s *suite) testScanBadInput(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	for i := range 5 {
		s.put(t, kv, fmt.Sprintf("k%d", i), "v")
	}
	first, err := kv.Scan(s.ctx(t), &kvpb.ScanRequest{Prefix: []byte("k"), Limit: 2})
	if err != nil || len(first.GetNextPageToken()) == 0 {
		t.Fatalf("first page: %v, %v", first, err)
	}
	tok := first.GetNextPageToken()
	long := bytes.Repeat([]byte("k"), store.MaxKeySize+1)
	tests := []struct {
		name string
		req  *kvpb.ScanRequest
		msg  string
	}{
		{"prefix and start", &kvpb.ScanRequest{Prefix: []byte("k"), Start: []byte("a")}, "not both"},
		{"prefix and end", &kvpb.ScanRequest{Prefix: []byte("k"), End: []byte("z")}, "not both"},
		{"start after end", &kvpb.ScanRequest{Start: []byte("z"), End: []byte("a")}, "after end"},
		{"long prefix", &kvpb.ScanRequest{Prefix: long}, "longer than"},
		{"garbage token", &kvpb.ScanRequest{Prefix: []byte("k"), PageToken: []byte("garbage")}, "malformed page token"},
		{"token of another scan", &kvpb.ScanRequest{Prefix: []byte("j"), PageToken: tok}, "another prefix"},
		{"token with a range", &kvpb.ScanRequest{Start: []byte("k"), PageToken: tok}, "another prefix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kv.Scan(s.ctx(t), tc.req)
			wantCode(t, "Scan", err, codes.InvalidArgument, tc.msg)
		})
	}
}

func (s *suite) testBatch(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	s.put(t, kv, "old", "x")
	put := func(k, v string) *kvpb.Mutation {
		return &kvpb.Mutation{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: []byte(k), Value: []byte(v)}}}
	}
	del := func(k string) *kvpb.Mutation { return &kvpb.Mutation{Op: &kvpb.Mutation_Delete{Delete: []byte(k)}} }
	_, err := kv.Batch(s.ctx(t), &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
		put("a", "1"), put("b", "1"), put("a", "2"), del("old"), del("b"), put("c", "3"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.dump(t, kv), "a=2\nc=3\n"; got != want {
		t.Fatalf("after the batch:\n%swant\n%s", got, want)
	}
	if _, err := kv.Batch(s.ctx(t), &kvpb.BatchRequest{}); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	// One bad mutation, last: nothing of the batch is written.
	_, err = kv.Batch(s.ctx(t), &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{put("d", "4"), del("a"), put("", "x")}})
	wantCode(t, "Batch with an empty key", err, codes.InvalidArgument, "mutation 2: empty key")
	_, err = kv.Batch(s.ctx(t), &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{put("d", "4"), {}}})
	wantCode(t, "Batch with an empty mutation", err, codes.InvalidArgument, "neither a put nor a delete")
	if got, want := s.dump(t, kv), "a=2\nc=3\n"; got != want {
		t.Fatalf("a refused batch changed the store:\n%swant\n%s", got, want)
	}
}

// testBatchAtomic: while one client moves a token between keys with
// batches (delete here, put there), other clients never see zero or two
// tokens, with Gets of every key in one Scan.
func (s *suite) testBatchAtomic(t *testing.T) {
	addr := s.start(t, "")
	writer := s.dial(t, addr)
	const keys, moves = 5, 300
	s.put(t, writer, "token/0", "T")
	stop := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		for i := range moves {
			from, to := fmt.Appendf(nil, "token/%d", i%keys), fmt.Appendf(nil, "token/%d", (i+1)%keys)
			_, err := writer.Batch(s.ctx(t), &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
				{Op: &kvpb.Mutation_Delete{Delete: from}},
				{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: to, Value: []byte("T")}}},
			}})
			if err != nil {
				errs <- fmt.Errorf("move %d: %w", i, err)
				return
			}
		}
	}()
	for range 2 {
		reader := s.dial(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := reader.Scan(s.ctx(t), &kvpb.ScanRequest{Prefix: []byte("token/")})
				if err == nil && len(resp.GetPairs()) != 1 {
					err = fmt.Errorf("a scan saw %d tokens: a batch was half applied", len(resp.GetPairs()))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := s.get(t, writer, fmt.Sprintf("token/%d", moves%keys)); got != "T" {
		t.Fatalf("the token is not where %d moves put it", moves)
	}
}

func (s *suite) testCompareAndSwap(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	cas := func(k string, expected *string, v string) error {
		req := &kvpb.CompareAndSwapRequest{Key: []byte(k), Value: []byte(v)}
		if expected != nil {
			req.Expected = []byte(*expected)
		}
		_, err := kv.CompareAndSwap(s.ctx(t), req)
		return err
	}
	str := func(s string) *string { return &s }
	conflict := func(what string, err error, found bool, current string) {
		t.Helper()
		wantCode(t, what, err, codes.Aborted, "compare-and-swap conflict")
		c, ok := kvservice.Conflict(err)
		if !ok || c.GetFound() != found || string(c.GetCurrent()) != current {
			t.Fatalf("%s: conflict detail %v (ok %v), want found=%v current=%q", what, c, ok, found, current)
		}
	}
	if err := cas("lock", nil, "owner-1"); err != nil {
		t.Fatalf("CAS creating a key: %v", err)
	}
	conflict("CAS creating an existing key", cas("lock", nil, "owner-2"), true, "owner-1")
	conflict("CAS with a stale value", cas("lock", str("owner-0"), "owner-2"), true, "owner-1")
	conflict("CAS on a missing key", cas("nokey", str("x"), "y"), false, "")
	if got := s.get(t, kv, "lock"); got != "owner-1" {
		t.Fatalf("failed CASes changed the key: %q", got)
	}
	if got := s.get(t, kv, "nokey"); got != "<none>" {
		t.Fatalf("a failed CAS created a key: %q", got)
	}
	if err := cas("lock", str("owner-1"), "owner-2"); err != nil {
		t.Fatalf("CAS with the current value: %v", err)
	}
	if got := s.get(t, kv, "lock"); got != "owner-2" {
		t.Fatalf("after CAS: %q, want owner-2", got)
	}
	// An empty expected value is a value, not "absent".
	s.put(t, kv, "empty", "")
	if err := cas("empty", str(""), "filled"); err != nil {
		t.Fatalf("CAS expecting an empty value: %v", err)
	}
	conflict("CAS expecting an empty value of a missing key", cas("nokey", str(""), "x"), false, "")
}

// testLimits: input over the documented limits is refused with
// InvalidArgument (or ResourceExhausted beyond the message size), and
// nothing is written.
func (s *suite) testLimits(t *testing.T) {
	kv := s.dial(t, s.start(t, ""))
	s.put(t, kv, "keep", "me")
	before := s.dump(t, kv)
	longKey := bytes.Repeat([]byte("k"), store.MaxKeySize+1)
	longVal := bytes.Repeat([]byte("v"), store.MaxValueSize+1)
	hugeVal := bytes.Repeat([]byte("v"), rpc.DefaultMaxRecvMsgSize+1)
	tooMany := &kvpb.BatchRequest{}
	for i := range store.MaxBatchMutations + 1 {
		tooMany.Mutations = append(tooMany.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Delete{Delete: fmt.Appendf(nil, "%d", i)}})
	}
	tests := []struct {
		name string
		call func(ctx context.Context) error
		code codes.Code
		msg  string
	}{
		{"Get empty key", func(ctx context.Context) error { _, err := kv.Get(ctx, &kvpb.GetRequest{}); return err }, codes.InvalidArgument, "empty key"},
		{"Put empty key", func(ctx context.Context) error {
			_, err := kv.Put(ctx, &kvpb.PutRequest{Value: []byte("v")})
			return err
		}, codes.InvalidArgument, "empty key"},
		{"Delete empty key", func(ctx context.Context) error { _, err := kv.Delete(ctx, &kvpb.DeleteRequest{}); return err }, codes.InvalidArgument, "empty key"},
		{"CAS empty key", func(ctx context.Context) error {
			_, err := kv.CompareAndSwap(ctx, &kvpb.CompareAndSwapRequest{Value: []byte("v")})
			return err
		}, codes.InvalidArgument, "empty key"},
		{"Put long key", func(ctx context.Context) error {
			_, err := kv.Put(ctx, &kvpb.PutRequest{Key: longKey})
			return err
		}, codes.InvalidArgument, "longer than the limit (4096)"},
		{"Get long key", func(ctx context.Context) error { _, err := kv.Get(ctx, &kvpb.GetRequest{Key: longKey}); return err }, codes.InvalidArgument, "longer than the limit"},
		{"Put long value", func(ctx context.Context) error {
			_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte("keep"), Value: longVal})
			return err
		}, codes.InvalidArgument, "longer than the limit (1048576)"},
		{"CAS long value", func(ctx context.Context) error {
			_, err := kv.CompareAndSwap(ctx, &kvpb.CompareAndSwapRequest{Key: []byte("new"), Value: longVal})
			return err
		}, codes.InvalidArgument, "longer than the limit"},
		{"Batch too many mutations", func(ctx context.Context) error { _, err := kv.Batch(ctx, tooMany); return err }, codes.InvalidArgument, "larger than the limit (10000)"},
		{"Put over the message size", func(ctx context.Context) error {
			_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte("keep"), Value: hugeVal})
			return err
		}, codes.ResourceExhausted, "larger than the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.name, tc.call(s.ctx(t)), tc.code, tc.msg)
			if after := s.dump(t, kv); after != before {
				t.Fatalf("a refused call changed the store:\n%s\nwas\n%s", after, before)
			}
		})
	}
	// Right at the limits, all is well.
	if _, err := kv.Put(s.ctx(t), &kvpb.PutRequest{Key: longKey[:store.MaxKeySize], Value: longVal[:store.MaxValueSize]}); err != nil {
		t.Fatalf("Put at the limits: %v", err)
	}
}

// testConcurrentClients: clients on their own connections write their own
// keys and increment one shared counter by CAS; nothing is lost.
func (s *suite) testConcurrentClients(t *testing.T) {
	addr := s.start(t, "")
	const clients, ops = 8, 40
	setup := s.dial(t, addr)
	s.put(t, setup, "counter", "0")
	kvs := make([]kvpb.KVClient, clients)
	for i := range kvs {
		kvs[i] = s.dial(t, addr)
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c, kv := range kvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := s.ctx(t)
			for i := range ops {
				k := fmt.Appendf(nil, "client/%d/%03d", c, i)
				if _, err := kv.Put(ctx, &kvpb.PutRequest{Key: k, Value: k}); err != nil {
					errs <- err
					return
				}
				if resp, err := kv.Get(ctx, &kvpb.GetRequest{Key: k}); err != nil || !bytes.Equal(resp.GetValue(), k) {
					errs <- fmt.Errorf("client %d read %q back as %q (%v)", c, k, resp.GetValue(), err)
					return
				}
				if err := increment(ctx, kv); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := s.get(t, setup, "counter"); got != fmt.Sprint(clients*ops) {
		t.Fatalf("counter = %s after %d increments: CAS lost some", got, clients*ops)
	}
	got, _ := s.scanAll(t, setup, &kvpb.ScanRequest{Prefix: []byte("client/"), KeysOnly: true})
	if n := strings.Count(got, "\n"); n != clients*ops {
		t.Fatalf("%d client keys, want %d", n, clients*ops)
	}
}

// increment adds one to "counter" by read and compare-and-swap, retrying
// on conflicts.
func increment(ctx context.Context, kv kvpb.KVClient) error {
	for {
		resp, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte("counter")})
		if err != nil {
			return err
		}
		var n int
		fmt.Sscan(string(resp.GetValue()), &n)
		_, err = kv.CompareAndSwap(ctx, &kvpb.CompareAndSwapRequest{Key: []byte("counter"), Expected: resp.GetValue(), Value: fmt.Append(nil, n+1)})
		if status.Code(err) == codes.Aborted {
			continue
		}
		return err
	}
}

// testRestart: a persistent server stopped and started again on its data
// directory has every write.
func (s *suite) testRestart(t *testing.T) {
	dir := t.TempDir()
	addr, stop := s.startStoppable(t, dir)
	kv := s.dial(t, addr)
	for i := range 50 {
		s.put(t, kv, fmt.Sprintf("persist/%02d", i), fmt.Sprint(i))
	}
	_, err := kv.Batch(s.ctx(t), &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
		{Op: &kvpb.Mutation_Delete{Delete: []byte("persist/00")}},
		{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: []byte("persist/batch"), Value: []byte("b")}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	before := s.dump(t, kv)
	stop()
	kv2 := s.dial(t, s.start(t, dir))
	if after := s.dump(t, kv2); after != before {
		t.Fatalf("after a restart the store holds\n%s\nbefore it held\n%s", after, before)
	}
}
