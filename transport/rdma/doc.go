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
// than one receive buffer are fragmented and reassembled, or, above
// Options.RendezvousThreshold, pulled by the receiver with one RDMA Read
// through a key that reads that message alone: a memory window bound to
// its bytes (rendezvous_window.go), or, on a device without windows, a
// region registered for it (rendezvous.go). docs/rdma.md specifies the protocol.
//
// Receive buffers are each connection's own (Options.Receive =
// ReceivePerConnection, the default when the memory budget holds 256 such
// connections, budget.go), or come from one shared receive queue per
// device (ReceiveShared, srq.go): its pool of buffers is
// committed to the connections' windows, each a small guaranteed one plus
// credits lent while the peer is busy and given back once it is idle
// (lend.go), so registered receive memory follows the load instead of the
// number of connections.
//
// Completions: each connection has its own completion queue. A goroutine
// waiting for it — in Recv, or a send waiting for credits or send slots —
// polls it itself and handles every completion it finds (delivering other
// waiters' messages too), one goroutine at a time, so a reply is picked up
// by the goroutine that wants it, without a hand-off. A waiter in Recv
// keeps polling while a reply is expected, for about twice the observed
// round trip (at most PollSpin), yielding the processor between polls and
// reading the clock only every few polls; then, or at once when nothing is
// expected, it sleeps. Between the fragments of a message, and after the
// poller handled a batch, the holder polls on for 20 µs, so a stream costs
// no event per completion. Whoever lets go of the completion queue arms it, so
// one poller goroutine per connection, asleep on the completion channel
// (Go's netpoller: no OS thread is held), handles what comes while nobody
// polls: a message nobody waits for yet, a credit grant, a peer breaking
// the protocol.
// Sends ask for a completion every SignalEvery (16) sends, when slots or
// queue entries run short, and at the end of a message no other sender
// waits to follow.
//
// With Options.Completions = CompletionsShared the connections on a device
// share completion queues, a group of connections each, with one channel
// and one poller goroutine for all (cqshare.go).
//
// The code follows the parts of a connection (conn.go): the polling core
// of a completion queue (cq.go), which both completion layouts run, a
// connection's own (cqown.go) or a group's (cqshare.go), the layout being a
// small strategy the core and the one teardown (teardown.go) call; the
// send side (send.go, sender) and the receive side (recv.go, receiver),
// each with the lock its methods take, the receive side posting over a
// receive queue of the connection's own or the device's shared one
// (recvq.go, Options.Receive). Lock order: the turn, the
// completion queue's pmu and pl, the sender's mu, the receiver's rmu; a
// part calls only the parts after it (docs/architecture.md, "Locks").
//
// The server names the RDMA endpoints it serves over the bootstrap before
// the hellos (route.go), so the address dialed need not belong to an RDMA
// device; the client picks an endpoint it reaches and spreads its
// connections over them.
//
// A server bounds the handshakes past the client's hello, each holding a
// queue pair, in all and per source address (gate.go).
//
// The package implements the transport contract and must not know about
// RPC or the TCP transport. Without cgo it still builds: every Dial and
// Listen then fails with an error wrapping transport.ErrNoDevice.
package rdma
