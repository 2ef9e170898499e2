// Package server runs the key-value store: it opens the store, serves the KV
// service on every listener of its configuration, exports Prometheus
// metrics, and shuts down in order (drain calls, then close the store).
//
// Listen targets name a transport by scheme:
//
//	tcp://host:port    TCP
//	rdma://host:port   RDMA; startup fails when no RDMA device serves host
//	auto://host:port   RDMA when a device serves host, else TCP on the same
//	                   address (one log line says so)
//
// Several targets serve at once, e.g. auto://10.9.9.1:7070 for RDMA clients
// and tcp://0.0.0.0:7071 for everyone else.
//
// The package sits on rpc and the transport registry; it imports no concrete
// transport (cmd/kvserver does, blank), and knows nothing of flags or
// signals.
package server
