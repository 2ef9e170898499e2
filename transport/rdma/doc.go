// Package rdma is the rdmarpc transport over RDMA two-sided verbs: Send and
// Receive on reliable-connected queue pairs, through the cgo binding in
// transport/rdma/internal/verbs. Importing it registers the "rdma" scheme.
//
// A connection starts with a TCP bootstrap connection to the same address,
// which carries a versioned handshake (queue pair numbers, GIDs, MTU,
// buffer sizes and counts, maximum message size) and then stays open as the
// liveness signal: when it ends, the connection closes. Every receive is
// posted before the queue pair can receive; sends go from registered send
// slots, inline when small. Credit-based flow control (transport/rdma/internal/credit)
// makes a Send meeting an empty receive queue impossible. Messages larger
// than one receive buffer are fragmented and reassembled. docs/rdma.md
// specifies the protocol.
//
// Completions: each connection has its own completion queue and one poller
// goroutine. After a completion the poller keeps polling for PollSpin
// (default 20 µs), yielding the processor between polls, so a reply that
// follows a request closely is picked up without a wake-up; then it arms the
// completion queue and sleeps on the completion channel (Go's netpoller: no
// OS thread is held). Sends ask for a completion every SignalEvery (16)
// sends, when slots or queue entries run short, and at the end of a message
// no other sender waits to follow.
//
// The package implements the transport contract and must not know about
// RPC or the TCP transport. Without cgo it still builds: every Dial and
// Listen then fails with an error wrapping transport.ErrNoDevice.
package rdma
