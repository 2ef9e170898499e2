package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/resolver/dns/dnstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock hands each wait of the resolver to the test, which fires it when
// it chooses; time moves only then.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits chan wait
}

type wait struct {
	d    time.Duration
	fire chan time.Time
	clk  *fakeClock
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1e9, 0), waits: make(chan wait, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	w := wait{d: d, fire: make(chan time.Time, 1), clk: c}
	c.waits <- w
	return w.fire
}

// Fire moves the clock to the end of the wait and ends it.
func (w wait) Fire() {
	w.clk.mu.Lock()
	w.clk.now = w.clk.now.Add(w.d)
	now := w.clk.now
	w.clk.mu.Unlock()
	w.fire <- now
}

// chanCC is a ClientConn whose reports the test receives in order.
type chanCC struct {
	states chan resolver.State
	errs   chan error
	reject error // what UpdateState answers
}

func newChanCC() *chanCC {
	return &chanCC{states: make(chan resolver.State, 16), errs: make(chan error, 16)}
}

func (c *chanCC) UpdateState(s resolver.State) error { c.states <- s; return c.reject }
func (c *chanCC) ReportError(err error)              { c.errs <- err }

type fixture struct {
	interval time.Duration
	srv      *dnstest.Server
	clk      *fakeClock
	cc       *chanCC
	r        resolver.Resolver
}

// start builds a resolver for target (with %s for the DNS server's address)
// against a fresh server holding records, with a fake clock.
func start(t *testing.T, target string, o Options, setup func(*dnstest.Server)) *fixture {
	return startWith(t, target, o, setup, newChanCC())
}

