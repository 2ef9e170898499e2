// Package ctxkey holds the context keys of metadata's incoming
// metadata and peer's peer, so that the server can answer both, and
// its own call, from one context value per call instead of one each.
package ctxkey
