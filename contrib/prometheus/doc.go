// Package prometheus exports an rdmarpc server's and client's calls as
// Prometheus metrics, with the names and labels go-grpc-prometheus users
// have dashboards and alerts for, and the transports' own counters next to
// them. It is a stats.Handler: set it with rpc.StatsHandler on a server,
// rpc.WithStatsHandler on a client, and register it with a
// prometheus.Registerer.
//
//	grpc_server_started_total{grpc_type,grpc_service,grpc_method}
//	grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}
//	grpc_server_msg_received_total{grpc_type,grpc_service,grpc_method}
//	grpc_server_msg_sent_total{grpc_type,grpc_service,grpc_method}
//	grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method} (histogram)
//
// and the same with grpc_client_ for ClientMetrics. grpc_type is unary,
// client_stream, server_stream or bidi_stream; grpc_code the status code's
// name (OK, NotFound, …; a number past the 17 codes, which only a peer
// that does not follow the protocol sends, counts as Unknown). A call
// costs the metrics one allocation: its series are resolved once per
// method, for at most Options.MaxMethods methods.
//
// TransportMetrics exports the counters of the transports connections
// were made with (transport.Counters, as
// rdmarpc_transport_<name>_total{scheme}): credits waited for, receives
// posted, completions, work-completion errors by status.
//
// The package is a module of its own, so that the rdmarpc module does not
// require client_golang.
package prometheus
