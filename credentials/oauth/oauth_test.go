package oauth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
	"github.com/rdmarpc/rdmarpc/credentials/oauth"
	"github.com/rdmarpc/rdmarpc/status"
)

// over returns a call's context on a connection with the AuthInfo of creds'
// handshake (TLS: PrivacyAndIntegrity; insecure: NoSecurity).
func over(t *testing.T, secure bool) context.Context {
	var info credentials.AuthInfo = credentials.TLSInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	if !secure {
		var err error
		_, info, err = insecure.NewCredentials().ClientHandshake(context.Background(), "kv.test:7070", nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	return credentials.NewContextWithRequestInfo(context.Background(), credentials.RequestInfo{Method: "/kv.KV/Get", AuthInfo: info})
}

func TestTokenOverTLS(t *testing.T) {
	creds := oauth.NewOauthAccess(&oauth.Token{AccessToken: "s3cr3t", Expiry: time.Now().Add(time.Hour)})
	if !creds.RequireTransportSecurity() {
		t.Fatal("a token does not require transport security")
	}
	md, err := creds.GetRequestMetadata(over(t, true), "https://kv.test/kv.KV")
	if err != nil {
		t.Fatal(err)
	}
	if md["authorization"] != "Bearer s3cr3t" || len(md) != 1 {
		t.Fatalf("metadata %v", md)
	}
}

// A token is not sent over a plaintext connection, nor over one whose
// security the RPC layer did not say, unless allowed.
func TestTokenRefusedOverInsecure(t *testing.T) {
	creds := oauth.NewOauthAccess(&oauth.Token{AccessToken: "s3cr3t"})
	for name, ctx := range map[string]context.Context{"insecure": over(t, false), "no RequestInfo": context.Background()} {
		md, err := creds.GetRequestMetadata(ctx)
		if status.Code(err) != codes.Unauthenticated || !errors.Is(err, credentials.ErrInsufficientSecurity) || md != nil {
			t.Errorf("%s: %v, %v: want Unauthenticated for insufficient security", name, md, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
	allowed := oauth.TokenSource{TokenSource: oauth.StaticSource(&oauth.Token{AccessToken: "s3cr3t"}), AllowInsecure: true}
	if allowed.RequireTransportSecurity() {
		t.Fatal("AllowInsecure still requires transport security")
	}
	if md, err := allowed.GetRequestMetadata(over(t, false)); err != nil || md["authorization"] != "Bearer s3cr3t" {
		t.Fatalf("AllowInsecure over insecure: %v, %v", md, err)
	}
}

// An expired or empty token is refused with Unauthenticated (issue 11
// item 9), before anything is sent.
func TestExpiredTokenIsUnauthenticated(t *testing.T) {
	for _, tc := range []struct {
		name string
		tok  *oauth.Token
		want string
	}{
		{"expired", &oauth.Token{AccessToken: "old", Expiry: time.Now().Add(-time.Hour)}, "expired"},
		{"empty", &oauth.Token{}, "empty token"},
		{"nil", nil, "empty token"},
	} {
		creds := oauth.TokenSource{TokenSource: oauth.StaticSource(tc.tok)}
		md, err := creds.GetRequestMetadata(over(t, true))
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) || md != nil {
			t.Errorf("%s: %v, %v: want Unauthenticated saying %q", tc.name, md, err, tc.want)
		}
	}
}

// The source is asked on every call, so a refreshing source's new token is
// used; its errors come back wrapped, a status as it is.
func TestTokenSourceIsAskedEveryCall(t *testing.T) {
	n := 0
	fail := errors.New("token endpoint down")
	src := oauth.SourceFunc(func() (*oauth.Token, error) {
		n++
		switch n {
		case 1:
			return &oauth.Token{AccessToken: "one", TokenType: "bearer"}, nil
		case 2:
			return &oauth.Token{AccessToken: "two", TokenType: "mac"}, nil
		case 3:
			return nil, fail
		}
		return nil, status.Error(codes.PermissionDenied, "revoked")
	})
	creds := oauth.TokenSource{TokenSource: src}
	for _, want := range []string{"Bearer one", "MAC two"} {
		md, err := creds.GetRequestMetadata(over(t, true))
		if err != nil || md["authorization"] != want {
			t.Fatalf("metadata %v, %v, want %q", md, err, want)
		}
	}
	if _, err := creds.GetRequestMetadata(over(t, true)); !errors.Is(err, fail) {
		t.Fatalf("source failure: %v", err)
	}
	if _, err := creds.GetRequestMetadata(over(t, true)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("source status: %v", err)
	}
}
