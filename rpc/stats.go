package rpc

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// StatsHandler adds h to the handlers told about the server's connections
// and RPCs (package stats). Several may be set; each sees every event.
func StatsHandler(h stats.Handler) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.statsHandlers = append(o.statsHandlers, h) })
}

// WithStatsHandler adds h to the handlers told about the client's
// connections and RPCs (package stats). Several may be set; each sees
// every event.
func WithStatsHandler(h stats.Handler) DialOption {
	return func(o *dialOptions) { o.statsHandlers = append(o.statsHandlers, h) }
}

// rpcStats reports one RPC's events to the stats handlers. Its owner holds
// a nil *rpcStats when there are none, and tests for nil before each
// event: without handlers an RPC pays one comparison per event.
type rpcStats struct {
	hs     []stats.Handler
	ctx    context.Context // what the handlers' TagRPC returned, with its connection's values
	tagged context.Context // what the handlers' TagRPC returned
	client bool
	begin  time.Time
	// endOnce reports End once; a second caller returns only once the
	// first has reported it, so that whichever goroutine ends a stream
	// (its context's watcher, or the caller's RecvMsg returning the
	// final error) the caller sees End reported when RecvMsg returns.
	endOnce sync.Once
	// trailer is a unary call's response trailer, for its End.
	trailer metadata.MD
	// trailerLen is the size of a client stream's TRAILERS frame, once it
	// came (under the stream's mu).
	trailerLen int
	// compression is the compressor's name when the call compresses, set
	// before its headers are reported: both ways use the same one.
	compression string
}

// beginRPC tags an RPC with every handler and reports its Begin. The
// context it returns is the RPC's from then on. On the server, conn is the
// RPC's connection: what its TagConn added is seen in the RPC's context, as
// a gRPC-go server's stream contexts derive from their connection's.
func beginRPC(ctx context.Context, hs []stats.Handler, conn *connStats, client bool, method string, failFast bool, desc *StreamDesc) (context.Context, *rpcStats) {
	ctx, rs := tagRPC(ctx, hs, conn, client, method, failFast)
	rs.beginEvent(failFast, desc)
	return ctx, rs
}

// beginServerRPC is beginRPC on the server, which reports the request's
// InHeader (md, of wireLen bytes, from peer, its messages compressed with
// compression) before the Begin, in gRPC-go's order.
func beginServerRPC(ctx context.Context, hs []stats.Handler, conn *connStats, method string, desc *StreamDesc, compression string, md metadata.MD, wireLen int, peer *Peer) (context.Context, *rpcStats) {
	ctx, rs := tagRPC(ctx, hs, conn, false, method, true)
	rs.compression = compression
	rs.inHeader(md, wireLen, method, peer)
	rs.beginEvent(true, desc)
	return ctx, rs
}

// tagRPC tags an RPC with every handler.
func tagRPC(ctx context.Context, hs []stats.Handler, conn *connStats, client bool, method string, failFast bool) (context.Context, *rpcStats) {
	if conn != nil {
		ctx = connValues{ctx, conn.ctx}
	}
	info := &stats.RPCTagInfo{FullMethodName: method, FailFast: failFast}
	for _, h := range hs {
		ctx = h.TagRPC(ctx, info)
	}
	return ctx, &rpcStats{hs: hs, ctx: ctx, tagged: ctx, client: client, begin: time.Now()}
}

// beginEvent reports the RPC's Begin.
func (rs *rpcStats) beginEvent(failFast bool, desc *StreamDesc) {
	b := &stats.Begin{Client: rs.client, BeginTime: rs.begin, FailFast: failFast}
	if desc != nil {
		b.IsClientStream, b.IsServerStream = desc.ClientStreams, desc.ServerStreams
	}
	rs.handle(b)
}

// onConn makes the values conn's TagConn added visible to the client's
// RPC events from now on: the connection is known only once the call has
// picked one, after its Begin. The values its own TagRPC added come first.
func (rs *rpcStats) onConn(conn *connStats) {
	if conn != nil {
		rs.ctx = connValues{rs.tagged, conn.ctx}
	}
}

// connValues is an RPC's context that also holds its connection's values.
type connValues struct {
	context.Context                 // the RPC's
	conn            context.Context // what the connection's TagConn returned
}

func (c connValues) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.conn.Value(key)
}

func (rs *rpcStats) handle(s stats.RPCStats) {
	for _, h := range rs.hs {
		h.HandleRPC(rs.ctx, s)
	}
}

// outHeader reports the header leaving; the client names the method and
// the connection's addresses, as gRPC-go's does.
func (rs *rpcStats) outHeader(md metadata.MD, method string, tc transport.Conn) {
	s := &stats.OutHeader{Client: rs.client, Header: md, Compression: rs.compression}
	if rs.client {
		s.FullMethod, s.RemoteAddr, s.LocalAddr = method, tc.RemoteAddr(), tc.LocalAddr()
	}
	rs.handle(s)
}

