package rpc_test

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/resolver/dns"
	"github.com/rdmarpc/rdmarpc/resolver/dns/dnstest"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// tcpBackends starts one backend per loopback IP (127.0.0.1, .2, …), all
// on one port, as the servers behind one DNS name are.
func tcpBackends(t *testing.T, n int) ([]*backend, []*server, []netip.Addr, int) {
	tr := tcp.New(tcp.Options{})
	for try := 0; ; try++ {
		first, err := tr.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ap, err := netip.ParseAddrPort(first.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		port := int(ap.Port())
		lis := []transport.Listener{first}
		ips := []netip.Addr{ap.Addr()}
		for i := 2; i <= n; i++ {
			ip := netip.AddrFrom4([4]byte{127, 0, 0, byte(i)})
			l, err := tr.Listen(netip.AddrPortFrom(ip, uint16(port)).String())
			if err != nil {
				break // the port is taken on that IP: try another
			}
			lis, ips = append(lis, l), append(ips, ip)
		}
		if len(lis) < n {
			for _, l := range lis {
				l.Close()
			}
			if try == 10 {
				t.Fatalf("no port free on %d loopback addresses", n)
			}
			continue
		}
		bs := make([]*backend, n)
		ss := make([]*server, n)
		for i, l := range lis {
			bs[i] = &backend{name: ips[i].String()}
			ss[i] = serveOn(t, l, bs[i])
		}
		return bs, ss, ips, port
	}
}

// serveOn serves b on lis until the test ends.
func serveOn(t *testing.T, lis transport.Listener, b *backend) *server {
	s := &server{srv: rpc.NewServer(), addr: lis.Addr().String()}
	testpb.RegisterTestServer(s.srv, b)
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(lis) }()
	t.Cleanup(func() {
		s.srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// TestDNSRoundRobin: a dns:/// target over tcp, answered by a DNS server
// on loopback; calls follow the answer as backends join and leave, an
// answer with no addresses keeps the ones in use, and killing a backend
// mid-run fails no call when the retry policy covers Unavailable.
func TestDNSRoundRobin(t *testing.T) {
	bs, ss, ips, port := tcpBackends(t, 3)
	ns, err := dnstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ns.Set("kv.test", ips[:2]...)
	builder := dns.NewBuilder(dns.Options{ResolveInterval: 20 * time.Millisecond, MinResolveInterval: time.Millisecond})
	config := `{"loadBalancingConfig":[{"round_robin":{}}],
		"methodConfig":[{"name":[{"service":"rdmarpc.test.v1.Test"}],"retryPolicy":{"maxAttempts":5,
		"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	target := fmt.Sprintf("tcp+dns://%s/kv.test:%d", ns.Addr(), port)
	cc, err := rpc.NewClient(target, rpc.WithResolvers(builder), rpc.WithDefaultServiceConfig(config))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	ctx := testCtx(t)
	call := func() string {
		t.Helper()
		name, err := echo(ctx, c)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		return name
	}
	for bs[0].calls.Load() == 0 || bs[1].calls.Load() == 0 {
		call()
	}
	if n := bs[2].calls.Load(); n != 0 {
		t.Fatalf("a backend not in the answer got %d calls", n)
	}

	// Scale up: the third is seen at the next resolution.
	ns.Set("kv.test", ips...)
	for bs[2].calls.Load() == 0 {
		call()
	}

	// Scale down to the first.
	ns.Set("kv.test", ips[0])
	callUntil(t, c, 20, func(n string) bool { return n == bs[0].name })
	for range 20 {
		if n := call(); n != bs[0].name {
			t.Fatalf("a call went to %s, which left the answer", n)
		}
	}

	// An answer with no addresses changes nothing.
	q := ns.Queries("kv.test")
	ns.Delete("kv.test")
	for ns.Queries("kv.test") < q+2 {
		call()
	}
	call()

	// Back to three; then the second dies while calls run.
	ns.Set("kv.test", ips...)
	before := bs[1].calls.Load()
	for bs[1].calls.Load() == before || bs[2].calls.Load() == 0 {
		call()
	}
	const callers = 4
	stop := make(chan struct{})
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if _, err := echo(ctx, c); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Kill it once the callers are under way, then let them go on until
	// the others served 200 more (or a caller failed).
	failed := func() bool { return len(errs) > 0 }
	n := bs[1].calls.Load()
	waitUntil(t, "calls to the second backend", func() bool { return failed() || bs[1].calls.Load() >= n+50 })
	ss[1].srv.Stop()
	n = bs[0].calls.Load() + bs[2].calls.Load()
	waitUntil(t, "calls to the others", func() bool { return failed() || bs[0].calls.Load()+bs[2].calls.Load() >= n+200 })
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call failed when a backend died: %v", err)
		}
	}
}
