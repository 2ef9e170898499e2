// Package keepalive holds the keepalive and connection-management
// parameters in gRPC-go's shape (keepalive.ClientParameters,
// keepalive.ServerParameters, keepalive.EnforcementPolicy), so a gRPC-go
// program's options port by changing the import. The rpc package applies
// them (rpc.WithKeepaliveParams, rpc.KeepaliveParams,
// rpc.KeepaliveEnforcementPolicy); this package is only the types.
package keepalive
