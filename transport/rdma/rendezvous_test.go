package rdma

import (
	"errors"
	"testing"

	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

func TestDecodeRndv(t *testing.T) {
	good := rndvDesc{id: 7, rkey: 0x1234, addr: 0x7f00_0000_1000, n: 1 << 20}
	enc := func(d rndvDesc) []byte {
		b := make([]byte, rndvDescLen)
		d.encode(b)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want uint32
		max  int
		ok   bool
	}{
		{"good", enc(good), 7, 1 << 20, true},
		{"short", enc(good)[:rndvDescLen-1], 7, 1 << 20, false},
		{"long", append(enc(good), 0), 7, 1 << 20, false},
		{"empty", nil, 7, 1 << 20, false},
		{"wrong id", enc(good), 8, 1 << 20, false},
		{"over the limit", enc(good), 7, 1<<20 - 1, false},
		{"zero length", enc(rndvDesc{id: 7, rkey: 1, addr: 4096}), 7, 1 << 20, false},
		{"wraps", enc(rndvDesc{id: 7, rkey: 1, addr: ^uint64(0) - 10, n: 100}), 7, 1 << 20, false},
		{"largest", enc(rndvDesc{id: 0, rkey: 1, addr: 0, n: ^uint32(0)}), 0, int(^uint32(0)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decodeRndv(tc.b, tc.want, tc.max)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if d.id != tc.want {
					t.Errorf("id %d", d.id)
				}
				return
			}
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("got %+v, %v; want a protocol error", d, err)
			}
		})
	}
	if d, _ := decodeRndv(enc(good), 7, 1<<20); d != good {
		t.Errorf("round trip: %+v, want %+v", d, good)
	}
}

// FuzzDecodeRndv: a descriptor from the network is either refused or
// describes what was asked for: the expected id, a length within the
// limit, a region that does not wrap; and it encodes back to its bytes.
func FuzzDecodeRndv(f *testing.F) {
	seed := make([]byte, rndvDescLen)
	rndvDesc{id: 3, rkey: 0xabcd, addr: 0x7f12_3456_7000, n: 300 << 10}.encode(seed)
	f.Add(seed, uint32(3), 1<<20)
	f.Add(seed, uint32(4), 1<<20)
	f.Add(seed[:10], uint32(3), 1<<20)
	f.Add(make([]byte, rndvDescLen), uint32(0), 64<<20)
	f.Fuzz(func(t *testing.T, b []byte, want uint32, max int) {
		d, err := decodeRndv(b, want, max)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		if d.id != want || d.n == 0 || int64(d.n) > int64(max) || d.addr+uint64(d.n) < d.addr {
			t.Fatalf("accepted %+v (want id %d, max %d)", d, want, max)
		}
		back := make([]byte, rndvDescLen)
		d.encode(back)
		if string(back) != string(b) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", b, d, back)
		}
	})
}

// TestRndvKinds: the rendezvous kinds, and the ask and the answer, decode
// with and without lends; the give-back kind still needs lends, and kinds
// past them are refused.
func TestRndvKinds(t *testing.T) {
	for _, lends := range []bool{false, true} {
		for _, k := range []kind{kindRndv, kindRndvDone, kindRndvRefused, kindAsk, kindAnswer} {
			got, credits, _, err := decodeImmLend(encodeImm(k, 5), lends)
			if err != nil || got != k || credits != 5 {
				t.Errorf("lends %v: %v decoded as %v, %d, %v", lends, k, got, credits, err)
			}
		}
		for k := kindAnswer + 1; k < 16; k++ {
			if _, _, _, err := decodeImmLend(encodeImm(k, 0), lends); err == nil {
				t.Errorf("lends %v: kind %d accepted", lends, k)
			}
		}
	}
	if _, _, _, err := decodeImmLend(encodeImm(kindGiveBack, 0), false); err == nil {
		t.Error("a give-back accepted without lends")
	}
	if s := kindRndvRefused.String(); s != "rendezvous refused" {
		t.Errorf("String: %q", s)
	}
}

// TestRendezvousChoice: which messages go by rendezvous.
func TestRendezvousChoice(t *testing.T) {
	c := &conn{o: &Options{RendezvousThreshold: 256 << 10}}
	c.peer.bufSize = 64 << 10
	if c.rendezvous(1 << 20) {
		t.Error("rendezvous without both sides offering it")
	}
	c.rndvOn = true
	for n, want := range map[int]bool{0: false, 64 << 10: false, 256 << 10: false, 256<<10 + 1: true, 16 << 20: true} {
		if got := c.rendezvous(n); got != want {
			t.Errorf("%d bytes: rendezvous %v, want %v", n, got, want)
		}
	}
	c.o.RendezvousThreshold = 1 // below one buffer: whole messages still go whole
	if c.rendezvous(64<<10) || !c.rendezvous(64<<10+1) {
		t.Error("threshold below the buffer size")
	}
	for in, want := range map[int]int{0: DefaultRendezvousThreshold, -5: -1, 1 << 20: 1 << 20} {
		if got := (Options{RendezvousThreshold: in}).withDefaults().RendezvousThreshold; got != want {
			t.Errorf("RendezvousThreshold %d became %d, want %d", in, got, want)
		}
	}
}

