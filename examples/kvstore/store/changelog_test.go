package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// readLog returns every change from revision from on, as Changes pages it.
func readLog(t *testing.T, s *Store, from uint64) []Change {
	t.Helper()
	var all []Change
	for {
		cs, next, err := s.Changes(from, 7, 1<<10) // small pages: paging is tested too
		if err != nil {
			t.Fatalf("Changes(%d): %v", from, err)
		}
		all = append(all, cs...)
		if len(cs) == 0 {
			return all
		}
		from = next
	}
}

// apply plays changes onto m, as a watcher would.
func apply(m map[string]string, cs []Change) {
	for _, c := range cs {
		for _, mu := range c.Mutations {
			if mu.Delete {
				delete(m, string(mu.Key))
			} else {
				m[string(mu.Key)] = string(mu.Value)
			}
		}
	}
}

// TestChangesConcurrentWriters: writers on shared keys, and a watcher
// following them live. Every write gets one revision, 1 to N with no gap;
// the watcher sees them in that order and never a revision before the
// ones below it; each writer's writes are in its own order; and playing
// the log gives what the store holds.
func TestChangesConcurrentWriters(t *testing.T) {
	s := openMem(t)
	const writers, perWriter = 6, 150
	total := uint64(writers * perWriter)

	watched := make(chan []Change, 1)
	go func() {
		var got []Change
		next := uint64(1)
		for next <= total {
			cs, n, err := s.Changes(next, 16, 1<<20)
			if err != nil {
				t.Errorf("watcher: %v", err)
				break
			}
			got, next = append(got, cs...), n
			if len(cs) == 0 {
				if err := s.WaitRevision(context.Background(), next-1); err != nil {
					t.Errorf("watcher: %v", err)
					break
				}
			}
		}
		watched <- got
	}()

	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				key := []byte(fmt.Sprintf("k%d", i%10)) // shared by every writer
				val := []byte(fmt.Sprintf("w%d-%d", w, i))
				var err error
				switch i % 3 {
				case 0:
					err = s.Put(key, val)
				case 1:
					err = s.Batch([]Mutation{{Key: key, Value: val}, {Key: []byte(fmt.Sprintf("w%d", w)), Value: val}})
				case 2:
					cur, found, _ := s.Get(key)
					want := Absent()
					if found {
						want = Holds(cur)
					}
					err = s.CompareAndSwap(key, want, val)
					if errors.As(err, new(*ConflictError)) {
						err = s.Put(key, val) // lost the race: a plain write instead
					}
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := s.Revision(); got != total {
		t.Fatalf("Revision() = %d after %d writes", got, total)
	}
	live := <-watched
	logged := readLog(t, s, 1)
	for name, cs := range map[string][]Change{"live": live, "replayed": logged} {
		if uint64(len(cs)) != total {
			t.Fatalf("%s: %d changes, want %d", name, len(cs), total)
		}
		last := map[int]int{} // writer → its last write seen
		for i, c := range cs {
			if c.Revision != uint64(i+1) {
				t.Fatalf("%s: change %d has revision %d", name, i, c.Revision)
			}
			var w, n int
			if _, err := fmt.Sscanf(string(c.Mutations[0].Value), "w%d-%d", &w, &n); err != nil {
				t.Fatalf("%s: revision %d: %q", name, c.Revision, c.Mutations[0].Value)
			}
			if prev, ok := last[w]; ok && n <= prev {
				t.Fatalf("%s: writer %d's write %d at revision %d, after its write %d", name, w, n, c.Revision, prev)
			}
			last[w] = n
		}
	}
	m := map[string]string{}
	apply(m, logged)
	var want bytes.Buffer
	pairs, _, err := s.Scan(ScanOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		fmt.Fprintf(&want, "%s=%s\n", p.Key, p.Value)
		if m[string(p.Key)] != string(p.Value) {
			t.Errorf("the log plays %s to %q, the store holds %q", p.Key, m[string(p.Key)], p.Value)
		}
	}
	if len(m) != len(pairs) {
		t.Errorf("the log plays %d keys, the store holds %d:\n%s", len(m), len(pairs), want.String())
	}
}

// TestRevisionReads: Get and Scan say the revision their view holds.
func TestRevisionReads(t *testing.T) {
	s := openMem(t)
	if _, _, rev, err := s.GetRevision([]byte("a")); err != nil || rev != 0 {
		t.Fatalf("GetRevision on an empty store: %d, %v", rev, err)
	}
	s.Put([]byte("a"), []byte("1"))
	s.Batch([]Mutation{{Key: []byte("b"), Value: []byte("2")}, {Key: []byte("a"), Delete: true}})
	if _, found, rev, err := s.GetRevision([]byte("a")); err != nil || found || rev != 2 {
		t.Fatalf("GetRevision: found %v, revision %d, %v; want not found at 2", found, rev, err)
	}
	pairs, _, rev, err := s.ScanRevision(ScanOptions{Limit: 10})
	if err != nil || len(pairs) != 1 || rev != 2 {
		t.Fatalf("ScanRevision: %d pairs at %d, %v; want 1 at 2", len(pairs), rev, err)
	}
}

// TestRevisionSurvivesReopen: the log and the revision are on disk with
// the data; the next write after a reopen continues the count.
func TestRevisionSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, NoFreeSpaceCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		s.Put([]byte(fmt.Sprint(i)), []byte("v"))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: dir, NoFreeSpaceCheck: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Revision(); got != 5 {
		t.Fatalf("Revision after reopen = %d, want 5", got)
	}
	s.Delete([]byte("0"))
	cs := readLog(t, s, 1)
	if len(cs) != 6 || cs[5].Revision != 6 || !cs[5].Mutations[0].Delete {
		t.Fatalf("log after reopen and a delete: %+v", cs)
	}
}

