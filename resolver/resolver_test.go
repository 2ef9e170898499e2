package resolver_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rdmarpc/rdmarpc/resolver"
	_ "github.com/rdmarpc/rdmarpc/resolver/dns"
	_ "github.com/rdmarpc/rdmarpc/resolver/passthrough"
	_ "github.com/rdmarpc/rdmarpc/resolver/static"
	_ "github.com/rdmarpc/rdmarpc/resolver/unix"
	"github.com/rdmarpc/rdmarpc/transport"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// fakeRDMA stands in for transport/rdma, which needs libibverbs: only its
// registered name matters to the resolver.
type fakeRDMA struct{ transport.Transport }

func init() { transport.Register("rdma", fakeRDMA{}) }

// recorder is a ClientConn that keeps what it is told.
type recorder struct {
	mu     sync.Mutex
	states []resolver.State
	errs   []error
}

func (r *recorder) UpdateState(s resolver.State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
	return nil
}

func (r *recorder) ReportError(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		target                             string
		scheme, authority, endpoint, trans string
	}{
		{"dns:///kv.test:7070", "dns", "", "kv.test:7070", ""},
		{"dns://8.8.8.8/kv.test:7070", "dns", "8.8.8.8", "kv.test:7070", ""},
		{"dns:kv.test:7070", "dns", "", "kv.test:7070", ""},
		{"DNS:///kv.test:7070", "dns", "", "kv.test:7070", ""},
		{"passthrough:///10.0.0.1:7070", "passthrough", "", "10.0.0.1:7070", ""},
		{"ipv4:10.0.0.1:1,10.0.0.2:2", "ipv4", "", "10.0.0.1:1,10.0.0.2:2", ""},
		{"ipv4:///10.0.0.1:1", "ipv4", "", "10.0.0.1:1", ""},
		{"ipv6:[::1]:1", "ipv6", "", "[::1]:1", ""},
		{"unix:relative/kv.sock", "unix", "", "relative/kv.sock", ""},
		{"unix:///run/kv.sock", "unix", "", "run/kv.sock", ""},
		// A transport prefix.
		{"rdma+dns:///kv.test:7070", "dns", "", "kv.test:7070", "rdma"},
		{"tcp+dns://127.0.0.1:5353/kv.test:7070", "dns", "127.0.0.1:5353", "kv.test:7070", "tcp"},
		{"auto+ipv4:10.0.0.1:7070", "ipv4", "", "10.0.0.1:7070", "auto"},
		// Targets from before resolvers: one address, that transport.
		{"tcp://127.0.0.1:7070", "passthrough", "", "127.0.0.1:7070", "tcp"},
		{"tcp://[::1]:7070", "passthrough", "", "[::1]:7070", "tcp"},
		{"auto://127.0.0.1:7070", "passthrough", "", "127.0.0.1:7070", "auto"},
		// No scheme: the default, dns.
		{"kv.test:7070", "dns", "", "kv.test:7070", ""},
		{"localhost:7070", "dns", "", "localhost:7070", ""},
		{"127.0.0.1:7070", "dns", "", "127.0.0.1:7070", ""},
		{"[::1]:7070", "dns", "", "[::1]:7070", ""},
		{"kv.test", "dns", "", "kv.test", ""},
	} {
		got, b, err := resolver.ParseTarget(tc.target)
		if err != nil {
			t.Errorf("ParseTarget(%q): %v", tc.target, err)
			continue
		}
		if got.URL.Scheme != tc.scheme || got.URL.Host != tc.authority || got.Endpoint() != tc.endpoint || got.Transport != tc.trans {
			t.Errorf("ParseTarget(%q) = scheme %q authority %q endpoint %q transport %q, want %q %q %q %q",
				tc.target, got.URL.Scheme, got.URL.Host, got.Endpoint(), got.Transport, tc.scheme, tc.authority, tc.endpoint, tc.trans)
		}
		if b == nil || b.Scheme() != tc.scheme {
			t.Errorf("ParseTarget(%q): builder %v, want the %q one", tc.target, b, tc.scheme)
		}
	}
}

