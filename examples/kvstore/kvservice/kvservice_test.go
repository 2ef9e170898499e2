package kvservice

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/status"
)

func TestPrefixEnd(t *testing.T) {
	tests := []struct{ in, want []byte }{
		{[]byte("a"), []byte("b")},
		{[]byte("ab"), []byte("ac")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xff\xff"), []byte("b")},
		{[]byte("\xff"), nil},
		{[]byte("\xff\xff"), nil},
		{[]byte{0}, []byte{1}},
	}
	for _, tc := range tests {
		if got := prefixEnd(tc.in); !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	in := []byte("ab")
	prefixEnd(in)
	if string(in) != "ab" {
		t.Error("prefixEnd changed its argument")
	}
}

func TestToken(t *testing.T) {
	sel := selection([]byte("p"), nil, nil)
	tok := makeToken(sel, []byte("p/last"))
	last, err := parseToken(tok, sel)
	if err != nil || string(last) != "p/last" {
		t.Fatalf("round trip: %q, %v", last, err)
	}
	// The selection covers every field, and field boundaries.
	if selection([]byte("ab"), nil, nil) == selection([]byte("a"), []byte("b"), nil) {
		t.Error("prefix ab and prefix a + start b share a selection")
	}
	bad := [][]byte{nil, {1}, {2, 0, 0, 0, 0, 'k'}, append([]byte{1}, bytes.Repeat([]byte{0}, 4)...), makeToken(sel+1, []byte("k"))}
	for _, b := range bad {
		if _, err := parseToken(b, sel); status.Code(err) != codes.InvalidArgument {
			t.Errorf("parseToken(%q): %v, want InvalidArgument", b, err)
		}
	}
}

func TestToStatus(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("wrapped: %w", store.ErrInvalid), codes.InvalidArgument},
		{&store.ConflictError{Found: true, Current: []byte("x")}, codes.Aborted},
		{store.ErrClosed, codes.Unavailable},
		{errors.New("disk on fire"), codes.Internal},
		{&store.DiskFullError{Dir: "d", Free: 1, Need: 2}, codes.ResourceExhausted},
		{fmt.Errorf("%w: reopening", store.ErrDiskFull), codes.ResourceExhausted},
		{fmt.Errorf("wrapped: %w", store.ErrFailed), codes.Internal},
	}
	for _, tc := range tests {
		err := toStatus(tc.err)
		if status.Code(err) != tc.code {
			t.Errorf("toStatus(%v) = %v, want %v", tc.err, err, tc.code)
		}
		if c, ok := Conflict(err); ok != (tc.code == codes.Aborted) || ok && string(c.GetCurrent()) != "x" {
			t.Errorf("Conflict(toStatus(%v)) = %v, %v", tc.err, c, ok)
		}
	}
}

// FuzzParseToken: page tokens come from clients, so from the network. Any
// bytes either decode to a key within the limit or fail with
// InvalidArgument; a token made by makeToken always decodes to its key.
func FuzzParseToken(f *testing.F) {
	sel := selection([]byte("user/"), nil, nil)
	f.Add(makeToken(sel, []byte("user/42")), sel)
	f.Add([]byte{tokenVersion, 0, 0, 0, 0}, uint32(0))
	f.Add([]byte("garbage"), uint32(7))
	f.Fuzz(func(t *testing.T, tok []byte, sel uint32) {
		last, err := parseToken(tok, sel)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error %v is not InvalidArgument", err)
			}
			return
		}
		if len(last) == 0 || len(last) > store.MaxKeySize {
			t.Fatalf("decoded a %d-byte key", len(last))
		}
		again, err := parseToken(makeToken(sel, last), sel)
		if err != nil || !bytes.Equal(again, last) {
			t.Fatalf("round trip: %q, %v", again, err)
		}
	})
}
