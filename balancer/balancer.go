package balancer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/serviceconfig"
)

var (
	mu       sync.Mutex
	builders = map[string]Builder{}
)

// Register makes b known by its Name, replacing one of the same name. Call
// it at init time, as gRPC-go asks: it is not meant to race with
// ClientConns being made.
func Register(b Builder) {
	mu.Lock()
	defer mu.Unlock()
	builders[b.Name()] = b
}

// Get returns the builder registered as name, or nil. A name that differs
// from a registered one only in case finds it, as gRPC-go's does for now.
func Get(name string) Builder {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := builders[name]; ok {
		return b
	}
	return builders[strings.ToLower(name)]
}

// SubConn is the ClientConn's connection to one backend: a list of
// addresses, tried in order (Happy Eyeballs, 250 ms apart) until one
// answers, at most one of them connected at a time. Its state changes are
// reported to the StateListener given to NewSubConn.
type SubConn interface {
	// UpdateAddresses replaces the address list. When the connected
	// address is no longer in it, the connection is drained (its calls
	// finish) and the SubConn goes Idle.
	UpdateAddresses([]resolver.Address)
	// Connect starts connecting an Idle SubConn; otherwise it does nothing.
	Connect()
	// Shutdown removes the SubConn: its connection finishes the calls in
	// flight and closes; it reports Shutdown and nothing after.
	Shutdown()
}

// NewSubConnOptions are NewSubConn's options.
type NewSubConnOptions struct {
	// StateListener is told each change of the SubConn's state, one at a
	// time, with the balancer's other calls. With health checking in the
	// service config, a connected SubConn is Ready only while its backend
	// reports SERVING.
	StateListener func(SubConnState)
}

// SubConnState is a SubConn's state.
type SubConnState struct {
	ConnectivityState connectivity.State
	// ConnectionError is why the SubConn is in TransientFailure.
	ConnectionError error
}

// State is what a balancer publishes: the ClientConn's state and the
// Picker calls use.
type State struct {
	ConnectivityState connectivity.State
	Picker            Picker
}

// ClientConn is the ClientConn as its balancer sees it.
type ClientConn interface {
	// NewSubConn makes a SubConn for addrs, Idle until its Connect.
	NewSubConn(addrs []resolver.Address, opts NewSubConnOptions) (SubConn, error)
	// UpdateState publishes the ClientConn's state and a new Picker; calls
	// waiting for one pick again.
	UpdateState(State)
	// ResolveNow asks the resolver to look again.
	ResolveNow(resolver.ResolveNowOptions)
	// Target is the target the ClientConn was made with.
	Target() string
}

// BuildOptions are a Builder's options.
type BuildOptions struct {
	// Target is the ClientConn's parsed target.
	Target resolver.Target
}

// Builder builds balancers of one policy.
type Builder interface {
	Build(cc ClientConn, opts BuildOptions) Balancer
	// Name is the policy's name in the service config.
	Name() string
}

// ConfigParser is implemented by a Builder whose policy takes a
// configuration: the JSON of its loadBalancingConfig entry is parsed when
// the ClientConn is made (an error makes the service config invalid) and
// handed to the balancer in ClientConnState.BalancerConfig.
type ConfigParser interface {
	ParseConfig(json.RawMessage) (serviceconfig.LoadBalancingConfig, error)
}

// ClientConnState is what the ClientConn tells its balancer: the
// resolver's latest state and the balancer's parsed configuration (nil
// without a ConfigParser).
type ClientConnState struct {
	ResolverState  resolver.State
	BalancerConfig serviceconfig.LoadBalancingConfig
}

// ErrBadResolverState is what UpdateClientConnState returns for a resolver
// state the balancer cannot use (no addresses).
var ErrBadResolverState = errors.New("bad resolver state")

// Balancer keeps the SubConns of one ClientConn and publishes its Picker.
// Its methods are called one at a time.
type Balancer interface {
	// UpdateClientConnState is called with each new resolver state.
	UpdateClientConnState(ClientConnState) error
	// ResolverError is called when the resolver fails (or the target could
	// not be resolved at all); a balancer without SubConns fails its calls
	// with it.
	ResolverError(error)
	// UpdateSubConnState is gRPC-go's older route for SubConn states; the
	// ClientConn calls the StateListener instead, and calls this only for
	// a SubConn made without one.
	UpdateSubConnState(SubConn, SubConnState)
	// ExitIdle is called when the ClientConn leaves Idle (Connect, or a
	// call): an Idle balancer connects.
	ExitIdle()
	// Close is the end: the ClientConn shuts its SubConns down itself.
	Close()
}

// PickInfo is what a Picker is told about a call.
type PickInfo struct {
	// FullMethodName is "/service/Method".
	FullMethodName string
	// Ctx is the call's context, its outgoing metadata included.
	Ctx context.Context
}

// PickResult is a Picker's choice.
type PickResult struct {
	// SubConn is the backend the call goes to: one of this ClientConn's,
	// Ready. A call that finds it no longer Ready waits for the next Picker.
	SubConn SubConn
	// Done, when not nil, is called once the call or stream is over.
	Done func(DoneInfo)
}

// DoneInfo is what Done is told about a call that is over.
type DoneInfo struct {
	// Err is the call's error, nil for success.
	Err error
	// Trailer is the server's trailer, nil when the call ended without
	// one (it never reached the server, or was cancelled).
	Trailer metadata.MD
	// ServerLoad is the load the server reported in Trailer, parsed by
	// the format a package installed (orca's *v3orcapb.OrcaLoadReport from
	// endpoint-load-metrics-bin, once package orca is linked in); nil
	// without one.
	ServerLoad any
}

// ProducerBuilder builds a Producer for a SubConn: a component that runs
// its own streams on that SubConn's connection, as ORCA's out-of-band load
// reports do (orca.RegisterOOBListener).
type ProducerBuilder interface {
	// Build returns the Producer and the function that stops it;
	// subConnStreams is an rpc.ClientConnInterface whose calls and
	// streams go to the SubConn's backend, failing Unavailable while the
	// SubConn is not Ready.
	Build(subConnStreams any) (p Producer, close func())
}

// Producer is what a ProducerBuilder builds; its user knows its type.
type Producer any

// ProducerSubConn is implemented by the ClientConn's SubConns (gRPC-go has
// the method on SubConn itself; here a balancer that wraps SubConns need
// not implement it).
type ProducerSubConn interface {
	SubConn
	// GetOrBuildProducer returns the SubConn's Producer of pb, building
	// it on first use; each caller calls close once, and the last close
	// stops the Producer.
	GetOrBuildProducer(pb ProducerBuilder) (p Producer, close func())
}

// ErrNoSubConnAvailable is what a Picker returns when it has no SubConn
// for the call yet: the call waits for the next Picker.
var ErrNoSubConnAvailable = errors.New("no SubConn is available")

// Picker chooses the SubConn for each call; it is called by calls side by
// side, and replaced as a whole (never changed) when the state changes.
//
// Pick's error decides what the call does: ErrNoSubConnAvailable, wait for
// the next Picker; a status error (package status), fail with it; any
// other error, fail with Unavailable, or wait for the next Picker with
// WaitForReady.
type Picker interface {
	Pick(info PickInfo) (PickResult, error)
}
