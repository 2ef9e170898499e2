package transport_test

import (
	"testing"

	"github.com/rdmarpc/rdmarpc/transport"
)

// owner counts what is given back; detach says whether it lets memory go.
type owner struct {
	detach             bool
	released, detached int
}

func (o *owner) ReleaseBuffer(uint64, []byte) { o.released++ }

type detacher struct{ *owner }

func (d detacher) DetachBuffer(uint64, []byte) bool {
	if !d.detach {
		return false
	}
	d.detached++
	return true
}

// Detach hands the memory over once, empties the Buffer so that a Release
// after it (or a second Detach) settles nothing twice, and leaves a Buffer
// whose owner keeps its memory as it was, to be released as usual.
func TestDetach(t *testing.T) {
	mem := []byte("message")
	for _, tc := range []struct {
		name         string
		o            *owner
		wantOK       bool
		wantReleased int
		wantDetached int
	}{
		{name: "detacher", o: &owner{detach: true}, wantOK: true, wantDetached: 1},
		{name: "detacher that keeps it", o: &owner{}, wantReleased: 1},
		{name: "plain owner", o: &owner{detach: true}, wantReleased: 1},
		{name: "heap", wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var own transport.Owner
			switch {
			case tc.o == nil:
			case tc.name == "plain owner":
				own = tc.o
			default:
				own = detacher{tc.o}
			}
			b := transport.NewBuffer(mem, own, 7)
			data, ok := b.Detach()
			if ok != tc.wantOK {
				t.Fatalf("Detach ok = %v, want %v", ok, tc.wantOK)
			}
			if ok {
				if &data[0] != &mem[0] || len(data) != len(mem) {
					t.Fatal("Detach did not return the buffer's memory")
				}
				if b.Len() != 0 || b.Bytes() != nil {
					t.Fatalf("Buffer not emptied by Detach: %d bytes", b.Len())
				}
				if _, again := b.Detach(); again {
					t.Fatal("second Detach succeeded")
				}
			} else if data != nil || b.Len() != len(mem) {
				t.Fatalf("failed Detach changed the Buffer (%d bytes, data %v)", b.Len(), data)
			}
			b.Release()
			b.Release()
			if tc.o != nil && (tc.o.released != tc.wantReleased || tc.o.detached != tc.wantDetached) {
				t.Fatalf("owner saw %d releases, %d detaches; want %d, %d", tc.o.released, tc.o.detached, tc.wantReleased, tc.wantDetached)
			}
		})
	}
}
