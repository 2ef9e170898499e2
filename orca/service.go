package orca

import (
	"errors"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"

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

// Register serves ORCA's out-of-band service on s: each client's stream
// gets a report of opts' provider at once and then every interval it
// asked for (no less than MinReportingInterval) until it ends.
func Register(s rpc.ServiceRegistrar, opts ServiceOptions) error {
	if opts.ServerMetricsProvider == nil {
		return errors.New("orca: ServerMetricsProvider is required")
	}
	if !opts.allowAnyMinReportingInterval {
		opts.MinReportingInterval = max(opts.MinReportingInterval, minReportingInterval)
	}
	pb.RegisterOpenRcaServiceServer(s, &service{opts: opts})
	return nil
}

type service struct {
	pb.UnimplementedOpenRcaServiceServer
	opts ServiceOptions
}

func (s *service) StreamCoreMetrics(req *pb.OrcaLoadReportRequest, stream pb.OpenRcaService_StreamCoreMetricsServer) error {
	interval := max(req.GetReportInterval().AsDuration(), s.opts.MinReportingInterval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := stream.Send(s.report()); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-t.C:
		}
	}
}

func (s *service) report() *v3orcapb.OrcaLoadReport {
	return s.opts.ServerMetricsProvider.ServerMetrics().report()
}
