package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
)

// crashWriter is one client of the crash test. Its calls alternate:
//
//	call 2n:   Put  put/<w>/<2n>  = "p<2n>"
//	call 2n+1: Batch of batchKeys puts batch/<w>/<2n+1>/<j> = "b<2n+1>"
//	           and the delete of put/<w>/<2n>
//
// It stops at its first error; the call that failed has an unknown
// outcome (the server may have applied it before dying).
type crashWriter struct {
	id      int
	acked   int // calls 0..acked-1 were acknowledged
	unknown bool
}

const batchKeys = 16

func putKey(w, i int) string      { return fmt.Sprintf("put/%d/%06d", w, i) }
func batchKey(w, i, j int) string { return fmt.Sprintf("batch/%d/%06d/%02d", w, i, j) }

func (cw *crashWriter) run(ctx context.Context, kv kvpb.KVClient, acked *atomic.Int64, enough int64, reached func()) {
	value := strings.Repeat("x", 512)
	for i := 0; ; i++ {
		var err error
		if i%2 == 0 {
			_, err = kv.Put(ctx, &kvpb.PutRequest{Key: []byte(putKey(cw.id, i)), Value: []byte(fmt.Sprintf("p%d", i))})
		} else {
			req := &kvpb.BatchRequest{}
			for j := range batchKeys {
				req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{
					Key: []byte(batchKey(cw.id, i, j)), Value: []byte(fmt.Sprintf("b%d%s", i, value))}}})
			}
			req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Delete{Delete: []byte(putKey(cw.id, i-1))}})
			_, err = kv.Batch(ctx, req)
		}
		if err != nil {
			cw.unknown = true
			return
		}
		cw.acked = i + 1
		if acked.Add(1) == enough {
			reached()
		}
	}
}

// TestCrashDurability kills kvserver with SIGKILL while clients stream
// writes, restarts it on the same data directory, and checks that every
// acknowledged write is there, that no batch is partly visible, and that
// nothing that was never sent appears.
//
// A process crash leaves the kernel's page cache intact, so this proves
// what a crash of kvserver can: that nothing acknowledged was only in its
// memory. (Machine crashes are covered by syncing before acknowledging,
// which this test cannot observe.)
func TestCrashDurability(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a server")
	}
	dir := t.TempDir()
	args := []string{"--data-dir", "data", "--listen", "tcp://127.0.0.1:0"}
	p := startServer(t, dir, args...)

	const writers, enough = 6, 300
	var (
		acked   atomic.Int64
		once    sync.Once
		reached = make(chan struct{})
		wg      sync.WaitGroup
	)
	ws := make([]*crashWriter, writers)
	for w := range ws {
		ws[w] = &crashWriter{id: w}
		kv := dial(t, p.targets[0]) // a connection each
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[w].run(testCtx(t), kv, &acked, enough, func() { once.Do(func() { close(reached) }) })
		}()
	}
	select {
	case <-reached:
	case <-p.stderrEOF:
		t.Fatalf("the server died on its own:\n%s", p.logs)
	}
	p.signal(t, syscall.SIGKILL) // while the writers are writing
	wg.Wait()
	if code := p.wait(t); code != -1 {
		t.Fatalf("exit status %d, want death by SIGKILL", code)
	}
	for _, w := range ws {
		if !w.unknown {
			t.Fatalf("writer %d stopped without an error", w.id)
		}
	}
	t.Logf("killed after %d acknowledged writes", acked.Load())

	p = startServer(t, dir, args...)
	kv := dial(t, p.targets[0])
	state := map[string]string{}
	req := &kvpb.ScanRequest{Limit: 1000}
	for {
		resp, err := kv.Scan(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.GetPairs() {
			state[string(kv.GetKey())] = string(kv.GetValue())
		}
		if req.PageToken = resp.GetNextPageToken(); len(req.PageToken) == 0 {
			break
		}
	}

	expected := 0
	for _, w := range ws {
		// calls 0..acked-1 happened, call acked may have, none after.
		last := w.acked // the call with an unknown outcome
		batchVisible := func(i int) bool {
			n := 0
			for j := range batchKeys {
				v, ok := state[batchKey(w.id, i, j)]
				if ok {
					n++
					if !strings.HasPrefix(v, fmt.Sprintf("b%d", i)) {
						t.Errorf("%s = %.10q…, not what batch %d wrote", batchKey(w.id, i, j), v, i)
					}
				}
			}
			if n != 0 && n != batchKeys {
				t.Errorf("writer %d: batch %d is partly visible: %d of %d puts", w.id, i, n, batchKeys)
			}
			return n > 0
		}
		for i := 0; i <= last; i++ {
			if i%2 == 1 {
				visible := batchVisible(i)
				switch {
				case i < last && !visible:
					t.Errorf("writer %d: acknowledged batch %d is missing", w.id, i)
				case visible:
					expected += batchKeys
				}
				// Its delete went with it.
				if _, ok := state[putKey(w.id, i-1)]; ok == visible {
					t.Errorf("writer %d: batch %d visible %v, yet the key it deletes present %v", w.id, i, visible, ok)
				}
				continue
			}
			v, ok := state[putKey(w.id, i)]
			deleted := i+1 <= last && batchVisible(i+1)
			switch {
			case ok && v != fmt.Sprintf("p%d", i):
				t.Errorf("%s = %q, want p%d", putKey(w.id, i), v, i)
			case i < last && !deleted && !ok:
				t.Errorf("writer %d: acknowledged put %d is missing", w.id, i)
			case ok:
				expected++
			}
		}
	}
	if len(state) != expected {
		t.Errorf("the store holds %d keys, of which only %d come from calls that were made", len(state), expected)
	}
}
