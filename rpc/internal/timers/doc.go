// Package timers runs the RPC layer's connection timers (keepalive, the
// server's response watch, MaxConnectionIdle/Age) on one goroutine per
// process instead of a timer goroutine per connection, so an idle
// connection costs no goroutine and its timers cost one heap entry each.
//
// Timers are coarse: a timer fires no earlier than asked, and up to 1/32
// of its duration later (at most about a second), so that timers that fall
// due close together are run by one wake-up. Callbacks run one at a time on
// the shared goroutine and must not block: a callback that has slow work to
// do (closing a connection) starts a goroutine its owner waits for.
//
// The goroutine runs only while a timer is armed; it exits when the last
// one fires or is stopped.
package timers
