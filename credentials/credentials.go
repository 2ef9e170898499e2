package credentials

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// SecurityLevel is how well a connection protects what it carries.
type SecurityLevel int

// The levels, weakest first; only their order is meaningful.
const (
	// InvalidSecurityLevel is the zero value: the AuthInfo did not say.
	// CheckSecurityLevel lets it pass, as gRPC-go does for AuthInfos
	// written before levels existed.
	InvalidSecurityLevel SecurityLevel = iota
	// NoSecurity is a plaintext connection.
	NoSecurity
	// IntegrityOnly detects tampering but does not hide the bytes.
	IntegrityOnly
	// PrivacyAndIntegrity is TLS: tamper-evident and encrypted.
	PrivacyAndIntegrity
)

func (s SecurityLevel) String() string {
	switch s {
	case NoSecurity:
		return "NoSecurity"
	case IntegrityOnly:
		return "IntegrityOnly"
	case PrivacyAndIntegrity:
		return "PrivacyAndIntegrity"
	}
	return fmt.Sprintf("invalid SecurityLevel: %d", int(s))
}

// CommonAuthInfo is what every AuthInfo has; embed it.
type CommonAuthInfo struct {
	SecurityLevel SecurityLevel
}

// GetCommonAuthInfo returns c, so that an AuthInfo embedding it answers
// CheckSecurityLevel.
func (c CommonAuthInfo) GetCommonAuthInfo() CommonAuthInfo { return c }

// AuthInfo is what a handshake learned about the other end.
type AuthInfo interface {
	// AuthType names the kind: "tls", "insecure".
	AuthType() string
}

// ProtocolInfo describes TransportCredentials.
type ProtocolInfo struct {
	// SecurityProtocol is "tls" or "insecure".
	SecurityProtocol string
	// SecurityVersion is the least protocol version accepted ("1.2").
	SecurityVersion string
	// ServerName is the name a client checks the server's certificate
	// against when set (OverrideServerName), else "".
	ServerName string
}

// TransportCredentials secure connections. The transports call them: the
// client after it dials, the server after it accepts, both before any
// message; what they return replaces the raw connection.
type TransportCredentials interface {
	// ClientHandshake secures rawConn to the server at authority
	// ("kv.test:7070"; its host is checked against the certificate unless
	// a server name is set). It closes rawConn when it fails, and it gives
	// up when ctx ends.
	ClientHandshake(ctx context.Context, authority string, rawConn net.Conn) (net.Conn, AuthInfo, error)
	// ServerHandshake secures an accepted rawConn, closing it when it
	// fails. The caller bounds it with a deadline on rawConn, and runs it
	// outside its accept loop so one slow client holds up no other.
	ServerHandshake(rawConn net.Conn) (net.Conn, AuthInfo, error)
	// Info describes the credentials.
	Info() ProtocolInfo
	// Clone returns an independent copy.
	Clone() TransportCredentials
	// OverrideServerName sets the name a client checks the server's
	// certificate against. Deprecated in gRPC-go, kept for ported code:
	// prefer tls.Config.ServerName or Address.ServerName.
	OverrideServerName(string) error
}

// PerRPCCredentials add metadata (an authorization header) to every call.
type PerRPCCredentials interface {
	// GetRequestMetadata returns the metadata for one call; uri is the
	// service's URI ("https://kv.test/kv.KV"). A *status.Status error is
	// the call's status; the RPC layer makes any other error Unavailable,
	// as gRPC-go does. ctx carries the call's RequestInfo.
	GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error)
	// RequireTransportSecurity reports whether the metadata may only travel
	// over a connection of PrivacyAndIntegrity; a client refuses to be
	// built with these credentials over an insecure transport.
	RequireTransportSecurity() bool
}

// RequestInfo describes the call PerRPCCredentials are asked about.
type RequestInfo struct {
	// Method is the full method name, "/kv.KV/Get".
	Method string
	// AuthInfo is the connection's, from its handshake.
	AuthInfo AuthInfo
}

type requestInfoKey struct{}

// NewContextWithRequestInfo returns ctx carrying ri; the RPC layer calls it
// before GetRequestMetadata.
func NewContextWithRequestInfo(ctx context.Context, ri RequestInfo) context.Context {
	return context.WithValue(ctx, requestInfoKey{}, ri)
}

// RequestInfoFromContext returns the RequestInfo in ctx, if any.
func RequestInfoFromContext(ctx context.Context) (RequestInfo, bool) {
	ri, ok := ctx.Value(requestInfoKey{}).(RequestInfo)
	return ri, ok
}

// ErrInsufficientSecurity is what CheckSecurityLevel's errors match with
// errors.Is.
var ErrInsufficientSecurity = errors.New("the connection's security level is too low")

// CheckSecurityLevel returns nil if ai's connection is at least at level.
// An AuthInfo that does not embed CommonAuthInfo, or says nothing
// (InvalidSecurityLevel), passes, as in gRPC-go; a nil one does not.
func CheckSecurityLevel(ai AuthInfo, level SecurityLevel) error {
	if ai == nil {
		return fmt.Errorf("credentials: %w: no AuthInfo (no handshake) to check against %s", ErrInsufficientSecurity, level)
	}
	c, ok := ai.(interface{ GetCommonAuthInfo() CommonAuthInfo })
	if !ok {
		return nil
	}
	got := c.GetCommonAuthInfo().SecurityLevel
	if got != InvalidSecurityLevel && got < level {
		return fmt.Errorf("credentials: %w: %s connection, %s required", ErrInsufficientSecurity, got, level)
	}
	return nil
}
