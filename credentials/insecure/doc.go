// Package insecure provides TransportCredentials that do nothing: the
// connection stays plaintext and its AuthInfo says NoSecurity, so per-RPC
// credentials that require transport security refuse to run over it. As in
// gRPC-go, it exists so that choosing no security is explicit.
package insecure
