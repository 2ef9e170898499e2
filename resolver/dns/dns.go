package dns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmarpc/rdmarpc/resolver"
)

// Scheme is the scheme this package registers.
const Scheme = "dns"

// DefaultPort is the port of a target written without one.
const DefaultPort = 443

// Defaults of Options.
const (
	DefaultResolveInterval    = 30 * time.Second
	DefaultMinResolveInterval = 30 * time.Second // gRPC's rate limit
	DefaultLookupTimeout      = 30 * time.Second
	DefaultMaxAddresses       = 512
)

// Options configure the resolvers a builder makes. The zero value is the
// registered builder's: the defaults above, the system's DNS servers.
type Options struct {
	// ResolveInterval is how often the name is looked up again without
	// being asked; a scale-up is seen within it.
	ResolveInterval time.Duration
	// MinResolveInterval is the least time between two lookups, however
	// often ResolveNow asks.
	MinResolveInterval time.Duration
	// LookupTimeout bounds one lookup.
	LookupTimeout time.Duration
	// MaxAddresses caps the addresses reported from one answer (the first
	// ones, in the answer's order), so a DNS server cannot make a client
	// open a connection to each of thousands of records. Default 512.
	MaxAddresses int
	// Dial reaches a DNS server: the target's authority, or one of the
	// system's. Nil is a net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

func (o Options) withDefaults() Options {
	if o.ResolveInterval <= 0 {
		o.ResolveInterval = DefaultResolveInterval
	}
	if o.MinResolveInterval <= 0 {
		o.MinResolveInterval = DefaultMinResolveInterval
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = DefaultLookupTimeout
	}
	if o.MaxAddresses <= 0 {
		o.MaxAddresses = DefaultMaxAddresses
	}
	return o
}

func init() { resolver.Register(NewBuilder(Options{})) }

// NewBuilder returns a builder for the "dns" scheme with options o; register
// it with resolver.Register to replace the default one.
func NewBuilder(o Options) resolver.Builder { return &builder{o: o.withDefaults(), clock: realClock{}} }

type builder struct {
	o     Options
	clock clock
}

func (b *builder) Scheme() string { return Scheme }

func (b *builder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	host, port, err := parseEndpoint(t.Endpoint())
	if err != nil {
		return nil, fmt.Errorf("dns: target %q: %w", t.String(), err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		_ = cc.UpdateState(resolver.State{Addresses: []resolver.Address{{
			Addr: netip.AddrPortFrom(ip.Unmap(), port).String(), Transport: t.Transport,
		}}})
		return nop{}, nil
	}
	res := net.DefaultResolver
	server := "" // the target's authority, which every lookup asks
	if t.URL.Host != "" || b.o.Dial != nil {
		if t.URL.Host != "" {
			server, err = parseAuthority(t.URL.Host)
			if err != nil {
				return nil, fmt.Errorf("dns: target %q: %w", t.String(), err)
			}
		}
		dial := b.o.Dial
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		// The Go resolver, since the cgo one cannot be pointed at a server.
		res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if server != "" {
				address = server
			}
			return dial(ctx, network, address)
		}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &dnsResolver{
		o: b.o, clock: b.clock, res: res, server: server, host: host, port: port, transport: t.Transport,
		cc: cc, ctx: ctx, cancel: cancel, now: make(chan struct{}, 1),
	}
	r.wg.Add(1)
	go r.watch()
	return r, nil
}

// parseEndpoint splits "host[:port]"; the port defaults to DefaultPort.
func parseEndpoint(ep string) (string, uint16, error) {
	if ep == "" {
		return "", 0, errors.New("no host: want dns:///host[:port]")
	}
	host, ps, err := net.SplitHostPort(ep)
	if err != nil {
		// No port: "kv.prod", "::1" or "[::1]".
		host, ps = ep, strconv.Itoa(DefaultPort)
		if strings.HasPrefix(ep, "[") && strings.HasSuffix(ep, "]") {
			host = ep[1 : len(ep)-1]
		} else if strings.ContainsAny(ep, "[]") || (strings.Count(ep, ":") == 1) {
			return "", 0, fmt.Errorf("bad host:port %q: %w", ep, err)
		}
	}
	if host == "" {
		host = "localhost" // as net.Dial takes ":80"
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("bad port %q in %q", ps, ep)
	}
	if _, err := netip.ParseAddr(host); err != nil && !isDomainName(host) {
		return "", 0, fmt.Errorf("%q is neither an IP address nor a host name", host)
	}
	return host, uint16(n), nil
}

// parseAuthority returns the DNS server "ip:port" of an authority "ip" or
// "ip:port"; like gRPC-go, only IP addresses are taken.
func parseAuthority(a string) (string, error) {
	if ip, err := netip.ParseAddr(strings.Trim(a, "[]")); err == nil {
		return netip.AddrPortFrom(ip, 53).String(), nil
	}
	ap, err := netip.ParseAddrPort(a)
	if err != nil || ap.Port() == 0 {
		return "", fmt.Errorf("authority %q is not a DNS server's ip[:port]", a)
	}
	return ap.String(), nil
}

// isDomainName reports whether s is a syntactically valid host name: dot
// separated labels of letters, digits, '-' and '_', 1 to 63 bytes each,
// 253 in all, an optional final dot.
func isDomainName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

type dnsResolver struct {
	o         Options
	clock     clock
	res       *net.Resolver
	server    string // the authority's "ip:port", or "" for the system's servers
	host      string
	port      uint16
	transport string
	cc        resolver.ClientConn

	ctx    context.Context
	cancel context.CancelFunc
	now    chan struct{} // ResolveNow's requests, at most one pending
	wg     sync.WaitGroup
}

func (r *dnsResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default: // one is already pending
	}
}

func (r *dnsResolver) Close() {
	r.cancel()
	r.wg.Wait()
}

// watch is the resolver's one goroutine: it looks the name up, reports, and
// waits for the next reason to, until Close.
func (r *dnsResolver) watch() {
	defer r.wg.Done()
	failures := 0
	for {
		// This lookup serves any ResolveNow made before it starts.
		select {
		case <-r.now:
		default:
		}
		started := r.clock.Now()
		err := r.resolve()
		if err != nil {
			failures++
			if !r.sleep(backoff(failures)) {
				return
			}
			continue
		}
		failures = 0
		select {
		case <-r.ctx.Done():
			return
		case <-r.now:
		case <-r.clock.After(r.o.ResolveInterval):
		}
		if wait := r.o.MinResolveInterval - r.clock.Now().Sub(started); wait > 0 && !r.sleep(wait) {
			return
		}
	}
}

// sleep waits d, or returns false if the resolver is closed first.
func (r *dnsResolver) sleep(d time.Duration) bool {
	select {
	case <-r.ctx.Done():
		return false
	case <-r.clock.After(d):
		return true
	}
}

// resolve looks the name up once and reports the result; an error means
// the next attempt should back off.
func (r *dnsResolver) resolve() error {
	ctx, cancel := context.WithTimeout(r.ctx, r.o.LookupTimeout)
	ips, err := r.res.LookupNetIP(ctx, "ip", r.host)
	cancel()
	if r.ctx.Err() != nil {
		return r.ctx.Err() // closed: report nothing
	}
	if err == nil && len(ips) == 0 {
		err = errors.New("the answer has no addresses")
	}
	if err != nil {
		err = fmt.Errorf("dns: no A or AAAA records for %q: %w", r.host, r.namingServer(err))
		r.cc.ReportError(err)
		return err
	}
	n := min(len(ips), r.o.MaxAddresses)
	st := resolver.State{Addresses: make([]resolver.Address, 0, n)}
	seen := make(map[netip.Addr]bool, n)
	for _, ip := range ips {
		ip = ip.Unmap()
		if seen[ip] {
			continue
		}
		if len(st.Addresses) == n {
			break
		}
		seen[ip] = true
		st.Addresses = append(st.Addresses, resolver.Address{
			// No ServerName: the client's authority is the target's
			// endpoint ("kv.test:7070"), as gRPC-go's, which TLS
			// credentials check the certificate's host against and
			// a custom verification sees whole.
			Addr:      netip.AddrPortFrom(ip, r.port).String(),
			Transport: r.transport,
		})
	}
	return r.cc.UpdateState(st)
}

// namingServer returns err naming the server the lookup asked. The Go
// resolver's error names the one of the system's configuration it meant
// to ask, but with an authority in the target every query went there.
func (r *dnsResolver) namingServer(err error) error {
	if r.server == "" {
		return err
	}
	if de, ok := err.(*net.DNSError); ok {
		named := *de
		named.Server = r.server
		return &named
	}
	return fmt.Errorf("asking %s: %w", r.server, err)
}

// backoff is gRPC's connection backoff applied to lookups: 1 s, growing
// 1.6 times per failure up to 120 s, with 20 % jitter.
func backoff(failures int) time.Duration {
	const (
		base       = time.Second
		max        = 120 * time.Second
		multiplier = 1.6
		jitter     = 0.2
	)
	d := float64(base)
	for i := 1; i < failures && d < float64(max); i++ {
		d *= multiplier
	}
	d = min(d, float64(max))
	d *= 1 + jitter*(2*rand.Float64()-1)
	return time.Duration(d)
}

type clock interface {
	Now() time.Time
	After(time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

type nop struct{}

func (nop) ResolveNow(resolver.ResolveNowOptions) {}
func (nop) Close()                                {}
