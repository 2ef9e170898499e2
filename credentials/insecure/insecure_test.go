package insecure_test

import (
	"context"
	"net"
	"testing"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
)

// The connection is handed back as it is, and the AuthInfo says so.
func TestInsecureLeavesTheConnection(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	creds := insecure.NewCredentials()
	conn, info, err := creds.ClientHandshake(context.Background(), "kv.test:7070", a)
	if err != nil || conn != a {
		t.Fatalf("client: %v, %v", conn, err)
	}
	if info.AuthType() != "insecure" {
		t.Fatalf("AuthType %q", info.AuthType())
	}
	if err := credentials.CheckSecurityLevel(info, credentials.PrivacyAndIntegrity); err == nil {
		t.Fatal("an insecure connection passed for PrivacyAndIntegrity")
	}
	conn, _, err = creds.ServerHandshake(b)
	if err != nil || conn != b {
		t.Fatalf("server: %v, %v", conn, err)
	}
	if p := creds.Clone().Info(); p.SecurityProtocol != "insecure" {
		t.Fatalf("Info %+v", p)
	}
}
