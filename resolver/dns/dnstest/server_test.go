package dnstest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/net/dns/dnsmessage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func resolverFor(s *Server) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, s.Addr())
	}}
}

func TestServerAnswersTheGoResolver(t *testing.T) {
	s, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::2")}
	s.Set("kv.test", want...)
	got, err := resolverFor(s).LookupNetIP(context.Background(), "ip", "kv.test")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if s.Queries("kv.test") < 2 {
		t.Fatalf("want an A and an AAAA question, counted %d", s.Queries("kv.test"))
	}

	s.Delete("kv.test")
	_, err = resolverFor(s).LookupNetIP(context.Background(), "ip", "kv.test")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("deleted name: got %v, want not found", err)
	}
}

func TestAnswerCapsRecords(t *testing.T) {
	many := make([]netip.Addr, 3*MaxRecords)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	}
	resp, err := Answer(query(t, "big.test.", dnsmessage.TypeA), func(string) ([]netip.Addr, bool) { return many, true })
	if err != nil {
		t.Fatal(err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatal(err)
	}
	if len(m.Answers) != MaxRecords {
		t.Fatalf("%d answers, want the cap %d", len(m.Answers), MaxRecords)
	}
}

func query(t testing.TB, name string, typ dnsmessage.Type) []byte {
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzAnswer feeds Answer arbitrary datagrams, as the server's socket would
// receive them: no panic, and any response is a well-formed message no
// larger than the cap allows.
func FuzzAnswer(f *testing.F) {
	f.Add(query(f, "kv.test.", dnsmessage.TypeA))
	f.Add(query(f, "kv.test.", dnsmessage.TypeAAAA))
	f.Add(query(f, "other.test.", dnsmessage.TypeTXT))
	f.Add([]byte{})
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}
	f.Fuzz(func(t *testing.T, msg []byte) {
		resp, err := Answer(msg, func(name string) ([]netip.Addr, bool) { return addrs, name == "kv.test." })
		if err != nil {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatalf("response does not parse: %v", err)
		}
		if len(resp) > 1232 {
			t.Fatalf("response of %d bytes", len(resp))
		}
	})
}

// A resolver that asks over TCP gets the same answers.
func TestServerAnswersOverTCP(t *testing.T) {
	s, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Set("kv.test", netip.MustParseAddr("10.0.0.1"))
	tcp := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", s.Addr())
	}}
	got, err := tcp.LookupNetIP(context.Background(), "ip4", "kv.test")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("got %v", got)
	}
}

// Close ends TCP connections still open; goleak (TestMain) checks their
// goroutines are gone.
func TestCloseEndsStreams(t *testing.T) {
	s, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0}); err != nil { // half a length
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection is still open")
	}
}
