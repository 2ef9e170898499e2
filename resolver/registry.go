package resolver

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/rdmarpc/rdmarpc/transport"
)

var registry struct {
	sync.RWMutex
	m             map[string]Builder
	defaultScheme string
}

// Register makes b the builder for targets of its scheme; a second builder
// for a scheme replaces the first. Builders register from init. A scheme is
// lower case (url.Parse lowers a target's) and has no "+", which separates a
// transport from the resolver in a target; Register panics on one that has.
func Register(b Builder) {
	scheme := strings.ToLower(b.Scheme())
	if scheme == "" || strings.Contains(scheme, "+") {
		panic(fmt.Sprintf("resolver: cannot register scheme %q: it must be non-empty and have no '+'", b.Scheme()))
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = make(map[string]Builder)
	}
	registry.m[scheme] = b
}

// Get returns the builder registered for scheme, or nil.
func Get(scheme string) Builder {
	registry.RLock()
	defer registry.RUnlock()
	return registry.m[strings.ToLower(scheme)]
}

// SetDefaultScheme sets the scheme a target without one is resolved with.
// It is "dns", as for gRPC-go's NewClient. Call it from init only.
func SetDefaultScheme(scheme string) {
	registry.Lock()
	defer registry.Unlock()
	registry.defaultScheme = strings.ToLower(scheme)
}

// GetDefaultScheme returns the scheme for targets without one.
func GetDefaultScheme() string {
	registry.RLock()
	defer registry.RUnlock()
	if registry.defaultScheme == "" {
		return "dns"
	}
	return registry.defaultScheme
}

func schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.m))
	for k := range registry.m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// ErrUnknownScheme is what ParseTarget's error for a scheme that is neither
// a registered resolver nor a registered transport matches with errors.Is.
var ErrUnknownScheme = errors.New("unknown scheme")

// ParseTarget parses target and finds the builder for it. The rule, in order:
//
//  1. "scheme:..." whose scheme is a registered resolver is that resolver's:
//     "dns:///kv:7070", "dns://8.8.8.8/kv:7070", "passthrough:///h:1",
//     "ipv4:10.0.0.1:1,10.0.0.2:1", "unix:///run/kv.sock".
//  2. "T+scheme:..." names transport T (a registered transport, or "auto")
//     and resolver scheme: "rdma+dns:///kv:7070". Target.Transport is T.
//  3. "T://host:port" whose scheme is a transport is one address dialed with
//     T: passthrough:///host:port with Transport T. Targets written before
//     resolvers existed ("tcp://h:1", "rdma://10.0.0.1:7070") keep working.
//  4. Any other "scheme://..." is an error naming the scheme and what is
//     registered (ErrUnknownScheme).
//  5. Anything else ("kv:7070", "10.0.0.1:7070", "[::1]:7070") has no
//     scheme, and is parsed again as GetDefaultScheme() + ":///" + target.
func ParseTarget(target string) (Target, Builder, error) {
	if target == "" {
		return Target{}, nil, errors.New("resolver: empty target")
	}
	u, err := url.Parse(target)
	if err == nil && u.Scheme != "" {
		if b := Get(u.Scheme); b != nil {
			return Target{URL: *u}, b, nil
		}
		if tp, rs, ok := strings.Cut(u.Scheme, "+"); ok {
			b := Get(rs)
			if b == nil {
				return Target{}, nil, unknownScheme(rs, target)
			}
			if !isTransport(tp) {
				return Target{}, nil, unknownScheme(tp, target)
			}
			t := Target{URL: *u, Transport: tp}
			t.URL.Scheme = rs
			return t, b, nil
		}
		if isTransport(u.Scheme) && strings.HasPrefix(target[len(u.Scheme):], "://") {
			return transportTarget(u, target)
		}
		if strings.HasPrefix(target[len(u.Scheme):], "://") {
			return Target{}, nil, unknownScheme(u.Scheme, target)
		}
	}
	if err != nil && strings.Contains(target, "://") {
		return Target{}, nil, fmt.Errorf("resolver: bad target %q: %w", target, err)
	}
	def := GetDefaultScheme()
	b := Get(def)
	if b == nil {
		return Target{}, nil, noDefault(def, target)
	}
	u, err = url.Parse(def + ":///" + target)
	if err != nil {
		return Target{}, nil, fmt.Errorf("resolver: bad target %q: %w", target, err)
	}
	return Target{URL: *u}, b, nil
}

// transportTarget is rule 3: "tcp://host:port" as passthrough over tcp.
func transportTarget(u *url.URL, target string) (Target, Builder, error) {
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return Target{}, nil, fmt.Errorf("resolver: bad target %q: want %s://host:port, or %s+scheme:///endpoint", target, u.Scheme, u.Scheme)
	}
	b := Get("passthrough")
	if b == nil {
		return Target{}, nil, unknownScheme("passthrough", target)
	}
	return Target{URL: url.URL{Scheme: "passthrough", Path: "/" + u.Host}, Transport: u.Scheme}, b, nil
}

func isTransport(name string) bool {
	if name == TransportAuto {
		return true
	}
	_, ok := transport.Lookup(name)
	return ok
}

// packages are the packages that register the schemes rdmarpc has, for the
// hint of unknownScheme: only ones that exist are named.
var packages = map[string]string{
	"dns":         "github.com/rdmarpc/rdmarpc/resolver/dns",
	"passthrough": "github.com/rdmarpc/rdmarpc/resolver/passthrough",
	"ipv4":        "github.com/rdmarpc/rdmarpc/resolver/static",
	"ipv6":        "github.com/rdmarpc/rdmarpc/resolver/static",
	"unix":        "github.com/rdmarpc/rdmarpc/resolver/unix",
	"tcp":         "github.com/rdmarpc/rdmarpc/transport/tcp",
	"rdma":        "github.com/rdmarpc/rdmarpc/transport/rdma",
}

func unknownScheme(scheme, target string) error {
	return registeredError(fmt.Sprintf("resolver: %s %q in target %q", ErrUnknownScheme, scheme, target), scheme)
}

func noDefault(scheme, target string) error {
	return registeredError(fmt.Sprintf("resolver: target %q has no scheme, and the default scheme %q is not registered", target, scheme), scheme)
}

// registeredError is lead, then what is registered, then which package
// would register scheme if rdmarpc has one.
func registeredError(lead, scheme string) error {
	var ts []string
	if _, ok := transport.Lookup("tcp"); ok {
		ts = append(ts, "tcp")
	}
	for _, s := range []string{"rdma", "unix"} {
		if _, ok := transport.Lookup(s); ok {
			ts = append(ts, s)
		}
	}
	rs := schemes()
	msg := fmt.Sprintf("%s; registered resolvers: %s; registered transports: %s", lead, list(rs), list(ts))
	if pkg, ok := packages[scheme]; ok {
		msg += fmt.Sprintf(" (%q registers when %s is imported)", scheme, pkg)
	}
	return &schemeError{msg: msg}
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

type schemeError struct{ msg string }

func (e *schemeError) Error() string        { return e.msg }
func (e *schemeError) Is(target error) bool { return target == ErrUnknownScheme }
