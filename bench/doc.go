// Package bench measures rdmarpc against what a user would pick instead
// (gRPC-go) and against the limit (raw verbs, perftest's ib_send_lat and
// ib_send_bw), side by side in one run: on these shared machines absolute
// times are noise and only ratios measured together count.
//
// The package holds the pieces the Go benchmarks (echo_bench_test.go) and the
// rpcbench command (bench/cmd/rpcbench) share: an in-process Echo server, the
// Client both implementations are driven through, Run, which drives a client
// for a duration at one payload size and concurrency and records every
// call's latency, and the table and CSV forms of its Result.
//
// Conventions, the same in the benchmarks and in rpcbench:
//   - A call is a unary Echo.Say whose request carries size payload bytes
//     and whose response carries them back; MB/s counts the payload once per
//     call (10^6 bytes per MB).
//   - Streams (stream.go): a bidirectional Echo that sends back each
//     message. In a ping-pong cell a call is one message each way on a
//     long-lived stream; in a flood (stream) cell it is one message echoed,
//     sent back to back, and latency is not measured.
//   - Latency is a call's round trip as the caller sees it.
//   - Allocations are counted for the whole process (runtime.MemStats): with
//     the server in process, as in the benchmarks and --compare-grpc, they
//     are client plus server.
//
// This package must not import gRPC: it is the part a future `rdmarpc bench`
// may reuse. gRPC-go lives in bench/internal/grpcecho, which only the
// benchmarks and rpcbench import. Nothing outside bench/ may import anything
// in it.
package bench
