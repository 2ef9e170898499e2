// Package pemfile is a certprovider.Provider that watches PEM files: an
// identity certificate chain with its key, and trusted roots. It reads them
// when created and again every RefreshDuration, and hands out what it read
// last, so that rewriting the files (a renewed certificate, a rotated CA)
// changes the certificates of the next handshakes, as gRPC-go's package of
// the same path does.
//
// A read that fails (a file missing, a key that does not match the
// certificate, as while the two are rewritten one after the other) keeps
// the material read before. Each provider has one goroutine, the watcher,
// which Close stops and waits for.
package pemfile
