// Package verbs is a small, safe cgo binding to libibverbs: just what
// rdmarpc's RDMA transport needs to run two-sided verbs (Send, Send with
// immediate, Recv) on reliable-connected queue pairs.
//
// It must not know about rdmarpc's protocol (handshake, credits, framing):
// the transport in transport/rdma builds that on top.
//
// # Objects and ownership
//
//	Context (an opened device)
//	├── CompChannel ── CQ ─┐
//	├── CQ ────────────────┤ used by
//	└── PD ─┬── MR         │
//	        └── QP ◄───────┘
//
// Every object owns one C handle and frees it exactly once. Close them in
// reverse order of creation: QPs, then CQs, then completion channels; MRs
// and QPs before their PD; everything before the Context. A Close that would
// free something still in use is refused with an error wrapping
// syscall.EBUSY and the object stays open (retry after closing its
// dependants). The one exception is CompChannel.Close, which always stops
// waiters at once and destroys the channel as soon as its last CQ is
// closed.
//
// Close is idempotent. Any other call on a closed object returns an error
// wrapping ErrClosed; it never crashes, even when Close races with it. Each
// object has its own lock (the data path — PostSend, PostRecv, Poll — only
// takes read locks of the objects it touches; there is no global lock).
//
// # Memory
//
// Registered memory (PD.Register) is mapped with mmap, outside the Go heap,
// so the device can hold on to it; Go memory is only ever passed to C for
// the duration of one call. MR.Bytes must not be used after MR.Close.
//
// # Crossing into C
//
// Each data-path call is one cgo crossing, whatever the batch size:
// PostSend and PostRecv translate a whole batch of work requests and post
// it as one chain; Poll copies up to len(wcs) completions into a compact Go
// struct. Waiting for a completion event (CompChannel.Wait) or an async
// event (Context.AsyncEvent) parks the goroutine in Go's netpoller, never an
// OS thread in C.
//
// # Policy built in
//
// QPs grant peers no remote access (no RDMA Read/Write into our memory)
// unless created with QPConfig.RemoteRead, which allows RDMA Read only, and
// only of the MRs registered with RegisterRemoteRead, or of the range of an
// MR registered with RegisterForWindows that a type 2 memory window (AllocMW)
// is bound to, under the window's key, until it is invalidated (the others
// are local-only whatever the QP allows; windows grant read only); and
// rnr_retry is always 0: a Send that finds no posted receive fails the
// connection with IBV_WC_RNR_RETRY_EXC_ERR instead of being retried, because
// rdmarpc's credits make that impossible and tests must see it if it happens.
//
// # Building and running without libibverbs
//
// The binary does not link libibverbs: shim.c loads libibverbs.so.1 with
// dlopen the first time Devices or Open is called and looks up the exported
// functions it needs. The data path (PostSend, PostRecv, Poll, ReqNotify)
// does not use those pointers: the verbs it calls are static inline
// functions of <infiniband/verbs.h> that jump straight into the provider,
// compiled into shim.h's functions, so each call is still one cgo crossing
// and no more. The header is needed at build time for those inline
// functions and for the structs' layout; the library's link-time file
// (libibverbs.so, in libibverbs-dev) is not needed at all.
//
// So one binary runs on machines with and without RDMA: without the library
// Devices and Open fail with an error matching ErrNotSupported that says what
// to install, and the transport treats that as "no device" (auto:// serves
// TCP). And the package builds where gcc is installed but libibverbs-dev is
// not: shim.h tests __has_include(<infiniband/verbs.h>) and, without it,
// declares its handles as incomplete types and compiles a stub whose loader
// fails with an error saying to install libibverbs-dev and rebuild (with
// go build -a: Go's build cache does not notice a new system header). Build
// tags could not do this: go build cannot select files by what is installed.
// scripts/check-noverbs.sh (make build) checks both.
//
// Without Linux or cgo the package still builds (stub.go); every
// constructor then fails with an error wrapping ErrNotSupported.
package verbs
