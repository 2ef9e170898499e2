// Package orca is ORCA (Open Request Cost Aggregation) load reporting in
// the shape of gRPC-go's package of the same path, for programs ported from
// it and for balancers that weigh backends by their load:
//
//   - on a server, CallMetricsServerOption gives each handler a
//     CallMetricsRecorder (CallMetricsRecorderFromContext) whose metrics
//     go back in the call's trailer, endpoint-load-metrics-bin, as gRPC-go
//     sends them; Register serves the out-of-band service
//     (xds.service.orca.v3.OpenRcaService), streaming a
//     ServerMetricsRecorder's metrics every interval a client asks for;
//   - on a client, linking this package makes a Picker's Done see the
//     per-call report as balancer.DoneInfo.ServerLoad (a
//     *v3orcapb.OrcaLoadReport of github.com/cncf/xds/go, the type gRPC-go
//     uses), and RegisterOOBListener on a SubConn streams the backend's
//     out-of-band reports to a listener.
//
// A module of its own: it requires github.com/cncf/xds/go, which requires
// gRPC-go, and the library must not. Its generated service registers the
// proto file xds/service/orca/v3/orca.proto, as cncf/xds's service package
// does, so a binary must not link both (gRPC-go's orca and this one).
// Not here: gRPC-go's internal option that allows reporting intervals
// under 30 s (ServiceOptions.MinReportingInterval below 30 s is raised to
// it, as gRPC-go does without that option), and a weighted round robin
// that uses the reports.
package orca
