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
// golang.org/x/oauth2 is not a dependency: Token has the fields of
// oauth2.Token that matter here, and an oauth2.TokenSource adapts with a
// SourceFunc of three lines.
package oauth
