// Package oauth provides PerRPCCredentials that send an OAuth 2 access
// token with every call, as the "authorization: Bearer <token>" metadata,
// in the shape of gRPC-go's credentials/oauth: TokenSource (a token source
// asked on every call, which may refresh and cache) and NewOauthAccess (one
// fixed token).
//
// They refuse to send a token over a connection that is not
// PrivacyAndIntegrity (TLS) unless AllowInsecure is set, and refuse an
// expired or empty token; both refusals are Unauthenticated status errors.
//
// Token and Source are golang.org/x/oauth2's, so code written for gRPC-go's
// package (oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(tok)})
// ports by changing the import.
package oauth
