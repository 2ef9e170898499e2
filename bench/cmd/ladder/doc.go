// Command ladder measures the rungs of the RDMA latency ladder (issue 10)
// that need the project's own verbs binding or its transports below the
// RPC layer, in one process, and prints them with the RPC rungs that
// bench/cmd/rpcbench measured in the same boot:
//
//	verbs-busy   raw verbs ping-pong (transport/rdma/rawverbs), busy polling
//	verbs-event  the same, sleeping on the completion channel
//	conn         transport/rdma Conn ping-pong (Send, Recv) at the default Options
//	tcp-raw      a length-prefixed ping-pong on a TCP socket
//
// A rung at concurrency N keeps N requests in flight: the raw rungs on one
// queue pair (or socket) from one goroutine, the conn rung from N
// goroutines sharing the connection. Both ends run in this process, so the
// per-call costs (context switches, scheduler wake-ups, cgo calls, heap
// objects, CPU) are both ends' together.
//
// The verbs rungs reach the project's binding through
// transport/rdma/rawverbs, which exposes only what they use; the figures,
// their per-call costs and the CSV are bench's (bench.Result,
// bench.StartMeasure, bench.WriteCSV). bench/softroce.sh builds it and
// runs it in the Soft-RoCE guest.
package main
