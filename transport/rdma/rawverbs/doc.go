// Package rawverbs is the least of the project's verbs binding that a
// measurement of raw RDMA needs: open a device, make endpoints on it (a
// reliable-connected queue pair with its own completion queue and one
// registered region of fixed-size buffers), connect two of them, and
// ping-pong messages between them, polling busily or sleeping on a
// completion channel. bench/cmd/ladder measures with it the floor under
// the transport's figures.
//
// The binding itself (transport/rdma/internal/verbs) stays internal: this
// package exposes none of its types, only what the ladder's verbs rungs
// use, so the binding can change without the bench module noticing. It is
// not a way to build protocols on verbs; the transport (transport/rdma) is
// the project's one user of the binding's full surface.
//
// Without cgo, or without libibverbs at run time, Open fails: the rest
// needs an open Device.
package rawverbs
