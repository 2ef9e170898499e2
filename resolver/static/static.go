package static

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/rdmarpc/rdmarpc/resolver"
)

// DefaultPort is the port of an address written without one.
const DefaultPort = 443

func init() {
	resolver.Register(builder{v6: false})
	resolver.Register(builder{v6: true})
}

type builder struct{ v6 bool }

func (b builder) Scheme() string {
	if b.v6 {
		return "ipv6"
	}
	return "ipv4"
}

// Build parses the whole list, so one bad address fails the target, and
// reports it before it returns.
func (b builder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	addrs, err := Parse(t.Endpoint(), b.v6)
	if err != nil {
		return nil, fmt.Errorf("%s: target %q: %w", b.Scheme(), t.String(), err)
	}
	st := resolver.State{Addresses: make([]resolver.Address, len(addrs))}
	for i, a := range addrs {
		st.Addresses[i] = resolver.Address{Addr: a.String(), Transport: t.Transport}
	}
	// The client's answer changes nothing here: the list is all there is.
	_ = cc.UpdateState(st)
	return nop{}, nil
}

// Parse parses a comma-separated list of IPv4 (v6 false) or IPv6 addresses
// with optional ports.
func Parse(list string, v6 bool) ([]netip.AddrPort, error) {
	if list == "" {
		return nil, fmt.Errorf("no addresses")
	}
	parts := strings.Split(list, ",")
	out := make([]netip.AddrPort, 0, len(parts))
	for _, p := range parts {
		ap, err := parseOne(p, v6)
		if err != nil {
			return nil, err
		}
		out = append(out, ap)
	}
	return out, nil
}

func parseOne(s string, v6 bool) (netip.AddrPort, error) {
	family := "IPv4"
	if v6 {
		family = "IPv6"
	}
	var (
		a    netip.Addr
		port = uint16(DefaultPort)
		err  error
	)
	switch {
	case s == "":
		return netip.AddrPort{}, fmt.Errorf("empty address in the list")
	case v6 && strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"): // [::1]
		a, err = netip.ParseAddr(s[1 : len(s)-1])
	case v6 && !strings.HasPrefix(s, "["), !v6 && !strings.Contains(s, ":"): // ::1, 10.0.0.1
		a, err = netip.ParseAddr(s)
	default: // [::1]:7070, 10.0.0.1:7070
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a, port = ap.Addr(), ap.Port()
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not an %s address[:port]: %w", s, family, err)
	}
	if a.Is4() == v6 {
		return netip.AddrPort{}, fmt.Errorf("%q is not an %s address", s, family)
	}
	if port == 0 {
		return netip.AddrPort{}, fmt.Errorf("port 0 in %q", s)
	}
	return netip.AddrPortFrom(a, port), nil
}

type nop struct{}

func (nop) ResolveNow(resolver.ResolveNowOptions) {}
func (nop) Close()                                {}