func TestTargetStringKeepsTheTransport(t *testing.T) {
	tg, _, err := resolver.ParseTarget("rdma+dns://8.8.8.8/kv.test:7070")
	if err != nil {
		t.Fatal(err)
	}
	if got := tg.String(); got != "rdma+dns://8.8.8.8/kv.test:7070" {
		t.Fatalf("String() = %q", got)
	}
}

// An unknown scheme is an error that names it, the registered resolvers and
// transports, and suggests only packages that exist (issue 11 item 9).
func TestParseTargetUnknownScheme(t *testing.T) {
	for _, tc := range []struct {
		target, scheme, hint string
	}{
		{"foo://kv.test:7070", `"foo"`, ""},
		{"rdma+etcd:///kv", `"etcd"`, ""},
		{"quic+dns:///kv.test:7070", `"quic"`, ""},
		{"xds:///kv.test", `"xds"`, ""},
	} {
		_, _, err := resolver.ParseTarget(tc.target)
		if !errors.Is(err, resolver.ErrUnknownScheme) {
			t.Errorf("ParseTarget(%q) = %v, want ErrUnknownScheme", tc.target, err)
			continue
		}
		msg := err.Error()
		for _, want := range []string{tc.scheme, tc.target, "dns, ipv4, ipv6, passthrough, unix", "transports: tcp, rdma"} {
			if !strings.Contains(msg, want) {
				t.Errorf("ParseTarget(%q): error %q does not say %q", tc.target, msg, want)
			}
		}
		if tc.hint != "" && !strings.Contains(msg, tc.hint) {
			t.Errorf("ParseTarget(%q): error %q does not suggest %s", tc.target, msg, tc.hint)
		}
		if tc.hint == "" && strings.Contains(msg, "import") {
			t.Errorf("ParseTarget(%q): error %q suggests an import for a scheme rdmarpc does not have", tc.target, msg)
		}
	}
}

// The packages the unknown-scheme hint names exist in this module.
func TestHintedPackagesExist(t *testing.T) {
	resolver.SetDefaultScheme("nodns")
	defer resolver.SetDefaultScheme("dns")
	_, _, err := resolver.ParseTarget("kv.test:7070")
	if err == nil || !strings.Contains(err.Error(), `default scheme "nodns" is not registered`) {
		t.Errorf("with an unregistered default scheme: %v", err)
	}
	for _, target := range []string{"quic://h:1", "x+dns2:///h", "kv.test:7070"} {
		_, _, err := resolver.ParseTarget(target)
		if err == nil {
			t.Fatalf("ParseTarget(%q) succeeded", target)
		}
		msg := err.Error()
		if i := strings.Index(msg, "github.com/rdmarpc/rdmarpc/"); i >= 0 {
			pkg := strings.Fields(msg[i+len("github.com/rdmarpc/rdmarpc/"):])[0]
			if _, err := os.Stat(filepath.Join("..", pkg, "doc.go")); err != nil {
				t.Errorf("the hint of %q names %s, which does not exist: %v", target, pkg, err)
			}
		}
	}
}

func TestParseTargetBad(t *testing.T) {
	for _, target := range []string{
		"",
		"tcp://",                 // no address
		"tcp://10.0.0.1:1/extra", // a path after the address
		"tcp://10.0.0.1:1?x=1",   // a query
		"tcp://user@10.0.0.1:1",  // user info
	} {
		if _, _, err := resolver.ParseTarget(target); err == nil {
			t.Errorf("ParseTarget(%q) succeeded", target)
		}
	}
}

func TestRegisterRefusesAPlus(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Register of a scheme with '+' did not panic")
		}
	}()
	resolver.Register(fakeBuilder("rdma+x"))
}

type fakeBuilder string

