package insecure

import (
	"context"
	"net"

	"github.com/rdmarpc/rdmarpc/credentials"
)

// NewCredentials returns credentials that leave connections as they are.
func NewCredentials() credentials.TransportCredentials { return insecureTC{} }

type insecureTC struct{}

func (insecureTC) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, info{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (insecureTC) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, info{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (insecureTC) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (insecureTC) Clone() credentials.TransportCredentials { return insecureTC{} }

func (insecureTC) OverrideServerName(string) error { return nil }

// info is the AuthInfo of an insecure connection.
type info struct {
	credentials.CommonAuthInfo
}

func (info) AuthType() string { return "insecure" }