// inHeader reports the header arriving; the server names the method and
// the connection's addresses.
func (rs *rpcStats) inHeader(md metadata.MD, wireLen int, method string, peer *Peer) {
	s := &stats.InHeader{Client: rs.client, Header: md, WireLength: wireLen, Compression: rs.compression}
	if !rs.client {
		s.FullMethod, s.RemoteAddr, s.LocalAddr = method, peer.Addr, peer.LocalAddr
	}
	rs.handle(s)
}

// outPayload reports message v sent as n bytes (compressed, when the call
// compresses) in a frame of wireLen.
func (rs *rpcStats) outPayload(v any, n, wireLen int) {
	rs.handle(&stats.OutPayload{Client: rs.client, Payload: v, Length: rs.length(v, n), CompressedLength: n, WireLength: wireLen, SentTime: time.Now()})
}

func (rs *rpcStats) inPayload(v any, n, wireLen int) {
	rs.handle(&stats.InPayload{Client: rs.client, Payload: v, Length: rs.length(v, n), CompressedLength: n, WireLength: wireLen, RecvTime: time.Now()})
}

// length is the size of v's encoding, which a message of n bytes on the
// wire holds: n, unless the call compresses; then protobuf's size of v
// (n when v is not a protobuf message).
func (rs *rpcStats) length(v any, n int) int {
	if rs.compression == "" {
		return n
	}
	if m, ok := v.(proto.Message); ok {
		return proto.Size(m)
	}
	return n
}

func (rs *rpcStats) inTrailer(md metadata.MD, wireLen int) {
	rs.handle(&stats.InTrailer{Client: rs.client, Trailer: md, WireLength: wireLen})
}

func (rs *rpcStats) outTrailer(md metadata.MD, wireLen int) {
	rs.handle(&stats.OutTrailer{Client: rs.client, Trailer: md, WireLength: wireLen})
}

// response reports a unary call's RESPONSE frame of wireLen bytes on the
// client: its header, its trailer, its message (reply, when it decoded) —
// gRPC-go's order, where the transport reports the trailer as it arrives,
// with the message, before the call decodes the message.
func (rs *rpcStats) response(resp *wire.Response, wireLen int, reply any) {
	rs.inHeader(resp.Header, 0, "", nil)
	rs.inTrailer(resp.Trailer, 0)
	if reply != nil {
		rs.inPayload(reply, len(resp.Payload), wireLen)
	}
	rs.trailer = resp.Trailer
}

// end reports the RPC's End, the first time it is called: err is its
// outcome (a status error, or nil), trailer what the client received.
func (rs *rpcStats) end(err error, trailer metadata.MD) { rs.endAfterTrailer(err, trailer, 0) }

// endAfterTrailer is end, reporting first the InTrailer of a client's
// stream whose TRAILERS frame of trailerLen bytes came (0: none came).
func (rs *rpcStats) endAfterTrailer(err error, trailer metadata.MD, trailerLen int) {
	rs.endOnce.Do(func() {
		if trailerLen > 0 {
			rs.inTrailer(trailer, trailerLen)
		}
		if err != nil {
			err = status.Convert(err).Err()
		}
		rs.handle(&stats.End{Client: rs.client, BeginTime: rs.begin, EndTime: time.Now(), Trailer: trailer, Error: err})
	})
}

// connStats reports one connection's events; nil without handlers.
type connStats struct {
	hs     []stats.Handler
	ctx    context.Context
	client bool
}

// beginConn tags a connection and reports its ConnBegin. counters are
// those of its transport (or listener), nil when it keeps none: then the
// connection's own, if it has some.
func beginConn(hs []stats.Handler, client bool, tc transport.Conn, counters transport.Counters) *connStats {
	if len(hs) == 0 {
		return nil
	}
	if counters == nil {
		counters, _ = tc.(transport.Counters)
	}
	// A connection whose addresses do not name its transport (rdma's are
	// its TCP bootstrap's) says which it is.
	var scheme string
	if s, ok := tc.(interface{ Scheme() string }); ok {
		scheme = s.Scheme()
	} else if a := tc.LocalAddr(); a != nil {
		scheme = a.Network()
	}
	info := &stats.ConnTagInfo{RemoteAddr: tc.RemoteAddr(), LocalAddr: tc.LocalAddr(), Transport: scheme, Counters: counters}
	ctx := context.Background()
	for _, h := range hs {
		ctx = h.TagConn(ctx, info)
	}
	cs := &connStats{hs: hs, ctx: ctx, client: client}
	for _, h := range hs {
		h.HandleConn(ctx, &stats.ConnBegin{Client: client})
	}
	return cs
}

func (cs *connStats) end() {
	if cs == nil {
		return
	}
	for _, h := range cs.hs {
		h.HandleConn(cs.ctx, &stats.ConnEnd{Client: cs.client})
	}
}
