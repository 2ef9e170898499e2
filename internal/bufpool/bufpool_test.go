package bufpool

import "testing"

func TestGetSizes(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 4096, 4097, 1 << 20, 64 << 20, 64<<20 + 1} {
		b := Get(n)
		if len(b) != n {
			t.Fatalf("Get(%d): len %d", n, len(b))
		}
		if n > 0 && n <= 64<<20 && cap(b)&(cap(b)-1) != 0 {
			t.Fatalf("Get(%d): cap %d not a power of two", n, cap(b))
		}
		Put(b)
	}
}

func TestRecycles(t *testing.T) {
	b := Get(1000)
	b[0] = 42
	Put(b)
	// sync.Pool may drop items at any time, so only check that what comes
	// back is sound, and that Put/Get do not allocate.
	allocs := testing.AllocsPerRun(100, func() {
		x := Get(1000)
		Put(x)
	})
	if allocs > 0.5 {
		t.Fatalf("Get/Put allocates %.1f times per call", allocs)
	}
}

func TestPutForeign(t *testing.T) {
	Put(make([]byte, 100))     // not a class size: dropped
	Put(make([]byte, 10, 128)) // a class size: kept
	if b := Get(100); len(b) != 100 {
		t.Fatal("bad length")
	}
}

// PutTail gives back the whole buffer a tail was cut from: the next Get of
// its class returns the buffer's start, not the tail's.
func TestPutTail(t *testing.T) {
	// Under -race sync.Pool drops some Puts at random: try a few times.
	for range 100 {
		x := Get(1000)
		x[0], x[12] = 1, 2
		PutTail(x[12:], 12)
		y := Get(1000)
		if &y[0] == &x[0] {
			return
		}
		if &y[0] == &x[12] {
			t.Fatal("Get returned the tail, not the buffer")
		}
	}
	t.Skip("the pool never returned the buffer")
}
