// Package credit is the RDMA transport's flow-control engine, in plain Go
// with no cgo so that its rules can be tested exhaustively: a Send is posted
// only with a credit, one credit per receive the peer is known to have posted,
// so a Send never meets an empty receive queue (no RNR).
//
// The protocol, for one direction (A sends to B):
//
//   - B posts R data receives plus Extra control receives, and tells A R.
//   - A holds a Window of credits, starting at R. Every data message (each
//     fragment) takes one; with none, A waits. A never posts without one.
//   - B's Ledger counts the data messages that arrived and were not yet
//     returned. When B re-posts a data receive (its user released the
//     message), it owes A one credit. Owed credits ride on every message B
//     sends (piggybacked), or, once at least Threshold(R) are owed, go in a
//     credit-only control message.
//   - Control messages take no credit. They are bounded by construction: each
//     returns at least Threshold(R) = ceil(R/2) credits, and B can never have
//     more than R credits' worth of returns that A has not yet seen, so at
//     most Extra = 2 control messages are ever waiting in A's receive queue.
//   - A grant that would give A more credits than R, or a data message B gets
//     while all R credits are already out, is a protocol violation: the
//     connection is closed.
//
// Neither side waits for the other to make progress: B's returns depend only
// on its user releasing messages, never on B holding credits itself, so two
// sides sending flat out with tiny pools cannot deadlock.
//
// With a shared receive pool (one receive queue per device, docs/rdma.md
// "Shared receive queue"), the R of a connection is a window that grows and
// shrinks, and the Pool counts the buffers behind all of them:
//
//   - A connection joins with a guaranteed window g: the pool commits g +
//     Extra buffers to it. The pool never commits more buffers than it has,
//     and every buffer is posted except those held by a message, so the
//     posted buffers cover what every peer may still send (the invariant and
//     its proof are in docs/rdma.md; TestLending checks it at every step).
//   - When a data message uses the last credit the peer holds (Exhausted),
//     the receiver lends up to as many again: it commits them from the pool
//     first (growing the pool when short), then tells the peer in the 12-bit
//     lend field of its next return (Ledger.Lend, TakeLend; Window.Lend).
//   - An idle sender gives lent credits back in a give-back message, which
//     takes a credit itself (Window.GiveBack; Ledger.TakeBack); the receiver
//     releases them to the pool, with any lend the peer was not yet told of
//     (withdrawn: its news might never come).
//
// The types are not safe for concurrent use: the connection guards them.
// This package must not know about verbs, buffers or connections.
package credit
