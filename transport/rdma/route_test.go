package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
)

func someOffers() []offered {
	return []offered{
		{gid: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 9, 14: 9, 15: 1}, kind: endpointRoCE},
		{gid: [16]byte{0: 0xfe, 1: 0x80, 15: 7}, lid: 0x1a, kind: endpointIB},
	}
}

func TestEndpointsRoundTrip(t *testing.T) {
	tr := New(Options{})
	want := someOffers()
	got, err := tr.readEndpoints(bytes.NewReader(encodeEndpoints(want)))
	if err != nil || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("%+v, %v", got, err)
	}
	if err := checkQuery(encodeQuery()); err != nil || string(encodeQuery()[:4]) != queryMagic || len(encodeQuery()) != helloLen {
		t.Fatalf("query: %v", err)
	}
}

// The picked endpoint travels in byte 56 only with featRoute: without it
// the byte is reserved, as before.
func TestHelloRoute(t *testing.T) {
	h := validHello()
	h.features, h.endpoint = featRoute, 3
	got, err := decodeHello(h.encode())
	if err != nil || got != h {
		t.Fatalf("%+v, %v", got, err)
	}
	h.features = 0
	if got, err := decodeHello(h.encode()); err != nil || got.endpoint != 0 {
		t.Fatalf("without featRoute: %+v, %v", got, err)
	}
}

func TestReadEndpointsRejects(t *testing.T) {
	tr := New(Options{})
	good := encodeEndpoints(someOffers())
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
		is   error
		want string
	}{
		{"no endpoints", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[4:], 0); return b[:6] }), transport.ErrProtocol, "offers 0 endpoints"},
		{"too many", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[4:], maxEndpoints+1); return b }), transport.ErrProtocol, "offers 17 endpoints"},
		{"huge count", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[4:], 0xFFFF); return b }), transport.ErrProtocol, "offers 65535"},
		{"truncated", good[:len(good)-1], transport.ErrProtocol, "peer closed"},
		{"kind", mutate(func(b []byte) []byte { b[6+18] = 3; return b }), transport.ErrProtocol, "kind 3"},
		{"zero gid", mutate(func(b []byte) []byte { clear(b[6+endpointLen : 6+endpointLen+16]); return b }), transport.ErrProtocol, "endpoint 1 has the zero GID"},
		{"refused", encodeRefusal("no RDMA endpoint"), ErrRefused, "no RDMA endpoint"},
		{"legacy server", encodeRefusal(`rdma transport protocol error: not an rdmarpc rdma peer (hello starts "RRPQ", want "RRPR")`), errLegacyServer, "RRPQ"},
		{"a TCP server", []byte{3, 6, 0, 0, 0, 0, 0, 0}, transport.ErrNoDevice, "not an rdmarpc RDMA server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tr.readEndpoints(bytes.NewReader(tc.b))
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error wrapping %v containing %q", err, tc.is, tc.want)
			}
		})
	}
}

