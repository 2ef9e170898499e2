// Package connectivity names the states of a client connection, as
// google.golang.org/grpc/connectivity does: a ClientConn (and each of its
// connections to one backend) is Idle, Connecting, Ready,
// TransientFailure or Shutdown.
package connectivity
