package resolver

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/rdmarpc/rdmarpc/attributes"
)

// Names of transports a resolved address can ask for besides the schemes in
// the transport registry.
const (
	// TransportAuto dials over RDMA, and over TCP on the same address when
	// no RDMA device serves it (transport.ErrNoDevice) or an RDMA
	// connection fails, moving back to RDMA once it connects again, as
	// rpc.WithFallback and kvserver's auto:// do; a server that answers
	// rdmarpc's TCP hello in HTTP/2 (a gRPC server,
	// transport.ErrHTTP2Server) is dialed with the gRPC protocol.
	TransportAuto = "auto"
)

// Target is a parsed target string.
type Target struct {
	// URL is the target with the transport prefix removed from its scheme:
	// URL.Scheme names the resolver ("dns"), URL.Host is the authority
	// ("8.8.8.8" in "dns://8.8.8.8/kv:7070"), Endpoint() the rest.
	URL url.URL
	// Transport is the transport named by the target ("rdma" in
	// "rdma+dns:///kv:7070", "tcp" in "tcp://h:1"), or "" when the target
	// leaves the choice to the client's options.
	Transport string
}

// Endpoint is what the resolver resolves: the URL's path without its
// leading "/", or its opaque part ("unix:relative/path", "ipv4:a:1,b:2").
func (t Target) Endpoint() string {
	if t.URL.Path == "" && t.URL.RawPath == "" {
		return t.URL.Opaque
	}
	return strings.TrimPrefix(t.URL.Path, "/")
}

// String is the target in its canonical form, transport prefix included.
func (t Target) String() string {
	u := t.URL
	if t.Transport != "" {
		u.Scheme = t.Transport + "+" + u.Scheme
	}
	return u.String()
}

// Address is one server a client can connect to.
type Address struct {
	// Addr is what the transport dials: "10.0.0.1:7070", a unix socket path.
	Addr string
	// ServerName is the name the server's certificate is checked against;
	// "" means the target's host.
	ServerName string
	// Attributes carry what the resolver knows about the address for the
	// balancer; the transport does not read them.
	Attributes *attributes.Attributes
	// Transport is the transport scheme to dial Addr with: a scheme of the
	// transport registry ("tcp", "rdma", "unix"), TransportAuto, or "" for
	// the client's default. Builders copy Target.Transport here; a resolver
	// that knows better (a registry saying which hosts have RDMA) may set it
	// per address.
	Transport string
}

// Equal reports whether a and o describe the same address.
func (a Address) Equal(o Address) bool {
	return a.Addr == o.Addr && a.ServerName == o.ServerName && a.Transport == o.Transport &&
		a.Attributes.Equal(o.Attributes)
}

// String describes the address for logs.
func (a Address) String() string {
	s := a.Addr
	if a.Transport != "" {
		s = a.Transport + "://" + s
	}
	if a.ServerName != "" {
		s += " (server name " + a.ServerName + ")"
	}
	if a.Attributes.Len() > 0 {
		s += " " + a.Attributes.String()
	}
	return s
}

// Endpoint is one server that can be reached at several addresses (its
// IPv6 and its IPv4 address, say), as in gRPC-go: balancers that spread
// calls (round_robin) spread them over endpoints, and use the first of an
// endpoint's addresses that answers.
type Endpoint struct {
	// Addresses are the endpoint's, in the order to try them.
	Addresses []Address
	// Attributes carry what the resolver knows about the endpoint for the
	// balancer.
	Attributes *attributes.Attributes
}

// State is what a resolver knows about its target.
type State struct {
	// Addresses are the servers, in the resolver's order. A resolver never
	// reports an empty list: it reports an error instead.
	Addresses []Address
	// Endpoints group the addresses by server. A resolver may set either
	// field or both: the client fills Addresses from Endpoints (every
	// endpoint's addresses, in order) when only Endpoints is set, and
	// Endpoints from Addresses (one endpoint each) when only Addresses is,
	// so that balancers find both.
	Endpoints  []Endpoint
	Attributes *attributes.Attributes
}

// String describes the state for logs.
func (s State) String() string {
	if len(s.Endpoints) > 0 {
		eps := make([]string, len(s.Endpoints))
		for i, e := range s.Endpoints {
			eps[i] = addrList(e.Addresses)
		}
		return fmt.Sprintf("[%s]", strings.Join(eps, ", "))
	}
	return addrList(s.Addresses)
}

func addrList(as []Address) string {
	addrs := make([]string, len(as))
	for i, a := range as {
		addrs[i] = a.String()
	}
	return fmt.Sprintf("[%s]", strings.Join(addrs, ", "))
}

// Complete returns s with Addresses filled from Endpoints, or Endpoints
// from Addresses, whichever the resolver left empty (the client does this
// before a balancer sees the state).
func (s State) Complete() State {
	switch {
	case len(s.Addresses) == 0 && len(s.Endpoints) > 0:
		for _, e := range s.Endpoints {
			s.Addresses = append(s.Addresses, e.Addresses...)
		}
	case len(s.Endpoints) == 0 && len(s.Addresses) > 0:
		s.Endpoints = make([]Endpoint, len(s.Addresses))
		for i, a := range s.Addresses {
			s.Endpoints[i] = Endpoint{Addresses: []Address{a}}
		}
	}
	return s
}

// ClientConn is what a resolver reports to: the client (in gRPC-go's name)
// that owns it. Its methods may be called from any goroutine, one at a time.
type ClientConn interface {
	// UpdateState hands the resolver's new state to the client. An error
	// means the client could not use it (no address it can dial, for
	// instance); the resolver should resolve again later, with backoff.
	UpdateState(State) error
	// ReportError tells the client that resolution failed; the client
	// keeps any addresses it had and the resolver will try again.
	ReportError(error)
}

// BuildOptions are what the client passes to Builder.Build.
type BuildOptions struct{}

// ResolveNowOptions are ResolveNow's options; none yet, as in gRPC-go.
type ResolveNowOptions struct{}

// Builder builds resolvers for targets of its scheme.
type Builder interface {
	// Build starts resolving target and reports to cc. It may report
	// synchronously, before returning, or from a goroutine it owns.
	Build(target Target, cc ClientConn, opts BuildOptions) (Resolver, error)
	// Scheme is the scheme this builder is registered for ("dns").
	Scheme() string
}

// Resolver watches one target.
type Resolver interface {
	// ResolveNow is a hint to resolve again soon (a connection failed);
	// resolvers may rate-limit it. It never blocks.
	ResolveNow(ResolveNowOptions)
	// Close stops the resolver and waits for its goroutines; it makes no
	// call to the ClientConn after it returns. It must not be called from
	// within UpdateState or ReportError.
	Close()
}
