package rpc

import (
	"strings"
	"time"

	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/transport"
)

// What channelz (package channelz) is told: every ClientConn is a channel,
// each of its subConns a subchannel, every Server a server, and every link
// and listener a socket. Each is registered when made and removed when it
// closes; calls count with atomic adds, and states are read only when
// someone asks.

// connScheme names the transport of tc: rdma's addresses are its TCP
// bootstrap's, so a connection that says its scheme is believed first.
func connScheme(tc transport.Conn) string {
	if s, ok := tc.(interface{ Scheme() string }); ok {
		return s.Scheme()
	}
	if a := tc.LocalAddr(); a != nil {
		return a.Network()
	}
	return ""
}

// socketInfo is what channelz keeps of link l over tc, of the given
// transport ("" for tc's own), secured by ai (nil: none). counters are
// the transport's (or listener's), nil when it keeps none: then the
// connection's own, if it has some.
func socketInfo(tc transport.Conn, scheme string, ai credentials.AuthInfo, counters transport.Counters, l *conn.Link) channelz.SocketInfo {
	if scheme == "" {
		scheme = connScheme(tc)
	}
	if counters == nil {
		counters, _ = tc.(transport.Counters)
	}
	info := channelz.SocketInfo{Local: tc.LocalAddr(), Remote: tc.RemoteAddr(), Transport: scheme, AuthInfo: ai, KeepalivesSent: l.PingsSent, LastReceived: l.LastFrame}
	if counters != nil {
		info.Counters = counters.Counters
	}
	return info
}

// chzState reads the subConn's connectivity state for channelz.
func (s *subConn) chzState() connectivity.State {
	s.cc.mu.Lock()
	defer s.cc.mu.Unlock()
	return s.state
}

// addrsName names a subchannel by its addresses.
func addrsName(addrs []resolver.Address) string {
	names := make([]string, len(addrs))
	for i, a := range addrs {
		names[i] = a.Addr
	}
	return strings.Join(names, ",")
}

// attemptStarted counts a call or stream begun on l, on its subchannel and
// socket.
func (l *clientLink) attemptStarted() {
	now := time.Now().UnixNano()
	l.sc.chz.Calls.StartAt(now)
	l.chz.StreamStartedAt(true, now)
}

// chzCallStarted counts a call or stream the peer began on l, on the
// server and the socket.
func (l *serverLink) chzCallStarted() {
	now := time.Now().UnixNano()
	l.s.chz.Calls.StartAt(now)
	l.chz.StreamStartedAt(false, now)
}

// chzCallEnded counts the end of a call or stream the peer began on l.
func (l *serverLink) chzCallEnded(err error) {
	l.s.chz.Calls.End(err == nil)
	l.chz.StreamEnded(err == nil)
}

// attemptEnded counts the end of a call or stream begun on l.
func (l *clientLink) attemptEnded(err error) {
	l.sc.chz.Calls.End(err == nil)
	l.chz.StreamEnded(err == nil)
}

// The states of clientStream.callCount.
const (
	callCountAttempt int32 = iota // an attempt: its RPC counts elsewhere
	callCountMine                 // the RPC's own stream: it counts the RPC's end
	callCountEnded                // it ended
)

// countCall makes cs count its RPC's end on the channel, or counts it now
// when cs has ended already.
func (cs *clientStream) countCall() {
	if cs.callCount.CompareAndSwap(callCountAttempt, callCountMine) {
		return
	}
	cs.mu.Lock()
	st := cs.endStatus
	cs.mu.Unlock()
	cs.cc.chz.Calls.End(st.Code() == codes.OK)
}
