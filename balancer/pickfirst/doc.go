// Package pickfirst is the pick_first policy, the default: one connection
// at a time, to the first of the resolver's addresses that answers (tried
// in order, 250 ms apart, as gRFC A61's Happy Eyeballs), and every call on
// it. A connection that breaks is made again at the next call; when the
// resolver drops the address in use, it moves to the others at once.
// Importing it registers it; the rpc package does.
// It knows only the balancer package; the rpc package implements the
// ClientConn and SubConns it is given.
package pickfirst
