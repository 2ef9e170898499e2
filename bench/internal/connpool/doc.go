// Package connpool keeps idle connections of a benchmark peer that
// carries one call at a time per connection (the raw TCP ping-pong, drpc),
// so that conc callers end up with conc connections, each dialed once and
// reused.
package connpool