func startWith(t *testing.T, target string, o Options, setup func(*dnstest.Server), cc *chanCC) *fixture {
	t.Helper()
	srv, err := dnstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	setup(srv)
	f := &fixture{srv: srv, clk: newFakeClock(), cc: cc}
	b := &builder{o: o.withDefaults(), clock: f.clk}
	f.interval = b.o.ResolveInterval
	tg, _, err := resolver.ParseTarget(strings.ReplaceAll(target, "%s", srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	f.r, err = b.Build(tg, f.cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.r.Close)
	return f
}

var (
	ip1 = netip.MustParseAddr("10.0.0.1")
	ip2 = netip.MustParseAddr("10.0.0.2")
	ip3 = netip.MustParseAddr("fd00::3")
	ip4 = netip.MustParseAddr("10.0.0.4")
)

func addrs(s resolver.State) map[string]bool {
	m := make(map[string]bool)
	for _, a := range s.Addresses {
		m[a.Addr] = true
	}
	return m
}

func wantAddrs(t *testing.T, s resolver.State, want ...string) {
	t.Helper()
	got := addrs(s)
	if len(got) != len(want) || len(s.Addresses) != len(want) {
		t.Fatalf("state %v, want %v", s, want)
	}
	for _, w := range want {
		if !got[w] {
			t.Fatalf("state %v, want %v", s, want)
		}
	}
}

func TestResolvesAAndAAAA(t *testing.T) {
	f := start(t, "auto+dns://%s/kv.test:7070", Options{}, func(s *dnstest.Server) { s.Set("kv.test", ip1, ip2, ip3) })
	st := <-f.cc.states
	wantAddrs(t, st, "10.0.0.1:7070", "10.0.0.2:7070", "[fd00::3]:7070")
	for _, a := range st.Addresses {
		if a.ServerName != "" || a.Transport != "auto" {
			t.Fatalf("address %+v: want no server name (the client's authority is the target's) and transport auto", a)
		}
	}
}

func TestDefaultPort(t *testing.T) {
	f := start(t, "dns://%s/kv.test", Options{}, func(s *dnstest.Server) { s.Set("kv.test", ip1) })
	wantAddrs(t, <-f.cc.states, "10.0.0.1:443")
}

// An answer without addresses is an error naming the host, not an empty
// list (issue 11 item 9); the resolver retries after a backoff and reports
// the addresses once there are some.
func TestNoAddressesIsAnError(t *testing.T) {
	f := start(t, "dns://%s/kv.test:7070", Options{}, func(s *dnstest.Server) { s.Set("kv.test") })
	err := <-f.cc.errs
	if !strings.Contains(err.Error(), `"kv.test"`) {
		t.Fatalf("error %q does not name the host", err)
	}
	w := <-f.clk.waits
	if w.d < 800*time.Millisecond || w.d > 1200*time.Millisecond {
		t.Fatalf("first retry after %v, want 1s ± 20%%", w.d)
	}
	if len(f.cc.states) != 0 {
		t.Fatalf("an empty answer was reported as a state: %v", <-f.cc.states)
	}
	f.srv.Set("kv.test", ip1)
	w.Fire()
	wantAddrs(t, <-f.cc.states, "10.0.0.1:7070")
}

func TestUnknownNameIsAnError(t *testing.T) {
	f := start(t, "dns://%s/nowhere.test:7070", Options{}, func(*dnstest.Server) {})
	err := <-f.cc.errs
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound || !strings.Contains(err.Error(), "nowhere.test") {
		t.Fatalf("error %v: want a not-found DNS error naming the host", err)
	}
	// Failures back off further each time.
	w := <-f.clk.waits
	w.Fire()
	<-f.cc.errs
	w = <-f.clk.waits
	if w.d < 1280*time.Millisecond || w.d > 1920*time.Millisecond {
		t.Fatalf("second retry after %v, want 1.6s ± 20%%", w.d)
	}
}

// Without being asked, the resolver looks again every ResolveInterval: a
// backend added to the name is seen within one interval.
func TestReResolvesOnInterval(t *testing.T) {
	o := Options{ResolveInterval: time.Minute, MinResolveInterval: 30 * time.Second}
	f := start(t, "dns://%s/kv.test:7070", o, func(s *dnstest.Server) { s.Set("kv.test", ip1, ip2) })
	wantAddrs(t, <-f.cc.states, "10.0.0.1:7070", "10.0.0.2:7070")
	w := <-f.clk.waits
	if w.d != time.Minute {
		t.Fatalf("waits %v for the next lookup, want the interval", w.d)
	}
	f.srv.Set("kv.test", ip1, ip2, ip4)
	w.Fire()
	wantAddrs(t, <-f.cc.states, "10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.4:7070")
}

// ResolveNow looks again, but not sooner than MinResolveInterval after the
// last lookup, however often it is called.
func TestResolveNowIsRateLimited(t *testing.T) {
	o := Options{ResolveInterval: time.Hour, MinResolveInterval: 30 * time.Second}
	f := start(t, "dns://%s/kv.test:7070", o, func(s *dnstest.Server) { s.Set("kv.test", ip1) })
	<-f.cc.states
	<-f.clk.waits // the interval
	queries := f.srv.Queries("kv.test")
	f.srv.Set("kv.test", ip2)
	for range 10 {
		f.r.ResolveNow(resolver.ResolveNowOptions{})
	}
	w := <-f.clk.waits
	if w.d != 30*time.Second {
		t.Fatalf("ResolveNow right after a lookup waits %v, want the min interval", w.d)
	}
	if got := f.srv.Queries("kv.test"); got != queries {
		t.Fatalf("%d questions before the min interval passed, want none", got-queries)
	}
	w.Fire()
	wantAddrs(t, <-f.cc.states, "10.0.0.2:7070")
	// The ten calls were served by that one lookup: nothing is pending.
	wantNothingPending(t, f)
}

// wantNothingPending checks that the resolver, having just reported, waits
// for its interval with no ResolveNow pending. The fake clock records the
// interval's wait even when a pending ResolveNow wins the select, so the
// test ends that wait: with nothing pending, it causes a lookup and the next
// wait is the interval again; with a request pending, the resolver was
// already on its way to a rate-limited lookup, whose wait is shorter.
func wantNothingPending(t *testing.T, f *fixture) {
	t.Helper()
	w := <-f.clk.waits
	if w.d != f.interval {
		t.Fatalf("after the lookup: waits %v, want the interval", w.d)
	}
	w.Fire()
	if w = <-f.clk.waits; w.d != f.interval {
		t.Fatalf("after the interval: waits %v, want the interval again (a ResolveNow was still pending)", w.d)
	}
	<-f.cc.states
}

// A ResolveNow made while a lookup is due anyway (during a backoff) is served
// by that lookup, and does not cause another.
func TestResolveNowServedByTheNextLookup(t *testing.T) {
	o := Options{ResolveInterval: time.Hour, MinResolveInterval: 30 * time.Second}
	f := start(t, "dns://%s/kv.test:7070", o, func(s *dnstest.Server) { s.Set("kv.test") })
	<-f.cc.errs
	w := <-f.clk.waits // the backoff
	f.r.ResolveNow(resolver.ResolveNowOptions{})
	f.srv.Set("kv.test", ip1)
	w.Fire()
	wantAddrs(t, <-f.cc.states, "10.0.0.1:7070")
	wantNothingPending(t, f)
}

// A state the client rejects is retried with backoff, like a failure.
func TestRejectedStateIsRetried(t *testing.T) {
	cc := newChanCC()
	cc.reject = errors.New("no usable address")
	f := startWith(t, "dns://%s/kv.test:7070", Options{}, func(s *dnstest.Server) { s.Set("kv.test", ip1) }, cc)
	<-f.cc.states
	w := <-f.clk.waits
	if w.d > 1200*time.Millisecond {
		t.Fatalf("after a rejected state waits %v, want the first backoff", w.d)
	}
}

// Close while the resolver waits for anything returns, and its goroutine is
// gone (goleak checks at the end).
func TestCloseWhileWaiting(t *testing.T) {
	f := start(t, "dns://%s/kv.test:7070", Options{}, func(s *dnstest.Server) { s.Set("kv.test") })
	<-f.cc.errs
	<-f.clk.waits // in backoff
	f.r.Close()
	f.r.Close() // twice is fine
}

func TestIPTargetNeedsNoLookup(t *testing.T) {
	cc := newChanCC()
	tg, _, err := resolver.ParseTarget("dns:///[::ffff:10.0.0.1]:7070")
	if err != nil {
		t.Fatal(err)
	}
	r, err := (&builder{o: Options{}.withDefaults(), clock: newFakeClock()}).Build(tg, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wantAddrs(t, <-cc.states, "10.0.0.1:7070")
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int
		base     time.Duration
	}{{1, time.Second}, {2, 1600 * time.Millisecond}, {3, 2560 * time.Millisecond}, {20, 120 * time.Second}, {1000, 120 * time.Second}} {
		for range 100 {
			d := backoff(tc.failures)
			if d < tc.base*8/10 || d > tc.base*12/10 {
				t.Fatalf("backoff(%d) = %v, want %v ± 20%%", tc.failures, d, tc.base)
			}
		}
	}
}

// One answer yields at most MaxAddresses addresses, however many records it
// has.
func TestMaxAddresses(t *testing.T) {
	many := make([]netip.Addr, 20)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)})
	}
	f := start(t, "dns://%s/kv.test:7070", Options{MaxAddresses: 5}, func(s *dnstest.Server) { s.Set("kv.test", many...) })
	if st := <-f.cc.states; len(st.Addresses) != 5 {
		t.Fatalf("%d addresses, want the cap of 5", len(st.Addresses))
	}
}

