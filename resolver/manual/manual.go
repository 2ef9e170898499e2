package manual

import (
	"errors"
	"sync"

	"github.com/rdmarpc/rdmarpc/resolver"
)

// ErrNotBuilt is UpdateState's error before Build or after Close.
var ErrNotBuilt = errors.New("manual: resolver not built, or closed")

// Resolver is a resolver.Builder and the resolver.Resolver it builds. It is
// built once at a time: a second Build replaces the ClientConn it reports
// to.
type Resolver struct {
	scheme string

	// Callbacks, each optional, set before use.
	BuildCallback      func(resolver.Target, resolver.ClientConn, resolver.BuildOptions)
	ResolveNowCallback func(resolver.ResolveNowOptions)
	CloseCallback      func()

	mu      sync.Mutex
	cc      resolver.ClientConn
	initial *resolver.State
	nows    int
}

// NewBuilderWithScheme returns a manual resolver for scheme.
func NewBuilderWithScheme(scheme string) *Resolver { return &Resolver{scheme: scheme} }

// Scheme is the scheme given to NewBuilderWithScheme.
func (r *Resolver) Scheme() string { return r.scheme }

// InitialState sets the state reported as soon as the resolver is built.
func (r *Resolver) InitialState(s resolver.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initial = &s
}

// Build remembers cc and reports the initial state, if any, to it.
func (r *Resolver) Build(t resolver.Target, cc resolver.ClientConn, opts resolver.BuildOptions) (resolver.Resolver, error) {
	if r.BuildCallback != nil {
		r.BuildCallback(t, cc, opts)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cc = cc
	if r.initial != nil {
		_ = cc.UpdateState(*r.initial)
	}
	return r, nil
}

// UpdateState reports s to the ClientConn and returns its answer.
func (r *Resolver) UpdateState(s resolver.State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cc == nil {
		return ErrNotBuilt
	}
	return r.cc.UpdateState(s)
}

// CC is the ClientConn the resolver was last built for, as gRPC-go's:
// tests report states and errors to it directly. It panics before Build.
func (r *Resolver) CC() resolver.ClientConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cc == nil {
		panic("manual: Resolver.CC called before Build (or after Close)")
	}
	return r.cc
}

// ReportError reports err to the ClientConn, if built.
func (r *Resolver) ReportError(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cc != nil {
		r.cc.ReportError(err)
	}
}

// ResolveNow counts the request and calls ResolveNowCallback.
func (r *Resolver) ResolveNow(o resolver.ResolveNowOptions) {
	r.mu.Lock()
	r.nows++
	r.mu.Unlock()
	if r.ResolveNowCallback != nil {
		r.ResolveNowCallback(o)
	}
}

// ResolveNowCount is how many times ResolveNow was called.
func (r *Resolver) ResolveNowCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nows
}

// Close forgets the ClientConn; later reports go nowhere.
func (r *Resolver) Close() {
	r.mu.Lock()
	r.cc = nil
	r.mu.Unlock()
	if r.CloseCallback != nil {
		r.CloseCallback()
	}
}
