// Package roundrobin is the round_robin policy, as gRPC-go's: one
// connection per distinct address, every one kept connected, and calls
// spread over the Ready ones in turn. Importing it registers it; the rpc
// package does.
// It knows only the balancer package; the rpc package implements the
// ClientConn and SubConns it is given.
package roundrobin
