package transport

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

var registry struct {
	sync.RWMutex
	m map[string]Transport
}

// Register makes t the transport for targets with this scheme ("tcp",
// "rdma"). Transports register themselves from init; registering a scheme
// again replaces the earlier transport, so a program can install one with its
// own options.
func Register(scheme string, t Transport) {
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = make(map[string]Transport)
	}
	registry.m[scheme] = t
}

// Lookup returns the transport registered for scheme.
func Lookup(scheme string) (Transport, bool) {
	registry.RLock()
	defer registry.RUnlock()
	t, ok := registry.m[scheme]
	return t, ok
}

// ParseTarget splits "scheme://host:port" into its scheme and address. A
// target without a scheme is taken as "tcp".
func ParseTarget(target string) (scheme, addr string, err error) {
	scheme, addr, ok := strings.Cut(target, "://")
	if !ok {
		scheme, addr = "tcp", target
	}
	if scheme == "" || addr == "" {
		return "", "", fmt.Errorf("transport: bad target %q: want scheme://host:port", target)
	}
	return scheme, addr, nil
}

// ForTarget returns the transport that serves target and the address part.
func ForTarget(target string) (Transport, string, error) {
	scheme, addr, err := ParseTarget(target)
	if err != nil {
		return nil, "", err
	}
	t, ok := Lookup(scheme)
	if !ok {
		registry.RLock()
		known := make([]string, 0, len(registry.m))
		for s := range registry.m {
			known = append(known, s)
		}
		registry.RUnlock()
		sort.Strings(known)
		return nil, "", fmt.Errorf("transport: no transport for scheme %q in %q (registered: %s; import github.com/rdmarpc/rdmarpc/transport/%s)",
			scheme, target, strings.Join(known, ", "), scheme)
	}
	return t, addr, nil
}

// Dial connects to target ("tcp://host:port", "rdma://host:port") with the
// transport registered for its scheme.
func Dial(ctx context.Context, target string) (Conn, error) {
	t, addr, err := ForTarget(target)
	if err != nil {
		return nil, err
	}
	return t.Dial(ctx, addr)
}

// Listen listens on target with the transport registered for its scheme.
func Listen(target string) (Listener, error) {
	t, addr, err := ForTarget(target)
	if err != nil {
		return nil, err
	}
	return t.Listen(addr)
}
