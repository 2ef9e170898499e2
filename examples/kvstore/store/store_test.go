package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func openMem(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func mustGet(t *testing.T, s *Store, key string) (string, bool) {
	t.Helper()
	v, ok, err := s.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(v), ok
}

// dump returns every pair of s as "k=v" lines.
func dump(t *testing.T, s *Store) string {
	t.Helper()
	pairs, more, err := s.Scan(ScanOptions{Limit: 1 << 20})
	if err != nil || more {
		t.Fatalf("Scan: %v (more %v)", err, more)
	}
	var b strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&b, "%s=%s\n", p.Key, p.Value)
	}
	return b.String()
}

func TestPutGetDelete(t *testing.T) {
	s := openMem(t)
	if _, ok := mustGet(t, s, "a"); ok {
		t.Fatal("Get of a missing key: found")
	}
	if err := s.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if v, ok := mustGet(t, s, "a"); !ok || v != "1" {
		t.Fatalf("Get(a) = %q, %v; want 1, true", v, ok)
	}
	if v, ok := mustGet(t, s, "empty"); !ok || v != "" {
		t.Fatalf("Get(empty) = %q, %v; want an empty value that exists", v, ok)
	}
	if err := s.Put([]byte("a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if v, _ := mustGet(t, s, "a"); v != "2" {
		t.Fatalf("Get(a) after overwrite = %q, want 2", v)
	}
	for range 2 { // deleting a missing key is fine
		if err := s.Delete([]byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := mustGet(t, s, "a"); ok {
		t.Fatal("Get after Delete: found")
	}
}

func TestGetReturnsACopy(t *testing.T) {
	s := openMem(t)
	s.Put([]byte("k"), []byte("value"))
	v, _, _ := s.Get([]byte("k"))
	copy(v, "XXXXX")
	if got, _ := mustGet(t, s, "k"); got != "value" {
		t.Fatalf("changing Get's result changed the store: %q", got)
	}
}

func TestLimits(t *testing.T) {
	long := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	tests := []struct {
		name string
		op   func(s *Store) error
	}{
		{"get empty key", func(s *Store) error { _, _, err := s.Get(nil); return err }},
		{"put empty key", func(s *Store) error { return s.Put([]byte{}, []byte("v")) }},
		{"delete empty key", func(s *Store) error { return s.Delete(nil) }},
		{"put long key", func(s *Store) error { return s.Put(long(MaxKeySize+1), nil) }},
		{"get long key", func(s *Store) error { _, _, err := s.Get(long(MaxKeySize + 1)); return err }},
		{"put long value", func(s *Store) error { return s.Put([]byte("k"), long(MaxValueSize+1)) }},
		{"cas long value", func(s *Store) error { return s.CompareAndSwap([]byte("k"), Absent(), long(MaxValueSize+1)) }},
		{"cas empty key", func(s *Store) error { return s.CompareAndSwap(nil, Absent(), nil) }},
		{"batch with a bad last mutation", func(s *Store) error {
			return s.Batch([]Mutation{{Key: []byte("b1"), Value: []byte("v")}, {Key: []byte("b2"), Value: long(MaxValueSize + 1)}})
		}},
		{"batch too large", func(s *Store) error {
			muts := make([]Mutation, MaxBatchMutations+1)
			for i := range muts {
				muts[i] = Mutation{Key: fmt.Appendf(nil, "m%d", i)}
			}
			return s.Batch(muts)
		}},
		{"scan without a limit", func(s *Store) error { _, _, err := s.Scan(ScanOptions{}); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openMem(t)
			s.Put([]byte("k"), []byte("old"))
			before := dump(t, s)
			if err := tc.op(s); !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			if after := dump(t, s); after != before {
				t.Fatalf("a refused call changed the store:\n%s\nwas\n%s", after, before)
			}
		})
	}
	// At the limits exactly, all is well.
	s := openMem(t)
	if err := s.Put(long(MaxKeySize), long(MaxValueSize)); err != nil {
		t.Fatalf("Put at the limits: %v", err)
	}
}

func TestBatch(t *testing.T) {
	s := openMem(t)
	s.Put([]byte("gone"), []byte("x"))
	err := s.Batch([]Mutation{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: []byte("b"), Value: []byte("1")},
		{Key: []byte("a"), Value: []byte("2")}, // later wins
		{Key: []byte("gone"), Delete: true},
		{Key: []byte("b"), Delete: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, s), "a=2\n"; got != want {
		t.Fatalf("after the batch:\n%swant\n%s", got, want)
	}
	if err := s.Batch(nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

// TestBatchAtomic checks that a reader never sees part of a batch: writers
// move a token between keys, readers scan and count tokens.
func TestBatchAtomic(t *testing.T) {
	s := openMem(t)
	const keys = 8
	if err := s.Put([]byte("k0"), []byte("token")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	wg.Add(1)
	go func() { // writer: move the token around, 2000 times
		defer wg.Done()
		defer close(stop)
		for i := range 2000 {
			from, to := fmt.Appendf(nil, "k%d", i%keys), fmt.Appendf(nil, "k%d", (i+1)%keys)
			if err := s.Batch([]Mutation{{Key: from, Delete: true}, {Key: to, Value: []byte("token")}}); err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pairs, _, err := s.Scan(ScanOptions{Limit: 100})
				if err == nil && len(pairs) != 1 {
					err = fmt.Errorf("a scan saw %d tokens, want 1: a batch was seen half applied", len(pairs))
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
}

func TestCompareAndSwap(t *testing.T) {
	s := openMem(t)
	k := []byte("k")
	if err := s.CompareAndSwap(k, Absent(), []byte("1")); err != nil {
		t.Fatalf("CAS on an absent key expecting absence: %v", err)
	}
	var ce *ConflictError
	if err := s.CompareAndSwap(k, Absent(), []byte("2")); !errors.As(err, &ce) || !ce.Found || string(ce.Current) != "1" {
		t.Fatalf("CAS expecting absence on a present key: got %v (%+v), want a conflict holding 1", err, ce)
	}
	if err := s.CompareAndSwap(k, Holds([]byte("nope")), []byte("2")); !errors.As(err, &ce) || string(ce.Current) != "1" {
		t.Fatalf("CAS with a wrong expectation: got %v, want a conflict", err)
	}
	if err := s.CompareAndSwap(k, Holds([]byte("1")), []byte("2")); err != nil {
		t.Fatalf("CAS with the right expectation: %v", err)
	}
	if v, _ := mustGet(t, s, "k"); v != "2" {
		t.Fatalf("after CAS: %q, want 2", v)
	}
	if err := s.CompareAndSwap([]byte("missing"), Holds(nil), []byte("x")); !errors.As(err, &ce) || ce.Found {
		t.Fatalf("CAS expecting a value on a missing key: got %v, want a conflict saying not found", err)
	}
	s.Put([]byte("e"), nil)
	if err := s.CompareAndSwap([]byte("e"), Holds(nil), []byte("x")); err != nil {
		t.Fatalf("CAS expecting an empty value that exists: %v", err)
	}
}

// TestCompareAndSwapCounter increments a counter by CAS from many
// goroutines, with blind writes to the other keys of its stripe going on:
// no increment may be lost.
func TestCompareAndSwapCounter(t *testing.T) {
	s := openMem(t)
	k := []byte("counter")
	s.Put(k, []byte("0"))
	const workers, incs = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range incs {
				for {
					cur, _, err := s.Get(k)
					if err != nil {
						errs <- err
						return
					}
					var n int
					fmt.Sscan(string(cur), &n)
					err = s.CompareAndSwap(k, Holds(cur), fmt.Append(nil, n+1))
					var ce *ConflictError
					if errors.As(err, &ce) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, _ := mustGet(t, s, "counter"); v != fmt.Sprint(workers*incs) {
		t.Fatalf("counter = %s, want %d", v, workers*incs)
	}
}

func TestScan(t *testing.T) {
	s := openMem(t)
	for _, k := range []string{"a", "b", "b1", "b2", "c"} {
		s.Put([]byte(k), []byte("v"+k))
	}
	keys := func(pairs []KV) string {
		var ks []string
		for _, p := range pairs {
			ks = append(ks, string(p.Key))
		}
		return strings.Join(ks, ",")
	}
	tests := []struct {
		name string
		o    ScanOptions
		want string
		more bool
	}{
		{"all", ScanOptions{Limit: 10}, "a,b,b1,b2,c", false},
		{"limit", ScanOptions{Limit: 2}, "a,b", true},
		{"limit exactly", ScanOptions{Limit: 5}, "a,b,b1,b2,c", false},
		{"range", ScanOptions{Lower: []byte("b"), Upper: []byte("c"), Limit: 10}, "b,b1,b2", false},
		{"from", ScanOptions{Lower: []byte("b15"), Limit: 10}, "b2,c", false},
		{"empty range", ScanOptions{Lower: []byte("x"), Limit: 10}, "", false},
		// each pair is 3 or 4 bytes: the first always comes, then the cap applies
		{"max bytes", ScanOptions{Limit: 10, MaxBytes: 5}, "a", true},
		{"max bytes tiny", ScanOptions{Limit: 10, MaxBytes: 1}, "a", true},
		{"keys only", ScanOptions{Limit: 10, MaxBytes: 5, KeysOnly: true}, "a,b,b1", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pairs, more, err := s.Scan(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(pairs); got != tc.want || more != tc.more {
				t.Fatalf("got %s (more %v), want %s (more %v)", got, more, tc.want, tc.more)
			}
			for _, p := range pairs {
				want := "v" + string(p.Key)
				if tc.o.KeysOnly {
					want = ""
				}
				if string(p.Value) != want {
					t.Fatalf("value of %s = %q, want %q", p.Key, p.Value, want)
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	s, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Get([]byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
	if err := s.Put([]byte("k"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v, want ErrClosed", err)
	}
	if _, _, err := s.Scan(ScanOptions{Limit: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Scan after Close: %v, want ErrClosed", err)
	}
	if err := s.CompareAndSwap([]byte("k"), Absent(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("CompareAndSwap after Close: %v, want ErrClosed", err)
	}
}
