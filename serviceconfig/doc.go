// Package serviceconfig holds the types a balancer's parsed configuration
// is given as, at gRPC-go's path: a balancer's ConfigParser returns a
// LoadBalancingConfig, which the ClientConn hands back to the balancer in
// balancer.ClientConnState. It knows nothing of RPC, resolving or
// balancing itself.
package serviceconfig
