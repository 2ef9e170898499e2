// Package balancer is the seam between a ClientConn and the policy that
// chooses a backend for each call, in gRPC-go's shape and names: a Builder,
// registered by name, builds a Balancer for a ClientConn; the Balancer is
// told the resolver's addresses (UpdateClientConnState), makes one SubConn
// per backend it wants connected, follows their states (the StateListener
// it gave NewSubConn) and publishes a Picker with the ClientConn's state
// (ClientConn.UpdateState); every call asks the current Picker for a
// SubConn.
//
// The service config names the policy (loadBalancingConfig, or the older
// loadBalancingPolicy); pick_first (balancer/pickfirst) is the default and
// round_robin (balancer/roundrobin) the other built-in one. A balancer of
// one's own is registered with Register before the ClientConn is made and
// named in the service config; balancer/base builds the common kind (one
// SubConn per address, a Picker over the Ready ones) from a PickerBuilder.
//
// The ClientConn calls a Balancer's methods, and the StateListeners, one
// at a time, never from a call's goroutine; Pick is called by calls, side
// by side. This package knows the resolver's types, and nothing of RPC,
// links or transports: the rpc package implements ClientConn and SubConn.
package balancer