// TestLogRetention: the log keeps its bounds, a read from a dropped
// revision is a *CompactedError, and from the oldest kept one works.
func TestLogRetention(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retention LogRetention
		maxKept   int
	}{
		{"revisions", LogRetention{Revisions: 32}, 32 + 2},
		{"bytes", LogRetention{Bytes: 4 << 10}, (4<<10 + 4<<10/16) / 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(Options{InMemory: true, LogRetention: tc.retention})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 500 {
				if err := s.Put([]byte(fmt.Sprint(i)), bytes.Repeat([]byte("v"), 100)); err != nil {
					t.Fatal(err)
				}
			}
			oldest := s.OldestRevision()
			kept := readLog(t, s, oldest)
			if len(kept) == 0 || len(kept) > tc.maxKept || kept[len(kept)-1].Revision != 500 || kept[0].Revision != oldest {
				t.Fatalf("kept %d revisions from %d (oldest %d), want at most %d up to 500", len(kept), kept[0].Revision, oldest, tc.maxKept)
			}
			_, _, err = s.Changes(oldest-1, 10, 1<<20)
			var ce *CompactedError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCompacted) || ce.Oldest != oldest || ce.Revision != oldest-1 {
				t.Fatalf("Changes from a dropped revision: %v, want a *CompactedError naming %d and %d", err, oldest-1, oldest)
			}
		})
	}
}

// TestWaitRevision: it returns once the revision passes, when its context
// ends, and when the store closes.
func TestWaitRevision(t *testing.T) {
	s, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitRevision(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitRevision with a canceled context: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.WaitRevision(context.Background(), 0) }()
	s.Put([]byte("a"), nil)
	if err := <-waited; err != nil {
		t.Fatalf("WaitRevision(0) after a write: %v", err)
	}
	go func() { waited <- s.WaitRevision(context.Background(), 1) }()
	s.Close()
	if err := <-waited; !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitRevision across Close: %v, want ErrClosed", err)
	}
}

