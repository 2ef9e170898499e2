// Package credentials authenticates the two ends of a connection and the
// calls made on it, in the shape of gRPC-go's credentials package:
//
//   - TransportCredentials secure a net.Conn before the transport uses it:
//     NewTLS (any *tls.Config, mutual TLS included), NewClientTLSFromFile,
//     NewServerTLSFromFile, NewClientTLSFromCert; insecure.NewCredentials
//     for none. A handshake yields an AuthInfo: TLSInfo carries the verified
//     tls.ConnectionState, peer certificates included.
//   - PerRPCCredentials add request metadata to each call (an OAuth token in
//     credentials/oauth), and may require a secure connection, judged by
//     the SecurityLevel of the connection's AuthInfo (CheckSecurityLevel).
//
// The TCP transport handshakes over its connection; the RDMA transport over
// its bootstrap TCP connection, so the queue-pair parameters travel inside
// TLS (TLSInfo.State.ExportKeyingMaterial can bind the queue pair to it).
// This package knows no transport and no RPC: they call it.
package credentials
