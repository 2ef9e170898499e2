// Package certprovider is the seam between TLS credentials that reload
// their key material and the sources of that material, in the shape of
// gRPC-go's package of the same path: a Provider hands out the current
// KeyMaterial (identity certificates, trusted roots) on every handshake, so
// a certificate rewritten on disk or fetched anew is used by the next
// connection without restarting anything. Distributor is the building block
// of providers: it holds the latest material and makes readers wait for the
// first.
//
// pemfile is the provider that watches PEM files; security/advancedtls
// builds credentials on providers. gRPC-go's registry of named provider
// plugins (Register, GetProvider, BuildableConfig), which only its xDS
// configuration uses, and SPIFFE bundle maps are not here.
//
// This package knows no transport and no RPC.
package certprovider
