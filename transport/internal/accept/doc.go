// Package accept is the listener the stream-bootstrapped transports share:
// it accepts sockets in a goroutine of its own, retrying temporary errors
// (out of descriptors or memory) with backoff instead of giving up, runs
// each socket's handshake in a goroutine of its own (so a slow or hostile
// peer holds up nobody), optionally bounds how many connections it holds,
// logs what it refuses through a replaceable, rate-limited Log, and hands
// handshaken connections to Accept. Close stops it all and waits.
//
// It knows the transport contract and net.Listener, and nothing of any
// transport's handshake or wire format.
package accept