func (f fakeBuilder) Scheme() string { return string(f) }
func (f fakeBuilder) Build(resolver.Target, resolver.ClientConn, resolver.BuildOptions) (resolver.Resolver, error) {
	return nil, errors.New("fake")
}

// build parses target and builds its resolver against a recorder.
func build(t *testing.T, target string) (*recorder, error) {
	t.Helper()
	tg, b, err := resolver.ParseTarget(target)
	if err != nil {
		t.Fatalf("ParseTarget(%q): %v", target, err)
	}
	rec := &recorder{}
	r, err := b.Build(tg, rec, resolver.BuildOptions{})
	if err != nil {
		return rec, err
	}
	r.ResolveNow(resolver.ResolveNowOptions{})
	r.Close()
	return rec, nil
}

func TestStaticBuilders(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   []resolver.Address
	}{
		{"passthrough:///kv.test:7070", []resolver.Address{{Addr: "kv.test:7070"}}},
		{"rdma+passthrough:///10.0.0.1:7070", []resolver.Address{{Addr: "10.0.0.1:7070", Transport: "rdma"}}},
		{"tcp://127.0.0.1:7070", []resolver.Address{{Addr: "127.0.0.1:7070", Transport: "tcp"}}},
		{"ipv4:10.0.0.1:1,10.0.0.2:2", []resolver.Address{{Addr: "10.0.0.1:1"}, {Addr: "10.0.0.2:2"}}},
		{"ipv4:///10.0.0.1", []resolver.Address{{Addr: "10.0.0.1:443"}}},
		{"rdma+ipv4:10.0.0.1:7070", []resolver.Address{{Addr: "10.0.0.1:7070", Transport: "rdma"}}},
		{"ipv6:[::1]:1,[fd00::2]:2", []resolver.Address{{Addr: "[::1]:1"}, {Addr: "[fd00::2]:2"}}},
		{"ipv6:::1", []resolver.Address{{Addr: "[::1]:443"}}},
		{"ipv6:[fd00::1]", []resolver.Address{{Addr: "[fd00::1]:443"}}},
		{"unix:relative/kv.sock", []resolver.Address{{Addr: "relative/kv.sock", Transport: "unix"}}},
		{"unix:/run/kv.sock", []resolver.Address{{Addr: "/run/kv.sock", Transport: "unix"}}},
		{"unix:///run/kv.sock", []resolver.Address{{Addr: "/run/kv.sock", Transport: "unix"}}},
		{"tcp+unix:///run/kv.sock", []resolver.Address{{Addr: "/run/kv.sock", Transport: "unix"}}},
		{"unix-abstract:kv", []resolver.Address{{Addr: "@kv", Transport: "unix"}}},
		{"unix-abstract:///kv", []resolver.Address{{Addr: "@/kv", Transport: "unix"}}},
		{"dns:///127.0.0.1:7070", []resolver.Address{{Addr: "127.0.0.1:7070"}}},
		{"rdma+dns:///[fd00::1]:7070", []resolver.Address{{Addr: "[fd00::1]:7070", Transport: "rdma"}}},
		{"10.0.0.1:7070", []resolver.Address{{Addr: "10.0.0.1:7070"}}},
	} {
		rec, err := build(t, tc.target)
		if err != nil {
			t.Errorf("%s: Build: %v", tc.target, err)
			continue
		}
		if len(rec.states) != 1 || len(rec.errs) != 0 {
			t.Errorf("%s: %d states and errors %v, want one state", tc.target, len(rec.states), rec.errs)
			continue
		}
		got := rec.states[0].Addresses
		if len(got) != len(tc.want) {
			t.Errorf("%s: addresses %v, want %v", tc.target, got, tc.want)
			continue
		}
		for i := range got {
			if !got[i].Equal(tc.want[i]) {
				t.Errorf("%s: address %d is %v, want %v", tc.target, i, got[i], tc.want[i])
			}
		}
	}
}

