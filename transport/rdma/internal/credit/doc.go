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
// The types are not safe for concurrent use: the connection guards them.
// This package must not know about verbs, buffers or connections.
package credit
