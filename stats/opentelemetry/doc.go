// Package opentelemetry records gRPC's per-call OpenTelemetry metrics
// (gRFC A66) and traces calls, in the shape of gRPC-go's
// stats/opentelemetry: DialOption and ServerOption take Options, whose
// MetricsOptions name a MeterProvider and the metrics to record
// (DefaultMetrics) and whose TraceOptions a TracerProvider and a
// propagator. It sits on rdmarpc's stats handlers, and is a module of its
// own so that the library does not require OpenTelemetry.
//
// Recorded, with grpc.method (the full method name without its leading
// "/", or "other" when MethodAttributeFilter refuses it) and, at the end,
// grpc.status (the code's name, "OK"):
//
//	grpc.client.attempt.started                          {attempt}
//	grpc.client.attempt.duration                         s
//	grpc.client.attempt.sent_total_compressed_message_size  By
//	grpc.client.attempt.rcvd_total_compressed_message_size  By
//	grpc.client.call.duration                            s
//	grpc.server.call.started                             {call}
//	grpc.server.call.duration                            s
//	grpc.server.call.sent_total_compressed_message_size  By
//	grpc.server.call.rcvd_total_compressed_message_size  By
//
// Spans: "Sent.<method>" on the client, "Recv.<method>" on the server (a
// child of the client's, its context carried in the metadata by the
// propagator), with an "Outbound message" or "Inbound message" event per
// message (sequence-number, message-size, message-size-compressed), and
// an error status for a code other than OK.
//
// Different from gRPC-go: rdmarpc's stats handlers see a call, not each
// of its attempts, so the attempt metrics count calls (a retried call is
// one attempt) and there is no "Attempt." span; the client has no
// grpc.target label (a stats handler does not know its ClientConn's
// target); the histograms use the SDK's default buckets, not A66's;
// names of other metrics (the balancers' "grpc.lb.*") are taken and
// record nothing.
package opentelemetry
