// Package perftest reads and runs perftest's ib_send_lat and ib_send_bw
// (github.com/linux-rdma/perftest), the raw-verbs figures rdmarpc is held
// against.
//
// What the numbers mean, from perftest's source (print_report_lat,
// print_report_bw), which matters when comparing them with an RPC:
//   - ib_send_lat is a ping-pong of Sends; every latency it prints is half
//     the round trip. LatRow.RoundTrip doubles it back.
//   - ib_send_bw streams Sends one way with TX depth 128 in flight by
//     default; "MB/sec" is 2^20 bytes per second, MsgRate is 10^6 messages
//     per second.
//   - perftest prints inf and -nan instead of failing when it could not
//     time a run (its CPU clock sample failed); the parsers refuse such a
//     row (ErrBadRow), so a comparison never goes on without its figures.
//
// The package knows nothing about rdmarpc or gRPC.
package perftest
