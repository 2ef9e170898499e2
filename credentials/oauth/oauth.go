package oauth

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/oauth2"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/status"
)

// Token is golang.org/x/oauth2's: an access token, its type ("" means
// "Bearer") and its expiry (zero: never).
type Token = oauth2.Token

// Source supplies tokens: golang.org/x/oauth2's TokenSource, so any of
// its sources (oauth2.StaticTokenSource, a config's, google's) serves.
type Source = oauth2.TokenSource

// SourceFunc is a function that is a Source.
type SourceFunc func() (*Token, error)

// Token calls f.
func (f SourceFunc) Token() (*Token, error) { return f() }

// StaticSource always returns t: oauth2.StaticTokenSource.
func StaticSource(t *Token) Source { return oauth2.StaticTokenSource(t) }

// TokenSource is PerRPCCredentials asking its oauth2.TokenSource for the
// token of each call, as gRPC-go's: oauth.TokenSource{TokenSource:
// oauth2.StaticTokenSource(tok)}.
type TokenSource struct {
	oauth2.TokenSource
	// AllowInsecure lets the token travel over a connection that is not
	// TLS (a test, or a network secured otherwise). Off, such a call fails
	// with Unauthenticated, and a client refuses to be built with these
	// credentials over an insecure transport.
	AllowInsecure bool
}

// NewOauthAccess returns PerRPCCredentials sending token with every call,
// over TLS only.
func NewOauthAccess(token *Token) credentials.PerRPCCredentials {
	return TokenSource{TokenSource: StaticSource(token)}
}

// GetRequestMetadata returns the authorization metadata for one call, or an
// Unauthenticated status error if the connection (the RequestInfo in ctx)
// is not secure enough or the token is empty or expired. An error of the
// Source is returned wrapped, a status error as it is.
func (ts TokenSource) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if !ts.AllowInsecure {
		ri, _ := credentials.RequestInfoFromContext(ctx)
		if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
			return nil, status.ErrorWithCause(codes.Unauthenticated,
				"oauth: refusing to send a token over a connection that is not secure: "+err.Error(), err)
		}
	}
	if ts.TokenSource == nil {
		return nil, status.Error(codes.Unauthenticated, "oauth: no token source")
	}
	tok, err := ts.Token()
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, fmt.Errorf("oauth: getting a token: %w", err)
	}
	switch {
	case tok == nil || tok.AccessToken == "":
		return nil, status.Error(codes.Unauthenticated, "oauth: the token source returned an empty token")
	case !tok.Expiry.IsZero() && !time.Now().Before(tok.Expiry):
		return nil, status.Errorf(codes.Unauthenticated, "oauth: the token expired at %s", tok.Expiry.UTC().Format(time.RFC3339))
	}
	return map[string]string{"authorization": tok.Type() + " " + tok.AccessToken}, nil
}

// RequireTransportSecurity is true unless AllowInsecure.
func (ts TokenSource) RequireTransportSecurity() bool { return !ts.AllowInsecure }