// Bad endpoints fail Build with an error naming what is wrong, and report
// nothing (issue 11 item 9: malformed hosts).
func TestBuildersRefuseBadEndpoints(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"passthrough:///", "no endpoint"},
		{"ipv4:", "no addresses"},
		{"ipv4:10.0.0.1:1,,10.0.0.2:2", "empty address"},
		{"ipv4:300.0.0.1:1", `"300.0.0.1:1" is not an IPv4`},
		{"ipv4:10.0.0.1:99999", "not an IPv4 address[:port]"},
		{"ipv4:10.0.0.1:0", "port 0"},
		{"ipv4:[::1]:1", "not an IPv4"},
		{"ipv6:10.0.0.1", "not an IPv6"},
		{"ipv6:[::1]:x", "not an IPv6"},
		{"unix://host/run/kv.sock", "authority"},
		{"unix:", "no socket path"},
		{"rdma+unix:///run/kv.sock", "tcp transport only"},
		{"dns:///", "no host"},
		{"dns:///kv.test:http", "bad port"},
		{"dns:///kv.test:0", "bad port"},
		{"dns:///kv..test:7070", "neither an IP address nor a host name"},
		{"dns:///bad!host:7070", "neither an IP address nor a host name"},
		{"dns:///[::1:7070", "bad host:port"},
		{"dns://ns.example/kv.test:7070", "is not a DNS server's ip[:port]"},
	} {
		rec, err := build(t, tc.target)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Build error %v, want one saying %q", tc.target, err, tc.want)
		}
		if len(rec.states)+len(rec.errs) != 0 {
			t.Errorf("%s: a failed Build reported %v %v", tc.target, rec.states, rec.errs)
		}
	}
}

// FuzzParseTarget: any string parses or fails without a panic, and a parsed
// target's builder is the one for its scheme.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"dns:///kv.test:7070", "rdma+dns://8.8.8.8/kv:1", "tcp://h:1", "ipv4:1.2.3.4:5,6.7.8.9", "unix:///a", "[::1]:7", "%zz://x", "a+b+c://d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, b, err := resolver.ParseTarget(s)
		if err != nil {
			return
		}
		if b.Scheme() != tg.URL.Scheme {
			t.Fatalf("%q: builder %q for scheme %q", s, b.Scheme(), tg.URL.Scheme)
		}
	})
}

func BenchmarkParseTarget(b *testing.B) {
	for _, target := range []string{"rdma+dns:///kv.test:7070", "tcp://10.0.0.1:7070", "10.0.0.1:7070"} {
		b.Run(target, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := resolver.ParseTarget(target); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStateComplete: a state with only Endpoints gets their addresses in
// order, one with only Addresses an endpoint each, and one with both is
// left as it is.
func TestStateComplete(t *testing.T) {
	a := func(s string) resolver.Address { return resolver.Address{Addr: s} }
	st := resolver.State{Endpoints: []resolver.Endpoint{{Addresses: []resolver.Address{a("6"), a("4")}}, {Addresses: []resolver.Address{a("x")}}}}.Complete()
	if got := st.String(); got != "[[6, 4], [x]]" || len(st.Addresses) != 3 || st.Addresses[0].Addr != "6" || st.Addresses[2].Addr != "x" {
		t.Fatalf("endpoints only: %v, addresses %v", got, st.Addresses)
	}
	st = resolver.State{Addresses: []resolver.Address{a("1"), a("2")}}.Complete()
	if len(st.Endpoints) != 2 || st.Endpoints[1].Addresses[0].Addr != "2" || len(st.Endpoints[1].Addresses) != 1 {
		t.Fatalf("addresses only: endpoints %v", st.Endpoints)
	}
	both := resolver.State{Addresses: []resolver.Address{a("1")}, Endpoints: []resolver.Endpoint{{Addresses: []resolver.Address{a("2")}}}}
	if st := both.Complete(); len(st.Addresses) != 1 || st.Addresses[0].Addr != "1" || st.Endpoints[0].Addresses[0].Addr != "2" {
		t.Fatalf("both: %v %v", st.Addresses, st.Endpoints)
	}
}
