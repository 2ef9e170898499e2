package rpc

import (
	"strings"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/metadata"
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
//   - "user-agent": the client's, "rdmarpc-go/" + Version after the
//     WithUserAgent prefix when there is one. It is the connection's, as in
//     gRPC-go (a caller's "user-agent" metadata is not sent): the client
//     sends it with a connection's calls until one of them has succeeded,
//     and the server gives the last one it received on the connection to
//     every later call (docs/wire.md, "Metadata").
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
// none, else decoded for this call alone) with ":authority",
// "content-type" and, unless the request carried its own, ua (the
// connection's user-agent, from userAgent).
func (l *serverLink) incomingMD(md metadata.MD, ua string) metadata.MD {
	if md == nil {
		md = make(metadata.MD, 3)
	}
	vals := []string{l.authority, contentType, ua} // one allocation for all
	md[authorityKey] = vals[0:1:1]
	md["content-type"] = vals[1:2:2]
	if _, ok := md[userAgentKey]; !ok && ua != "" {
		md[userAgentKey] = vals[2:3:3]
	}
	return md
}

// userAgent is the user-agent of a request whose decoded metadata is md:
// its own, which the connection then remembers, else the connection's
// last. The reader's.
func (l *serverLink) userAgent(md metadata.MD) string {
	if v := md[userAgentKey]; len(v) > 0 {
		l.ua = v[len(v)-1]
	}
	return l.ua
}

// acceptEncoding is the grpc-accept-encoding of a request whose decoded
// metadata is md: its own, which the connection then remembers (a client
// sends it with its user-agent), else the connection's last. The
// reader's.
func (l *serverLink) acceptEncoding(md metadata.MD) string {
	if v := md[acceptEncodingKey]; len(v) > 0 {
		l.accept = strings.Join(v, ",")
	}
	return l.accept
}

// outgoingMD is the metadata a call sends before the link adds its part
// (withUserAgent): md, the caller's (a copy) or nil, without a
// "user-agent" of the caller's, which gRPC-go does not send either.
func outgoingMD(md metadata.MD) metadata.MD {
	delete(md, userAgentKey)
	return md
}

// connMD is what a client sends with a connection's calls until one has
// succeeded (withUserAgent): its user-agent (prefix: WithUserAgent's) and,
// when compressors are registered, their names as grpc-accept-encoding,
// which the server remembers for the connection as it does the
// user-agent, so that a handler may answer compressed
// (SetSendCompressor).
func connMD(prefix string) metadata.MD {
	md := metadata.Pairs(userAgentKey, joinUserAgent(prefix))
	if names := encoding.RegisteredCompressorNames(); len(names) > 0 {
		md[acceptEncodingKey] = []string{strings.Join(names, ",")}
	}
	return md
}

// withUserAgent is md with the client's user-agent and
// grpc-accept-encoding (connMD), until a call that carried them has
// succeeded on l: the server has them then, and applies them to every
// later request on the connection.
func (l *clientLink) withUserAgent(md metadata.MD) metadata.MD {
	if l.uaKnown.Load() {
		return md
	}
	if md == nil {
		return l.cc.uaMD // read only: the encoder never changes it
	}
	md[userAgentKey] = l.cc.uaMD[userAgentKey]
	if v, ok := l.cc.uaMD[acceptEncodingKey]; ok {
		if _, own := md[acceptEncodingKey]; !own {
			md[acceptEncodingKey] = v
		}
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

// withContentType is md, response headers that came in a RESPONSE or
// HEADERS frame (the call's own map, or nil), with "content-type" as
// gRPC-go's client reports it: rdmarpc's frames do not carry it.
func withContentType(md metadata.MD) metadata.MD {
	if _, ok := md["content-type"]; ok {
		return md
	}
	if md == nil {
		md = make(metadata.MD, 1)
	}
	md["content-type"] = contentTypeValues
	return md
}

// contentTypeValues is the value withContentType gives, shared by every
// call: one allocation fewer per stream. Its capacity is its length, so an
// append to it copies.
var contentTypeValues = []string{contentType}[:1:1]