// FuzzParseEndpoint: any endpoint parses or fails without a panic; what
// parses is an IP or a host name, with a port.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"kv.test:7070", "kv.test", "[::1]:1", "::1", "[::1]", ":80", "a:b:c", "kv..test:1", "[fe80::1%eth0]:7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ep string) {
		host, port, err := parseEndpoint(ep)
		if err != nil {
			return
		}
		if _, ipErr := netip.ParseAddr(host); ipErr != nil && !isDomainName(host) {
			t.Fatalf("%q: host %q", ep, host)
		}
		if port == 0 {
			t.Fatalf("%q: port 0", ep)
		}
	})
}

// BenchmarkFirstState is a resolver's start-up cost: Build, the A and AAAA
// lookups against a loopback server, the first state, Close.
func BenchmarkFirstState(b *testing.B) {
	srv, err := dnstest.NewServer()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	srv.Set("kv.test", ip1, ip2, ip3)
	tg, _, err := resolver.ParseTarget("dns://" + srv.Addr() + "/kv.test:7070")
	if err != nil {
		b.Fatal(err)
	}
	bld := NewBuilder(Options{})
	b.ReportAllocs()
	for b.Loop() {
		cc := newChanCC()
		r, err := bld.Build(tg, cc, resolver.BuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if st := <-cc.states; len(st.Addresses) != 3 {
			b.Fatalf("state %v", st)
		}
		r.Close()
	}
}

// Without an authority, Options.Dial reaches the DNS servers: a program (or
// a test) can send the system resolver's questions where it wants.
func TestDialReachesTheServer(t *testing.T) {
	var srv *dnstest.Server
	var mu sync.Mutex
	dialed := 0
	o := Options{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		mu.Lock()
		dialed++
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, srv.Addr())
	}}
	f := start(t, "dns:///kv.test:7070", o, func(s *dnstest.Server) { srv = s; s.Set("kv.test", ip1) })
	wantAddrs(t, <-f.cc.states, "10.0.0.1:7070")
	mu.Lock()
	defer mu.Unlock()
	if dialed == 0 {
		t.Fatal("Options.Dial was not used")
	}
}

// A failed lookup names the DNS server the target's authority points at,
// not the system's, which the Go resolver believes it asked (issue 20):
// both for an answer (no such name) and for a server that does not answer.
func TestErrorNamesTheAuthority(t *testing.T) {
	f := start(t, "dns://%s/nowhere.test:7070", Options{}, func(*dnstest.Server) {})
	err := <-f.cc.errs
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound || de.Server != f.srv.Addr() || !strings.Contains(err.Error(), "on "+f.srv.Addr()) {
		t.Fatalf("error %q: want a not-found DNS error naming the server %s", err, f.srv.Addr())
	}

	// A port nothing listens on: the lookup fails (refused, or timed out
	// if refusals are dropped) and says where it asked.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := pc.LocalAddr().String()
	pc.Close()
	tg, _, err := resolver.ParseTarget("dns://" + closed + "/kv.test:7070")
	if err != nil {
		t.Fatal(err)
	}
	cc := newChanCC()
	r, err := (&builder{o: Options{LookupTimeout: time.Second}.withDefaults(), clock: newFakeClock()}).Build(tg, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := <-cc.errs; !strings.Contains(err.Error(), closed) {
		t.Fatalf("error %q: want the server %s named", err, closed)
	}
}
