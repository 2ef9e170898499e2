package orca

import (
	"errors"
	"time"

	"github.com/rdmarpc/rdmarpc/orca/internal/pb"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// minReportingInterval is the least interval a server sends reports at,
// unless its ServiceOptions allow less; 30 s, as gRPC-go's.
const minReportingInterval = 30 * time.Second

// ServiceOptions configure the out-of-band service.
type ServiceOptions struct {
	// ServerMetricsProvider gives the metrics each report sends.
	// Required.
	ServerMetricsProvider ServerMetricsProvider
	// MinReportingInterval is the least interval between two reports to
	// one client: a client asking for less gets this. Values under 30 s
	// are raised to 30 s.
	MinReportingInterval time.Duration

	allowAnyMinReportingInterval bool // tests only
}

// Service is ORCA's out-of-band service: each client's stream gets a
// report of its provider at once and then every interval the client asked
// for, no less than MinReportingInterval, until the stream ends.
type Service struct {
	pb.UnimplementedOpenRcaServiceServer
	opts ServiceOptions
}

// NewService returns the service configured by opts, to register where
// Register does not suit.
func NewService(opts ServiceOptions) (*Service, error) {
	if opts.ServerMetricsProvider == nil {
		return nil, errors.New("orca: ServerMetricsProvider is required")
	}
	if !opts.allowAnyMinReportingInterval {
		opts.MinReportingInterval = max(opts.MinReportingInterval, minReportingInterval)
	}
	return &Service{opts: opts}, nil
}

// Register serves NewService(opts) on s.
func Register(s rpc.ServiceRegistrar, opts ServiceOptions) error {
	svc, err := NewService(opts)
	if err != nil {
		return err
	}
	pb.RegisterOpenRcaServiceServer(s, svc)
	return nil
}

// StreamCoreMetrics is the service's one method.
func (s *Service) StreamCoreMetrics(req *pb.OrcaLoadReportRequest, stream pb.OpenRcaService_StreamCoreMetricsServer) error {
	interval := max(req.GetReportInterval().AsDuration(), s.opts.MinReportingInterval)
	if interval <= 0 { // a test's server allowing any interval, asked for none
		interval = minReportingInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := stream.Send(s.opts.ServerMetricsProvider.ServerMetrics().report()); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-t.C:
		}
	}
}