// FuzzReadEndpoints: a server's answer to the query never panics, never
// reads beyond its bound, and fails only with a refusal, a protocol error,
// "no RDMA path" or a read error.
func FuzzReadEndpoints(f *testing.F) {
	f.Add(encodeEndpoints(someOffers()))
	f.Add(encodeEndpoints(someOffers()[:1]))
	f.Add(encodeRefusal("no"))
	f.Add([]byte("RRPE\xff\xff"))
	f.Add([]byte{3, 6, 0, 0, 0, 0})
	tr := New(Options{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		eps, err := tr.readEndpoints(r)
		if err != nil {
			if !errors.Is(err, ErrRefused) && !errors.Is(err, transport.ErrProtocol) && !errors.Is(err, transport.ErrNoDevice) && !errors.Is(err, errLegacyServer) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(eps) == 0 || len(eps) > maxEndpoints {
			t.Fatalf("%d endpoints", len(eps))
		}
		if read := len(in) - r.Len(); read != 6+len(eps)*endpointLen {
			t.Fatalf("read %d bytes for %d endpoints", read, len(eps))
		}
		again, err := tr.readEndpoints(bytes.NewReader(encodeEndpoints(eps)))
		if err != nil || len(again) != len(eps) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// TestServerEndpointsExchange: the server answers a query with its
// endpoints, and refuses a query of another version, a hello after the
// query that names no endpoint or one beyond the answer, and takes the
// client's refusal; all before any queue pair (no device needed).
func TestServerEndpointsExchange(t *testing.T) {
	srv := newServing(New(Options{}), &offering{eps: []rdmadev.Endpoint{{Device: "rxe9", Port: 1}}, answer: encodeEndpoints(someOffers()[:1])})
	badVersion := encodeQuery()
	binary.BigEndian.PutUint16(badVersion[4:], 2)
	noRoute := validHello()
	beyond := validHello()
	beyond.features, beyond.endpoint = featRoute, 1
	for _, tc := range []struct {
		name  string
		query []byte
		then  []byte
		want  string
	}{
		{"version", badVersion, nil, "endpoints query version 2"},
		{"no route", encodeQuery(), noRoute.encode(), "names no endpoint"},
		{"beyond", encodeQuery(), beyond.encode(), "picks endpoint 1 of the 1 offered"},
		{"client refuses", encodeQuery(), encodeRefusal("client: no local RDMA device reaches"), "no local RDMA device reaches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(Options{})
			cli, boot := net.Pipe()
			defer cli.Close()
			errc := make(chan error, 1)
			go func() {
				_, err := tr.handshakeServer(context.Background(), boot, srv)
				boot.Close()
				errc <- err
			}()
			if _, err := cli.Write(tc.query); err != nil {
				t.Fatal(err)
			}
			if tc.then != nil {
				eps, err := tr.readEndpoints(cli)
				if err != nil || len(eps) != 1 || eps[0] != someOffers()[0] {
					t.Fatalf("answer: %+v, %v", eps, err)
				}
				if _, err := cli.Write(tc.then); err != nil {
					t.Fatal(err)
				}
			}
			go func() { _, _ = io.Copy(io.Discard, cli) }() // the refusal
			err := <-errc
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("server: %v, want an error containing %q", err, tc.want)
			}
			if tr.Counters()["handshakes_refused"] != 1 {
				t.Errorf("handshakes_refused = %d, want 1", tr.Counters()["handshakes_refused"])
			}
		})
	}
}

// TestServingLooksAgain: a listener's offering follows the endpoints that
// come and go, looked up at most once per endpointsRefresh however many
// clients ask (the lookup comes before the handshake gate); a lookup that
// finds the same endpoints, none, or fails keeps the offering; and an
// offering already handed to a handshake stays as it was.
func TestServingLooksAgain(t *testing.T) {
	a := rdmadev.Endpoint{Device: "rxe0", Port: 1, GID: [16]byte{15: 1}}
	b := rdmadev.Endpoint{Device: "rxe1", Port: 1, GID: [16]byte{15: 2}}
	var found []rdmadev.Endpoint
	var findErr error
	lookups := 0
	first := &offering{eps: []rdmadev.Endpoint{a}}
	s := newServing(New(Options{}), first)
	s.every = time.Hour
	s.find = func() ([]rdmadev.Endpoint, error) { lookups++; return found, findErr }
	s.open = func(eps []rdmadev.Endpoint) (*offering, error) {
		return &offering{eps: append([]rdmadev.Endpoint(nil), eps...)}, nil
	}
	ask := func() *offering { return s.current() }

	// Within the interval nobody looks, however many ask.
	found = []rdmadev.Endpoint{a, b}
	for range 1000 {
		if o := ask(); o != first {
			t.Fatal("the offering changed without a lookup")
		}
	}
	if lookups != 0 {
		t.Fatalf("%d lookups within the interval", lookups)
	}
	// Once it is over, one client's question looks, and the new endpoint
	// is offered; the handshake holding the first offering keeps it.
	s.looked = s.looked.Add(-s.every)
	o := ask()
	if lookups != 1 || len(o.eps) != 2 || o.eps[1] != b {
		t.Fatalf("after the interval: %d lookups, offering %v", lookups, o.eps)
	}
	if len(first.eps) != 1 || first.eps[0] != a {
		t.Fatalf("the offering handed out before changed: %v", first.eps)
	}
	for range 1000 {
		ask()
	}
	if lookups != 1 {
		t.Fatalf("%d lookups, want 1 per interval", lookups)
	}
	// The same endpoints, none, or a failed lookup: the offering stays.
	for _, tc := range []struct {
		found []rdmadev.Endpoint
		err   error
	}{{[]rdmadev.Endpoint{a, b}, nil}, {nil, nil}, {nil, errors.New("sysfs went away")}} {
		found, findErr = tc.found, tc.err
		s.looked = s.looked.Add(-s.every)
		if got := ask(); got != o {
			t.Fatalf("lookup of %v, %v replaced the offering with %v", tc.found, tc.err, got.eps)
		}
	}
	// An endpoint that goes is no longer offered.
	found, findErr = []rdmadev.Endpoint{b}, nil
	s.looked = s.looked.Add(-s.every)
	if got := ask(); len(got.eps) != 1 || got.eps[0] != b {
		t.Fatalf("after rxe0 went: %v", got.eps)
	}
	// A closed listener looks no more.
	s.close()
	s.looked = s.looked.Add(-s.every)
	ask()
	if lookups != 5 {
		t.Fatalf("%d lookups, want 5 (none after close)", lookups)
	}
}
