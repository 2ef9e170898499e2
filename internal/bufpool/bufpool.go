package bufpool

import (
	"math/bits"
	"sync"
	"unsafe"
)

const (
	minShift = 6  // 64 B: smaller requests share this class
	maxShift = 26 // 64 MiB: larger requests are allocated and dropped
)

// pools[i] holds slices whose capacity is exactly 1<<(i+minShift). The
// pools store the slice's data pointer, not the slice, so Put does not
// allocate a slice header on the heap.
var pools [maxShift - minShift + 1]sync.Pool

func class(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minShift
}

// Get returns a slice of length n. Its contents are undefined.
func Get(n int) []byte {
	c := class(n)
	if c >= len(pools) {
		return make([]byte, n)
	}
	if p, ok := pools[c].Get().(unsafe.Pointer); ok {
		return unsafe.Slice((*byte)(p), 1<<(c+minShift))[:n]
	}
	return make([]byte, n, 1<<(c+minShift))
}

// Put recycles b. b must not be used afterwards. Slices not obtained from
// Get are accepted only when their capacity is exactly a size class.
func Put(b []byte) {
	c := cap(b)
	if c < 1<<minShift || c&(c-1) != 0 {
		return
	}
	i := bits.Len(uint(c)) - 1 - minShift
	if i >= len(pools) {
		return
	}
	pools[i].Put(unsafe.Pointer(unsafe.SliceData(b[:1])))
}

// PutTail recycles x, where b is x[off:] and x came from Get: a caller
// that keeps only the tail of a buffer (a message's body after its header)
// gives the whole back. b must not be used afterwards. A b of capacity 0
// is dropped: its slice expression may not have advanced the pointer.
func PutTail(b []byte, off int) {
	if cap(b) == 0 || off < 0 {
		return
	}
	p := unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), -off)
	Put(unsafe.Slice((*byte)(p), off+cap(b)))
}
