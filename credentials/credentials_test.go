package credentials_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
)

type legacyInfo struct{}

func (legacyInfo) AuthType() string { return "legacy" }

func TestCheckSecurityLevel(t *testing.T) {
	_, insecureInfo, err := insecure.NewCredentials().ClientHandshake(context.Background(), "kv.test:7070", nil)
	if err != nil {
		t.Fatal(err)
	}
	tlsInfo := credentials.TLSInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	for _, tc := range []struct {
		name  string
		info  credentials.AuthInfo
		level credentials.SecurityLevel
		ok    bool
	}{
		{"tls for privacy", tlsInfo, credentials.PrivacyAndIntegrity, true},
		{"tls for integrity", tlsInfo, credentials.IntegrityOnly, true},
		{"insecure for privacy", insecureInfo, credentials.PrivacyAndIntegrity, false},
		{"insecure for none", insecureInfo, credentials.NoSecurity, true},
		{"no level said", credentials.TLSInfo{}, credentials.PrivacyAndIntegrity, true},
		{"no CommonAuthInfo", legacyInfo{}, credentials.PrivacyAndIntegrity, true},
		{"no AuthInfo", nil, credentials.NoSecurity, false},
	} {
		err := credentials.CheckSecurityLevel(tc.info, tc.level)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, credentials.ErrInsufficientSecurity) {
			t.Errorf("%s: %v is not ErrInsufficientSecurity", tc.name, err)
		}
	}
}

func TestRequestInfoContext(t *testing.T) {
	if _, ok := credentials.RequestInfoFromContext(context.Background()); ok {
		t.Fatal("RequestInfo in an empty context")
	}
	ri := credentials.RequestInfo{Method: "/kv.KV/Get", AuthInfo: legacyInfo{}}
	got, ok := credentials.RequestInfoFromContext(credentials.NewContextWithRequestInfo(context.Background(), ri))
	if !ok || got != ri {
		t.Fatalf("got %+v, %v", got, ok)
	}
}

func TestSecurityLevelString(t *testing.T) {
	if s := credentials.PrivacyAndIntegrity.String(); s != "PrivacyAndIntegrity" {
		t.Fatal(s)
	}
	if s := credentials.SecurityLevel(42).String(); s != "invalid SecurityLevel: 42" {
		t.Fatal(s)
	}
}
