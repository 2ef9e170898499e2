// Package transporttest is the conformance suite every rdmarpc transport
// must pass: ordering, exact message boundaries from 0 B to 16 MiB, many
// concurrent senders and receivers, backpressure with bounded memory, close
// semantics on both sides, context cancellation, and no goroutine leaks.
//
// A transport's own test calls Run with a Config. The suite knows only the
// transport package's interfaces, never a concrete transport.
package transporttest
