// Package unix registers the "unix" resolver of gRPC's naming document: a
// unix domain socket path, relative or absolute, served by the TCP
// transport's framing over a stream socket:
//
//	unix:relative/kv.sock
//	unix:/run/kv.sock
//	unix:///run/kv.sock
//
// and gRPC's "unix-abstract" one, a socket in Linux's abstract namespace:
// unix-abstract:kv names the socket Go spells "@kv".
//
// The address it reports asks for the "unix" transport scheme; the TCP
// transport is expected to register that scheme for unix sockets.
package unix
