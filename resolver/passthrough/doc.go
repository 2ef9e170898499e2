// Package passthrough registers the "passthrough" resolver: the target's
// endpoint is the one address, handed to the transport unresolved
// ("passthrough:///kv.prod:7070" dials "kv.prod:7070", whose name the dialer
// looks up itself). Targets of the form "tcp://host:port" resolve through it.
package passthrough
