package prometheus

import (
	"strings"
	"sync"
	"sync/atomic"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/stats"
)

// defaultMaxMethods is Options.MaxMethods's default: more methods than a
// program serves or calls, few enough series to scrape.
const defaultMaxMethods = 1024

// methods resolves a full method name to its method once, for every call
// to it after the first. The names come from the server's registered
// services (it reports no call to an unknown method) or from the program
// that calls them; should they come from elsewhere, the map stops growing
// at max and the methods past it are counted as "unknown", so that a flood
// of names holds neither this map nor the series without bound.
type methods struct {
	// known is read without a lock; mu serializes the writers, who
	// replace it: a method is added once, a call looks it up every time.
	known   atomic.Pointer[map[string]*method]
	mu      sync.Mutex
	max     int
	unknown *method // for names of another shape, and past max
}

func newMethods(max int) *methods {
	if max <= 0 {
		max = defaultMaxMethods
	}
	ms := &methods{max: max, unknown: &method{service: "unknown", name: "unknown"}}
	ms.known.Store(&map[string]*method{})
	return ms
}

func (ms *methods) get(full string) *method {
	known := *ms.known.Load()
	if m := known[full]; m != nil {
		return m
	}
	if len(known) >= ms.max {
		return ms.unknown
	}
	return ms.add(full)
}

func (ms *methods) add(full string) *method {
	if !strings.Contains(strings.TrimPrefix(full, "/"), "/") {
		return ms.unknown // as go-grpc-prometheus labels them
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	known := *ms.known.Load()
	if m := known[full]; m != nil {
		return m
	}
	if len(known) >= ms.max {
		return ms.unknown
	}
	// The name may be part of a larger string (a frame's header): the
	// map keeps a copy of its own.
	full = strings.Clone(full)
	svc, name, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	m := &method{service: svc, name: name}
	next := make(map[string]*method, len(known)+1)
	for k, v := range known {
		next[k] = v
	}
	next[full] = m
	ms.known.Store(&next)
	return m
}

// len is how many methods are known, for tests.
func (ms *methods) len() int { return len(*ms.known.Load()) }

// rpcType is a call's grpc_type.
type rpcType uint8

const (
	unary rpcType = iota
	clientStream
	serverStream
	bidiStream
	numTypes
)

var typeNames = [numTypes]string{"unary", "client_stream", "server_stream", "bidi_stream"}

// method is one method's series, by the type of its calls: a method's
// calls are all of one type in practice, but a client may call a name
// with any StreamDesc.
type method struct {
	service, name string
	types         [numTypes]atomic.Pointer[series]
}

// numCodes is how many status codes there are; a code past them, which
// only a peer that does not follow the protocol sends, is counted as
// Unknown, so that such a peer cannot make a series per number.
const numCodes = codes.Unauthenticated + 1

// series are the series of one method's calls of one type. A series is
// made when first counted, as WithLabelValues would make it: started,
// received and sent at the first call's Begin, handling and handled (per
// code) at the first End.
type series struct {
	labels                  [3]string // grpc_type, grpc_service, grpc_method
	started, received, sent prom.Counter
	handling                atomic.Pointer[prom.Observer]
	handled                 [numCodes]atomic.Pointer[prom.Counter]
}

func (m *metrics) seriesOf(meth *method, t rpcType) *series {
	if s := meth.types[t].Load(); s != nil {
		return s
	}
	// Two first calls may both get here: WithLabelValues gives both the
	// same series, and the first stored is kept.
	s := &series{labels: [3]string{typeNames[t], meth.service, meth.name}}
	s.started = m.started.WithLabelValues(s.labels[:]...)
	s.received = m.received.WithLabelValues(s.labels[:]...)
	s.sent = m.sent.WithLabelValues(s.labels[:]...)
	if !meth.types[t].CompareAndSwap(nil, s) {
		s = meth.types[t].Load()
	}
	return s
}

func (s *series) handledOf(m *metrics, code codes.Code) prom.Counter {
	if code >= numCodes {
		code = codes.Unknown
	}
	if c := s.handled[code].Load(); c != nil {
		return *c
	}
	c := m.handled.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], code.String())
	s.handled[code].Store(&c)
	return c
}

func (s *series) handlingOf(m *metrics) prom.Observer {
	if o := s.handling.Load(); o != nil {
		return *o
	}
	o := m.handling.WithLabelValues(s.labels[:]...)
	s.handling.Store(&o)
	return o
}

func rpcTypeOf(b *stats.Begin) rpcType {
	switch {
	case b.IsClientStream && b.IsServerStream:
		return bidiStream
	case b.IsClientStream:
		return clientStream
	case b.IsServerStream:
		return serverStream
	}
	return unary
}
