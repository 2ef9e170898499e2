package rpc

import (
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/rpc/metadata"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Version is rdmarpc's version, as grpc.Version is gRPC-go's; the client's
// user-agent names it.
const Version = "0.2.0-dev"

// What a handler finds in its incoming metadata besides what the client
// sent, as a gRPC-go handler does (gRPC-go's interceptors that check
// metadata.FromIncomingContext's ok answer Unauthenticated, not
// InvalidArgument, to a call without a token):
//
//   - ":authority": the TLS server name the client asked for, else the
//     address the connection arrived at (rdmarpc's frames carry no
//     authority of their own);
//   - "content-type": "application/grpc", what gRPC-go reports, so code
//     that checks it keeps working;
//   - "user-agent": sent by the client with every call, "rdmarpc-go/"
//   - Version, after the WithUserAgent prefix when there is one.
const (
	authorityKey = ":authority"
	contentType  = "application/grpc"
	userAgentKey = "user-agent"
	userAgent    = "rdmarpc-go/" + Version
)

// authInfo is what tc's transport credentials verified, nil without any.
func authInfo(tc transport.Conn) credentials.AuthInfo {
	if s, ok := tc.(transport.Secured); ok {
		return s.AuthInfo()
	}
	return nil
}

// connAuthority is the ":authority" of the calls on tc (see above).
func connAuthority(tc transport.Conn, ai credentials.AuthInfo) string {
	if ti, ok := ai.(credentials.TLSInfo); ok && ti.State.ServerName != "" {
		return ti.State.ServerName
	}
	if a := tc.LocalAddr(); a != nil {
		return a.String()
	}
	return ""
}

// incomingMD completes a request's metadata md (nil when the client sent
// none, else decoded for this call alone) with ":authority" and
// "content-type".
func (l *serverLink) incomingMD(md metadata.MD) metadata.MD {
	if md == nil {
		md = make(metadata.MD, 3)
	}
	vals := []string{l.authority, contentType} // one allocation for both
	md[authorityKey] = vals[0:1:1]
	md["content-type"] = vals[1:2:2]
	return md
}

// outgoingMD is the metadata a call sends: md (the caller's, a copy, or
// nil) with the client's user-agent unless the caller set one.
func (cc *ClientConn) outgoingMD(md metadata.MD) metadata.MD {
	if md == nil {
		return cc.uaMD // read only: the encoder never changes it
	}
	if _, ok := md[userAgentKey]; !ok {
		md[userAgentKey] = cc.uaMD[userAgentKey]
	}
	return md
}

// joinUserAgent is the user-agent of a client whose WithUserAgent is
// prefix.
func joinUserAgent(prefix string) string {
	if prefix == "" {
		return userAgent
	}
	return prefix + " " + userAgent
}
