package health

import (
	"context"
	"sync"

	"github.com/rdmarpc/rdmarpc/codes"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/status"
)

// maxListed is the most statuses List returns, as gRPC-go's server: beyond
// it List fails with ResourceExhausted rather than build an answer of any
// size.
const maxListed = 100

// Server is the grpc.health.v1.Health service. Register it with
// grpc_health_v1.RegisterHealthServer; its methods are safe to call at any
// time from any goroutine.
type Server struct {
	healthpb.UnimplementedHealthServer

	mu       sync.Mutex
	shutdown bool // Shutdown called and not Resume: SetServingStatus is ignored
	statuses map[string]healthpb.HealthCheckResponse_ServingStatus
	watchers map[string]map[*watcher]struct{} // by service
}

// watcher is one Watch call's slot: the latest status, replaced on every
// change, and a wake-up that holds at most one pending signal. Together
// they coalesce: a watcher that has not read yet keeps one status, the
// newest.
type watcher struct {
	latest  healthpb.HealthCheckResponse_ServingStatus // guarded by Server.mu
	changed chan struct{}                              // capacity 1
}

// NewServer returns a health server whose only status is the server's own
// (the empty service name): SERVING.
func NewServer() *Server {
	return &Server{
		statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"": healthpb.HealthCheckResponse_SERVING},
		watchers: make(map[string]map[*watcher]struct{}),
	}
}

// Check returns the service's status, or NotFound when it has none.
func (s *Server) Check(_ context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.statuses[in.GetService()]
	if !ok {
		return nil, status.Error(codes.NotFound, "unknown service")
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List returns every service's status; ResourceExhausted when there are
// more than 100.
func (s *Server) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.statuses) > maxListed {
		return nil, status.Errorf(codes.ResourceExhausted, "server health list exceeds maximum capacity: %d", maxListed)
	}
	out := make(map[string]*healthpb.HealthCheckResponse, len(s.statuses))
	for name, st := range s.statuses {
		out[name] = &healthpb.HealthCheckResponse{Status: st}
	}
	return &healthpb.HealthListResponse{Statuses: out}, nil
}

// Watch sends the service's status (SERVICE_UNKNOWN when it has none) and
// then each change, until the stream's context ends. A status equal to the
// last one sent is not sent again.
func (s *Server) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	name := in.GetService()
	w := &watcher{changed: make(chan struct{}, 1)}
	s.mu.Lock()
	w.latest = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	if st, ok := s.statuses[name]; ok {
		w.latest = st
	}
	w.changed <- struct{}{}
	if s.watchers[name] == nil {
		s.watchers[name] = make(map[*watcher]struct{})
	}
	s.watchers[name][w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers[name], w)
		if len(s.watchers[name]) == 0 {
			delete(s.watchers, name)
		}
		s.mu.Unlock()
	}()

	sent := healthpb.HealthCheckResponse_ServingStatus(-1) // nothing yet
	for {
		select {
		case <-stream.Context().Done():
			return status.Error(codes.Canceled, "stream has ended")
		case <-w.changed:
		}
		s.mu.Lock()
		st := w.latest
		s.mu.Unlock()
		if st == sent {
			continue
		}
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
			return status.Error(codes.Canceled, "stream has ended")
		}
		sent = st
	}
}

// SetServingStatus sets the service's status and tells its watchers. It is
// ignored between Shutdown and Resume.
func (s *Server) SetServingStatus(service string, st healthpb.HealthCheckResponse_ServingStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return
	}
	s.setLocked(service, st)
}

// Shutdown sets every service NOT_SERVING and ignores SetServingStatus
// until Resume: what a server does before it drains.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	for name := range s.statuses {
		s.setLocked(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
}

// Resume sets every service SERVING and honours SetServingStatus again.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = false
	for name := range s.statuses {
		s.setLocked(name, healthpb.HealthCheckResponse_SERVING)
	}
}

func (s *Server) setLocked(service string, st healthpb.HealthCheckResponse_ServingStatus) {
	s.statuses[service] = st
	for w := range s.watchers[service] {
		w.latest = st
		select {
		case w.changed <- struct{}{}:
		default: // a wake-up is pending already; it will read st
		}
	}
}
