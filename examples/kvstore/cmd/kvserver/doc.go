// Command kvserver serves the key-value store of kv.proto over RDMA or TCP.
//
//	kvserver [--listen TARGET]... [--data-dir DIR | --mem] [--sync always|none]
//	         [--min-free-space 64MiB] [--metrics-addr HOST:PORT] [--otel] [--shutdown-timeout D]
//	         [--log-level LEVEL] [--log-format console|json]
//
// By default it keeps its data in ./kvdata (Pebble), syncs every write
// before answering, and listens on auto://127.0.0.1:7070: RDMA when an RDMA
// device serves that address, else TCP. --listen may be repeated; its
// schemes are tcp://, rdma:// (RDMA or fail) and auto://.
//
// With less than --min-free-space free on the data directory's file system,
// writes are refused with ResourceExhausted and reads go on; started on a
// full disk it serves reads, and takes writes once space is freed.
//
// --metrics-addr serves Prometheus metrics at http://HOST:PORT/metrics
// (contrib/prometheus: go-grpc-prometheus's grpc_server_* series, the
// transports' counters, the store's state). --otel traces and measures
// every call with OpenTelemetry (contrib/otel), written as JSON to stdout.
//
// SIGINT or SIGTERM shuts it down: no new connections, calls in progress
// get --shutdown-timeout to finish, then the remaining connections close
// and the store is closed cleanly. A second signal skips the wait.
//
// It refuses to start, writing nothing, on a data directory that is not a
// kvstore's (not empty and without a KVSTORE marker) or that it cannot
// read. Exit status: 0 after a clean shutdown, 1 on any failure, 2 on bad
// flags.
//
// This command wires flags, signals and logging to package server, and
// links the transports in (tcp and rdma).
package main