// TestReadClass: a read buffer's class is whole pages, at least the
// message, and at most a quarter more than it (past the first page).
func TestReadClass(t *testing.T) {
	for _, n := range []int{1, 100, 4095, 4096, 4097, 64 << 10, 70 << 10, 1<<20 - 100, 1 << 20, 1<<20 + 1, 16<<20 + 3, 1 << 30} {
		c := readClass(n)
		if c < n || c%pageSize != 0 {
			t.Errorf("readClass(%d) = %d: not whole pages at least the message", n, c)
		}
		if n > pageSize && 4*c > 5*n+4*pageSize {
			t.Errorf("readClass(%d) = %d: more than a quarter over", n, c)
		}
		if readClass(c) != c {
			t.Errorf("readClass(%d) = %d, a class of its own", c, readClass(c))
		}
	}
	if readClass(900<<10) != readClass(1<<20) {
		t.Errorf("900 KiB and 1 MiB in different classes: %d, %d", readClass(900<<10), readClass(1<<20))
	}
}

// TestReadChunks: a rendezvous read larger than rndvReadChunk is posted as
// consecutive chunks, one outstanding at a time, each at its offset in
// the local buffer and in the peer's region, together exactly the
// message; a chunk that finds no reserved send-queue entry waits for the
// send completion that frees one; only the last chunk's completion ends
// the read.
func TestReadChunks(t *testing.T) {
	defer func(old uint32) { rndvReadChunk = old }(rndvReadChunk)
	rndvReadChunk = 4096
	s := &sender{
		mem:      newArena(8, 2, nil, make([]byte, 16), nil),
		closeSig: &signal.Signal{},
		ctr:      &counters{},
	}
	s.rndv.rsvFree = 2
	mr := &verbs.MR{}
	d := rndvDesc{id: 1, rkey: 0xabc, addr: 0x10000, n: 2*4096 + 100}
	if err := s.queueRead(mr, d); err != nil {
		t.Fatal(err)
	}
	var off uint32
	for chunk := 0; ; chunk++ {
		if len(s.outbox) != 1 {
			t.Fatalf("chunk %d: %d work requests queued, want 1", chunk, len(s.outbox))
		}
		wr := s.outbox[0]
		s.outbox = s.outbox[:0]
		want := min(d.n-off, rndvReadChunk)
		if !wr.Read || wr.MR != mr || wr.Offset != off || wr.Length != want ||
			wr.RemoteAddr != d.addr+uint64(off) || wr.RKey != d.rkey || !wr.Signaled {
			t.Fatalf("chunk %d: %+v; want a signaled read of %d bytes at offset %d", chunk, wr, want, off)
		}
		if !s.isReadWR(wr.ID) || !s.readInFlight() {
			t.Fatalf("chunk %d: not recognized as the read in progress", chunk)
		}
		if chunk == 1 {
			// The other reserved entry is taken (a reply, a bind):
			// the next chunk must wait for a send completion.
			s.rndv.rsvFree = 0
		}
		n, last, ok := s.readCompleted(wr.ID)
		if !ok || n != want {
			t.Fatalf("chunk %d: completion taken %v, %d bytes", chunk, ok, n)
		}
		off += n
		if last {
			break
		}
		if _, _, ok := s.readCompleted(wr.ID); ok {
			t.Fatalf("chunk %d: its completion taken twice", chunk)
		}
		if chunk == 1 {
			if _, _, _, posted := s.sendCompleted(wr.ID - 1); posted || len(s.outbox) != 0 {
				t.Fatal("the next chunk posted with no reserved entry free")
			}
			if s.isReadWR(wr.ID) || !s.readInFlight() {
				t.Fatal("a chunk waiting for an entry: the read must stay in progress, its last chunk done")
			}
		}
		if _, _, _, posted := s.sendCompleted(wr.ID); !posted {
			t.Fatalf("chunk %d: the next chunk not posted once the send completions freed entries", chunk)
		}
	}
	if off != d.n || s.readInFlight() || len(s.outbox) != 0 {
		t.Errorf("after the last chunk: %d of %d bytes, in progress %v, %d queued", off, d.n, s.readInFlight(), len(s.outbox))
	}
	if _, _, _, posted := s.sendCompleted(s.seq - 1); posted || s.rndv.rsvFree != 1 {
		t.Errorf("after the read: posted %v, %d reserved entries free, want 1 (the other still taken)", posted, s.rndv.rsvFree)
	}
}
