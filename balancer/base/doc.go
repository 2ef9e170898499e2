// Package base builds the common kind of balancer from a PickerBuilder, as
// gRPC-go's balancer/base: one SubConn per distinct address, each connected
// and reconnected when it goes Idle, and a Picker built over the Ready ones
// whenever that set changes. round_robin is one; a weighted or a
// first-by-name policy is a PickerBuilder away. It knows only the balancer
// and resolver packages.
package base