// makeV1 writes a version 1 data directory: keys as they are in Pebble.
func makeV1(t *testing.T, pairs ...string) string {
	t.Helper()
	dir := t.TempDir()
	db, err := pebble.Open(filepath.Join(dir, pebbleDirName), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(pairs); i += 2 {
		db.Set([]byte(pairs[i]), []byte(pairs[i+1]), pebble.Sync)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir, marker{Format: markerFormat, Version: 1, State: stateReady, Created: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestVersion1Migrated: a version 1 directory is copied into version 2
// at Open, keys and values as they were, the old files removed; a copy
// cut short (a leftover directory from a crash) is done again.
func TestVersion1Migrated(t *testing.T) {
	for _, leftover := range []bool{false, true} {
		t.Run(fmt.Sprintf("leftover=%v", leftover), func(t *testing.T) {
			dir := makeV1(t, "a", "1", "m/revision", "not ours", "r\x00", "raw")
			if leftover {
				if err := os.MkdirAll(filepath.Join(dir, migratedDirName), 0o755); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(dir, migratedDirName, "MANIFEST-000001"), []byte("half"), 0o644)
			}
			s, err := Open(Options{Dir: dir, NoFreeSpaceCheck: true})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := dump(t, s), "a=1\nm/revision=not ours\nr\x00=raw\n"; got != want {
				t.Fatalf("after the migration the store holds\n%q\nwant\n%q", got, want)
			}
			if s.Revision() != 0 {
				t.Fatalf("Revision() = %d after a migration, want 0", s.Revision())
			}
			s.Put([]byte("b"), []byte("2"))
			s.Close()
			if _, err := os.Stat(filepath.Join(dir, pebbleDirName)); !os.IsNotExist(err) {
				t.Errorf("the version 1 files are still there: %v", err)
			}
			b, _ := os.ReadFile(filepath.Join(dir, markerName))
			var m marker
			if err := json.Unmarshal(b, &m); err != nil || m.Version != markerVersion || m.Dir != migratedDirName {
				t.Fatalf("marker after the migration: %s (%v)", b, err)
			}
			s, err = Open(Options{Dir: dir, NoFreeSpaceCheck: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := dump(t, s); got != "a=1\nb=2\nm/revision=not ours\nr\x00=raw\n" || s.Revision() != 1 {
				t.Fatalf("reopened after the migration: %q at revision %d", got, s.Revision())
			}
		})
	}
}

func FuzzDecodeChange(f *testing.F) {
	f.Add(encodeChange([]Mutation{{Key: []byte("k"), Value: []byte("v")}}))
	f.Add(encodeChange([]Mutation{{Key: []byte("a"), Value: nil}, {Key: []byte("b"), Delete: true}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		muts, err := decodeChange(b)
		if err != nil {
			return
		}
		// Lengths may be written longer than needed, so compare what
		// the record means, not its bytes.
		rec := encodeChange(muts)
		if len(rec) != changeSize(muts) {
			t.Fatalf("%x: changeSize %d, record of %d bytes", b, changeSize(muts), len(rec))
		}
		again, err := decodeChange(rec)
		if err != nil || len(again) != len(muts) {
			t.Fatalf("%x decodes to %d mutations, which encode to a record that decodes to %d, %v", b, len(muts), len(again), err)
		}
		for i := range muts {
			if again[i].Delete != muts[i].Delete || !bytes.Equal(again[i].Key, muts[i].Key) || !bytes.Equal(again[i].Value, muts[i].Value) {
				t.Fatalf("mutation %d of %x: %+v, then %+v", i, b, muts[i], again[i])
			}
		}
	})
}

// TestBatchSize: batchSize leaves room for all that Batch and commit put
// in a Pebble batch, so that the batch is never grown (copied) while it
// fills, and the change record is exactly changeSize long.
func TestBatchSize(t *testing.T) {
	s := openMem(t)
	long := bytes.Repeat([]byte("v"), 300)
	for _, muts := range [][]Mutation{
		{{Key: []byte("k"), Value: []byte("v")}},
		{{Key: []byte("a")}, {Key: []byte("b"), Delete: true}},
		{{Key: long, Value: long}, {Key: []byte("d"), Delete: true}, {Key: []byte("e"), Value: bytes.Repeat(long, 1000)}},
		slices.Repeat([]Mutation{{Key: []byte("key/0001"), Value: long}}, MaxBatchMutations),
	} {
		if got := len(encodeChange(muts)); got != changeSize(muts) {
			t.Errorf("%d mutations: changeSize %d, record of %d bytes", len(muts), changeSize(muts), got)
		}
		// What Batch and commit add, in their order.
		b := s.db.NewBatchWithSize(batchSize(muts))
		room := cap(b.Repr())
		for _, m := range muts {
			if m.Delete {
				b.Delete(dataKey(m.Key), nil)
			} else {
				b.Set(dataKey(m.Key), m.Value, nil)
			}
		}
		b.SetDeferred(logKeyLen, changeSize(muts))
		b.Set(revisionKey, make([]byte, 8), nil)
		if cap(b.Repr()) != room {
			t.Errorf("%d mutations: the batch grew from %d bytes to %d (%d used)", len(muts), room, cap(b.Repr()), len(b.Repr()))
		}
		b.Close()
	}
}

// TestGetRevisionConsistent: under a stream of writes, every GetRevision
// returns the value that the revision it names wrote. One writer puts "a"
// = i as revision i, so a read that pairs a revision with a newer or older
// value is caught.
func TestGetRevisionConsistent(t *testing.T) {
	s := openMem(t)
	const writes = 3000
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads [2]int
	for r := range reads {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, found, rev, err := s.GetRevision([]byte("a"))
				if err != nil {
					t.Error(err)
					return
				}
				if rev == 0 && found || rev > 0 && string(v) != strconv.FormatUint(rev, 10) {
					t.Errorf("GetRevision: %q (found %v) at revision %d", v, found, rev)
					return
				}
				reads[r]++
			}
		})
	}
	for i := 1; i <= writes; i++ {
		if err := s.Put([]byte("a"), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if v, _, rev, err := s.GetRevision([]byte("a")); err != nil || rev != writes || string(v) != strconv.Itoa(writes) {
		t.Errorf("after the writes: %q at %d, %v", v, rev, err)
	}
	t.Logf("reads during %d writes: %v", writes, reads)
}

// TestGetRevisionRace: a write applied between GetRevision's load of the
// revision and its read of the key makes it read again from a snapshot,
// so that it returns the new value with the new revision, not the new
// value with the old one.
func TestGetRevisionRace(t *testing.T) {
	s := openMem(t)
	if err := s.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	writes := 0
	s.afterRevisionLoad = func() {
		if writes++; writes == 1 {
			if err := s.Put([]byte("a"), []byte("2")); err != nil {
				t.Error(err)
			}
		}
	}
	v, found, rev, err := s.GetRevision([]byte("a"))
	if err != nil || !found || string(v) != strconv.FormatUint(rev, 10) {
		t.Errorf("GetRevision with a write in between: %q (found %v) at revision %d, %v", v, found, rev, err)
	}
	if writes != 1 {
		t.Errorf("the hook ran %d times", writes)
	}
}

// TestGetRevisionAllocs: a Get with its revision costs a few allocations
// (the Pebble key, the value's copy), not a snapshot's and the compaction
// check that closing one runs (10 and more before).
func TestGetRevisionAllocs(t *testing.T) {
	s := openMem(t)
	if err := s.Put([]byte("key"), make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(500, func() {
		if _, found, _, err := s.GetRevision([]byte("key")); err != nil || !found {
			t.Fatal(found, err)
		}
	})
	if n > 4 {
		t.Errorf("GetRevision makes %.1f allocations, want at most 4", n)
	}
	t.Logf("%.1f allocations per GetRevision", n)
}
