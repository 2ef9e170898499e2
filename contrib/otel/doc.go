// Package otel traces and measures an rdmarpc server's and client's calls
// with OpenTelemetry. NewServerHandler and NewClientHandler return
// stats.Handlers, for rpc.StatsHandler and rpc.WithStatsHandler:
//
//	s := rpc.NewServer(rpc.StatsHandler(rdmarpcotel.NewServerHandler()))
//	cc, err := rpc.Dial(ctx, target, rpc.WithStatsHandler(rdmarpcotel.NewClientHandler()))
//
// Each RPC is a span named "package.Service/Method" (SpanKindClient,
// SpanKindServer). The client injects the span's context into the call's
// metadata (W3C trace-context, "traceparent", by default) and the server
// extracts it, so the server's span is a child of the client's, and the
// server's span is in the method handler's context for its own spans.
//
// Metrics follow OpenTelemetry's RPC semantic conventions (semconv
// v1.26.0): rpc.server.duration and rpc.client.duration (ms),
// rpc.{server,client}.request.size and .response.size (bytes, per
// message), rpc.{server,client}.requests_per_rpc and .responses_per_rpc.
// Spans and metrics carry rpc.system = "rdmarpc", rpc.service, rpc.method,
// network.transport (the connection's transport: "tcp", "rdma", "pipe"),
// and, once the call ended, rpc.grpc.status_code (rdmarpc's codes are
// gRPC's).
//
// The package is a module of its own, so that the rdmarpc module does not
// require OpenTelemetry.
package otel
