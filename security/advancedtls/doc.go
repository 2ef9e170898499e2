// Package advancedtls is TLS transport credentials with reloadable
// certificates, custom verification and certificate revocation, in the
// shape of gRPC-go's security/advancedtls, for programs ported from it:
//
//   - identity and roots come from fixed certificates, callbacks, or a
//     certprovider.Provider (pemfile watches files), asked again on every
//     handshake, so rotated certificates need no restart;
//   - VerificationType chooses certificate and host checks, certificate
//     only, or none; AdditionalPeerVerification then sees the peer's chains
//     (and, on a client, the authority it dialed) and may refuse it;
//   - RevocationOptions checks every certificate of the verified chain
//     against the CRLs of a CRLProvider (StaticCRLProvider, or
//     FileWatcherCRLProvider reading a directory).
//
// The handshake itself is credentials.NewTLS's: the same ALPN ("rdmarpc",
// and "h2" for gRPC clients on a server), the same credentials.TLSInfo, so
// the tcp transport serves gRPC clients with it and the rdma transport binds
// its queue pairs to the TLS session of the bootstrap as it does with
// credentials.NewTLS.
//
// Not here: CRL distribution-point and delta-CRL processing beyond refusing
// delta CRLs, and gRPC-go's deprecated RootDir lookup of CRLs.
package advancedtls
