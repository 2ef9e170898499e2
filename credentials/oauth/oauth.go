package oauth

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/status"
)

// Token is an OAuth 2 access token.
type Token struct {
	AccessToken string
	// TokenType is the authorization scheme; "" means "Bearer".
	TokenType string
	// Expiry is when the token stops being valid; zero means never.
	Expiry time.Time
}

// Type is the scheme of the authorization header: "Bearer", "MAC",
// "Basic", or TokenType as it is.
func (t *Token) Type() string {
	for _, s := range []string{"Bearer", "MAC", "Basic"} {
		if strings.EqualFold(t.TokenType, s) {
			return s
		}
	}
	if t.TokenType != "" {
		return t.TokenType
	}
	return "Bearer"
}

// Source supplies tokens, as oauth2.TokenSource does.
type Source interface {
	Token() (*Token, error)
}

// SourceFunc is a function that is a Source.
type SourceFunc func() (*Token, error)

// Token calls f.
func (f SourceFunc) Token() (*Token, error) { return f() }

// StaticSource always returns t.
func StaticSource(t *Token) Source { return SourceFunc(func() (*Token, error) { return t, nil }) }

// TokenSource is PerRPCCredentials asking Source for the token of each call.
type TokenSource struct {
	Source
	// AllowInsecure lets the token travel over a connection that is not
	// TLS (a test, or a network secured otherwise). Off, such a call fails
	// with Unauthenticated, and a client refuses to be built with these
	// credentials over an insecure transport.
	AllowInsecure bool
}

// NewOauthAccess returns PerRPCCredentials sending token with every call,
// over TLS only.
func NewOauthAccess(token *Token) credentials.PerRPCCredentials {
	return TokenSource{Source: StaticSource(token)}
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
	if ts.Source == nil {
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
