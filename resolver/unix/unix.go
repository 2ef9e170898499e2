package unix

import (
	"fmt"

	"github.com/rdmarpc/rdmarpc/resolver"
)

// Scheme is the resolver scheme this package registers, and the transport
// scheme its addresses ask for.
const Scheme = "unix"

// AbstractScheme is gRPC's scheme for a socket in Linux's abstract
// namespace: "unix-abstract:name" dials the unix socket "@name" (Go's
// spelling of the abstract name "\x00name").
const AbstractScheme = "unix-abstract"

func init() {
	resolver.Register(builder{})
	resolver.Register(builder{abstract: true})
}

type builder struct{ abstract bool }

func (b builder) Scheme() string {
	if b.abstract {
		return AbstractScheme
	}
	return Scheme
}

// Build reports the socket path before it returns.
func (b builder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	if t.URL.Host != "" {
		return nil, fmt.Errorf("unix: target %q has an authority (%q): want unix:path or unix:///absolute/path", t.String(), t.URL.Host)
	}
	if t.Transport != "" && t.Transport != "tcp" && t.Transport != Scheme {
		return nil, fmt.Errorf("unix: target %q asks for transport %q: unix sockets are served by the tcp transport only", t.String(), t.Transport)
	}
	// url.Parse gives "unix:/abs" and "unix:///abs" the path "/abs", and
	// "unix:rel" the opaque "rel"; Endpoint would drop the leading slash.
	path := t.URL.Path
	if path == "" {
		path = t.URL.Opaque
	}
	if path == "" {
		return nil, fmt.Errorf("unix: target %q has no socket path", t.String())
	}
	if b.abstract {
		path = "@" + path
	}
	_ = cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: path, Transport: Scheme}}})
	return nop{}, nil
}

type nop struct{}

func (nop) ResolveNow(resolver.ResolveNowOptions) {}
func (nop) Close()                                {}
