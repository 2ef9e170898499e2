package rpc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Invoke makes a unary call: it sends req to method ("/pkg.Service/Method")
// and decodes the response into reply. Its error is a status error.
func (cc *ClientConn) Invoke(ctx context.Context, method string, req, reply any, opts ...CallOption) error {
	if len(cc.opts.callOptions) > 0 {
		opts = append(append([]CallOption(nil), cc.opts.callOptions...), opts...)
	}
	return cc.invoke(ctx, method, req, reply, cc, opts...)
}

// call is the end of the client interceptor chain: the network call.
func (cc *ClientConn) call(ctx context.Context, method string, req, reply any, _ *ClientConn, opts ...CallOption) error {
	ci := callInfoPool.Get().(*callInfo)
	defer putCallInfo(ci)
	*ci = callInfo{maxRecvSize: cc.opts.maxRecvSize, maxSendSize: cc.opts.maxSendSize}
	for _, o := range opts {
		o.apply(ci)
	}
	if hs := cc.opts.statsHandlers; len(hs) > 0 {
		// Tagged before the metadata is read: a handler may add some.
		ctx, rs := beginRPC(ctx, hs, nil, true, method, !ci.waitForReady, nil)
		err := cc.send(ctx, method, req, reply, ci, rs)
		rs.end(err, rs.trailer)
		return err
	}
	return cc.send(ctx, method, req, reply, ci, nil)
}

// callInfoPool holds the callInfos of unary calls: the options escape to
// the heap (CallOption is an interface), and nothing keeps one after the
// call returns.
var callInfoPool = sync.Pool{New: func() any { return new(callInfo) }}

// putCallInfo pools ci, dropping what it points to (the caller's
// variables, credentials).
func putCallInfo(ci *callInfo) {
	*ci = callInfo{}
	callInfoPool.Put(ci)
}

// send makes a unary call, reporting to rs unless it is nil.
func (cc *ClientConn) send(ctx context.Context, method string, req, reply any, ci *callInfo, rs *rpcStats) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	if err := wire.CheckMD(md); err != nil {
		return status.Errorf(codes.Internal, "request metadata: %v", err)
	}
	md = outgoingMD(md)
	if ci.compressor != "" {
		c, err := sendCompressor(ci.compressor)
		if err != nil {
			return err
		}
		ci.comp, md = c, withEncoding(md, c)
		if rs != nil && c != nil {
			rs.compression = c.Name()
		}
	}
	// A call that never left (the link was draining, or closed before the
	// transport took the request) is safely sent again on a new link. One
	// the server refused before running it (its queue for call slots was
	// full) waits, as a call waits for a stream slot in HTTP/2, until one
	// of the link's calls ends (or a backoff passes), then goes again.
	notSent, refused := 0, 0
	for {
		l, done, err := cc.link(ctx, method, ci.waitForReady, rs)
		if err != nil {
			return err
		}
		// The trailer for the pick's Done, allocated only when there is
		// one: a call without pays nothing (TestUnaryAllocs).
		ci.pickTrailer = nil
		if done != nil {
			ci.pickTrailer = new(metadata.MD)
		}
		cmd, err := l.callMD(ctx, method, md, ci)
		if err == nil {
			l.attemptStarted()
			err = l.call(ctx, method, cmd, req, reply, ci, rs)
			l.attemptEnded(err)
		}
		if done != nil {
			done(doneInfo(err, *ci.pickTrailer))
		}
		switch err {
		case errNotSent:
			cc.forget(l, false)
			if notSent++; notSent == 3 {
				return l.CloseStatus().Err()
			}
		case errRefused:
			refused++
			if err := l.waitForSlot(ctx, refused); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// waitForSlot waits, after the server refused a call for the refused-th
// time in a row, until one of l's calls gets its response, a backoff of
// 10 ms doubling to 1 s passes, l closes, or ctx ends (its error).
func (l *clientLink) waitForSlot(ctx context.Context, refused int) error {
	l.mu.Lock()
	if l.slotFreed == nil {
		l.slotFreed = make(chan struct{})
	}
	freed := l.slotFreed
	l.slotWaiters.Add(1)
	l.mu.Unlock()
	t := time.NewTimer(min(10*time.Millisecond<<min(refused-1, 7), time.Second))
	defer t.Stop()
	select {
	case <-freed:
	case <-t.C:
	case <-l.Ctx.Done():
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
}

// freeSlot wakes the calls waiting in waitForSlot; the reader calls it for
// every response, at the cost of an atomic load when nobody waits.
func (l *clientLink) freeSlot() {
	if l.slotWaiters.Load() == 0 {
		return
	}
	l.mu.Lock()
	if l.slotFreed != nil {
		close(l.slotFreed)
		l.slotFreed = nil
	}
	l.slotWaiters.Store(0)
	l.mu.Unlock()
}

// errRefused means the server refused the call before running it (its
// queue for call slots was full).
var errRefused = errors.New("rpc: call refused")

// errNotSent means the call did not leave: the link takes no new calls
// (draining after GOAWAY, or closed).
var errNotSent = errors.New("rpc: call not sent")

// clientLink is one transport connection of a ClientConn and the calls in
// flight on it. Whoever holds its read turn (clientturn.go), a waiting
// caller or its reader goroutine, routes responses to their calls.
type clientLink struct {
	*conn.Link
	cc *ClientConn
	sc *subConn // the backend it connects to
	// uaKnown: a call that carried the user-agent has succeeded, so the
	// server knows it (withUserAgent).
	uaKnown atomic.Bool
	// authority is what per-RPC credentials are told the server is: the
	// target's host and port (cc.authority), else the address dialed.
	authority string

	mu       sync.Mutex
	pending  map[uint64]*pendingCall
	expired  map[uint64]struct{} // calls given up at their deadline, whose RESPONSE frees their slot
	streams  map[uint64]*clientStream
	held     atomic.Int64 // window bytes of stream messages copied out and not yet read
	nextID   uint64
	draining bool // GOAWAY received, or closed: no new calls

	slotFreed   chan struct{} // closed at the next response, for refused calls
	slotWaiters atomic.Int64
	turn        conn.Turn // who reads; under mu

	// slots: the server's limit on the calls and streams open at once,
	// and those this side counts (conn.Slots).
	slots conn.Slots

	// handoffs counts responses delivered to a caller by another
	// goroutine (the reader goroutine, or a caller holding the turn),
	// for tests.
	handoffs atomic.Uint64
	// streamHandoffs counts stream messages another goroutine than their
	// receiver read (ownReader: the lone stream whose receiver holds the
	// turn, readOwn), for tests.
	streamHandoffs atomic.Uint64
	ownReader      *clientStream // the turn holder's

	stats *connStats       // nil without stats handlers
	chz   *channelz.Socket // what channelz shows of it, until its reader ends
}

type pendingCall struct {
	done    chan result // capacity 1: the reader never blocks on it
	mayRead bool        // the call may take the read turn (mayReadLocked)
}

// result is a call's outcome, or (turn) the read turn handed to it.
type result struct {
	frame transport.Buffer // the RESPONSE frame, when err is nil
	err   error
	turn  bool
}

var pendingPool = sync.Pool{New: func() any { return &pendingCall{done: make(chan result, 1)} }}

// putPending pools p, which must hold no result: one left in it would reach
// the next call that takes p.
func putPending(p *pendingCall) {
	if len(p.done) != 0 {
		panic("rpc: a pooled pendingCall holds a result")
	}
	pendingPool.Put(p)
}

// newClientLink makes the link of tc, over which the server said set in
// its SETTINGS (dialLink).
func newClientLink(cc *ClientConn, tc transport.Conn, set wire.Settings) *clientLink {
	l := &clientLink{
		cc:      cc,
		pending: make(map[uint64]*pendingCall),
		streams: make(map[uint64]*clientStream),
	}
	l.Link = conn.NewLink(tc, conn.LinkConfig{Log: cc.log, Keepalive: cc.opts.keepalive.link(), Freed: l.slots.Release})
	l.Flow.Init(cc.opts.connWindow, cc.opts.maxRecvSize)
	l.turn.Init(tc)
	l.Flow.PeerWindow(set.ConnectionWindow)
	l.slots.SetLimit(int(set.MaxConcurrentStreams))
	return l
}

// register takes a slot for a call (waiting within ctx while the server's
// limit is reached) and an id. errNotSent: l takes no new calls.
func (l *clientLink) register(ctx context.Context) (uint64, *pendingCall, error) {
	if ok, err := l.slots.Acquire(ctx); !ok {
		if err != nil {
			return 0, nil, status.FromContextError(err).Err()
		}
		return 0, nil, errNotSent
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.draining || l.Ctx.Err() != nil {
		l.slots.Release()
		return 0, nil, errNotSent
	}
	l.nextID++
	p := pendingPool.Get().(*pendingCall)
	l.pending[l.nextID] = p
	l.mayReadLocked(p)
	return l.nextID, p, nil
}

// unregister removes a call whose request did not leave, and gives its
// slot back. It reports false when the outcome was already delivered to p
// (and must be drained).
func (l *clientLink) unregister(id uint64) bool {
	l.mu.Lock()
	_, ok := l.pending[id]
	delete(l.pending, id)
	retire := ok && l.idleDraining()
	l.mu.Unlock()
	if ok {
		l.slots.Release()
	}
	if retire {
		l.retire()
	}
	return ok
}

// abandon gives up call id, whose outcome the caller will not use, and
// pools p. When the outcome was delivered already (a response, or failAll
// after the link closed), it is drained first.
func (l *clientLink) abandon(id uint64, p *pendingCall) {
	if !l.unregister(id) {
		r := <-p.done
		r.frame.Release()
	}
	putPending(p)
}

// idleDraining reports whether l is draining with no call left, so it can
// close. Called with l.mu held.
func (l *clientLink) idleDraining() bool {
	return l.draining && len(l.pending) == 0 && len(l.streams) == 0 && l.Ctx.Err() == nil
}

func (l *clientLink) retire() {
	l.Close(status.New(codes.Unavailable, "connection drained after the server's GOAWAY"))
}

func (l *clientLink) call(ctx context.Context, method string, md metadata.MD, req, reply any, ci *callInfo, rs *rpcStats) error {
	id, p, err := l.register(ctx)
	if err != nil {
		return err
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			l.abandon(id, p)
			return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
	}
	head := wire.AppendRequestHead(bufpool.Get(256)[:0], id, timeout, method, md)
	if rs != nil {
		rs.onConn(l.stats)
	}
	// The request takes the connection's window, as stream messages do:
	// the server grants it back when the call is over (docs/wire.md).
	n, err := sendFrame(ctx, l.Conn, sendCodec(l.cc.opts.codec, ci.comp), head, req, ci.maxSendSize, nil, &l.Flow, nil)
	if err == nil {
		l.chz.MessageSent()
	}
	if rs != nil && err == nil {
		rs.outHeader(md, method, l.Conn)
		rs.outPayload(req, n, len(head)+n)
	}
	bufpool.Put(head)
	if err != nil {
		l.abandon(id, p)
		if _, ok := status.FromError(err); ok {
			return err
		}
		if errors.Is(err, transport.ErrClosed) && ctx.Err() == nil {
			return errNotSent // the transport did not take the request
		}
		return conn.TransportStatus(err).Err()
	}

	r, err := l.await(ctx, id, p)
	putPending(p)
	if err != nil {
		return err
	}
	if r.err != nil {
		return r.err
	}
	defer r.frame.Release()
	err = l.finish(r.frame.Bytes(), reply, ci, rs)
	if err == nil {
		l.chz.MessageReceived() // a response that was an error held none
	}
	if err == nil && !l.uaKnown.Load() {
		if _, ok := md[userAgentKey]; ok {
			// The server decoded the request: it has the user-agent.
			l.uaKnown.Store(true)
		}
	}
	return err
}

// finish decodes a RESPONSE frame into the call's outcome.
func (l *clientLink) finish(frame []byte, reply any, ci *callInfo, rs *rpcStats) error {
	// The whole frame is held to the limits, before anything is decoded:
	// the message limit, plus what metadata, status message and details
	// may take.
	maxMD := l.cc.opts.maxHeaderListSize
	if limit := ci.maxRecvSize + maxMD + responseOverhead; len(frame) > limit {
		return status.Errorf(codes.ResourceExhausted, "received a response frame of %d bytes, larger than the limit (%d: message limit %d, metadata limit %d, and %d)",
			len(frame), limit, ci.maxRecvSize, maxMD, responseOverhead)
	}
	_, body, err := wire.ParseHeader(frame)
	if err == nil {
		var resp wire.Response
		resp, err = wire.ParseResponse(body, maxMD)
		if errors.Is(err, wire.ErrMetadataTooLarge) {
			return status.Errorf(codes.ResourceExhausted, "response %v", err)
		}
		if err == nil {
			if resp.Code == uint32(codes.Unavailable) && len(resp.Trailer[refusedKey]) > 0 {
				return errRefused
			}
			rc, name, ok := takeEncoding(resp.Header)
			if !ok && resp.Code == 0 {
				return status.Errorf(codes.Internal, "grpc: Decompressor is not installed for grpc-encoding %q", name)
			}
			if ci.header != nil {
				if resp.Code == 0 {
					*ci.header = withContentType(resp.Header)
				} else {
					*ci.header = resp.Header
				}
			}
			if ci.attemptHeader != nil {
				*ci.attemptHeader = resp.Header
			}
			if ci.trailer != nil {
				*ci.trailer = resp.Trailer
			}
			if ci.attemptTrailer != nil {
				*ci.attemptTrailer = resp.Trailer
			}
			if ci.pickTrailer != nil {
				*ci.pickTrailer = resp.Trailer
			}
			if ci.peer != nil {
				*ci.peer = Peer{Addr: l.Conn.RemoteAddr(), LocalAddr: l.Conn.LocalAddr(), AuthInfo: authInfo(l.Conn)}
			}
			if resp.Code != 0 {
				if rs != nil {
					rs.response(&resp, len(frame), nil)
				}
				return responseStatus(resp).Err()
			}
			if len(resp.Payload) > ci.maxRecvSize {
				return status.Errorf(codes.ResourceExhausted, "received message of %d bytes is larger than the limit (%d)", len(resp.Payload), ci.maxRecvSize)
			}
			if err := decodeMsg(l.cc.opts.codec, rc, resp.Payload, ci.maxRecvSize, reply); err != nil {
				return decodeError(err, "response", reply)
			}
			if rs != nil {
				rs.response(&resp, len(frame), reply)
			}
			return nil
		}
	}
	l.Log.Warn("malformed response", zap.Error(err))
	return status.Errorf(codes.Internal, "malformed response from %s: %v", l.Conn.RemoteAddr(), err)
}

// responseOverhead is what a response frame may carry beyond its message
// and metadata: the frame header, the status code and message.
const responseOverhead = 64 << 10

func responseStatus(r wire.Response) *status.Status {
	var details []*anypb.Any
	for _, d := range r.Details {
		a := new(anypb.Any)
		if proto.Unmarshal(d, a) == nil {
			details = append(details, a)
		}
	}
	return status.FromParts(codes.Code(r.Code), validUTF8(r.Message), details)
}

// validUTF8 is msg, a status message from the wire, with each byte that is
// not part of valid UTF-8 replaced by U+FFFD, as gRPC-go's client reads it.
func validUTF8(msg string) string {
	if utf8.ValidString(msg) {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); {
		r, n := utf8.DecodeRuneInString(msg[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(msg[i : i+n])
		}
		i += n
	}
	return b.String()
}

// dispatch handles one frame, read by self's caller (nil: the reader
// goroutine); it reports false when the link is closing.
func (l *clientLink) dispatch(b transport.Buffer, self *pendingCall) bool {
	h, body, err := wire.ParseHeader(b.Bytes())
	if err != nil {
		b.Release()
		l.fatal(err)
		return false
	}
	if h.Kind == wire.KindMessage {
		l.chz.MessageReceived()
	}
	if h.Kind == wire.KindResponse {
		l.mu.Lock()
		p, ok := l.pending[h.CallID]
		delete(l.pending, h.CallID)
		if ok {
			l.turn.LeaveLocked(p)
		}
		_, expired := l.expired[h.CallID]
		if expired {
			delete(l.expired, h.CallID)
		}
		retire := l.idleDraining()
		l.mu.Unlock()
		if ok || expired {
			l.slots.Release()
		}
		if ok {
			if p != self {
				l.handoffs.Add(1)
			}
			p.done <- result{frame: b}
		} else {
			b.Release() // the caller gave up; the server did not know yet
		}
		l.freeSlot()
		if retire {
			l.retire()
		}
		return true
	}
	switch h.Kind {
	case wire.KindHeaders, wire.KindMessage, wire.KindTrailers, wire.KindReset, wire.KindWindow, wire.KindOpen, wire.KindCloseSend:
		return l.streamFrame(h, body, b)
	}
	ga, err := l.Control(h, body, b, "server", "clients")
	if err != nil {
		l.fatal(err)
		return false
	}
	if ga != nil {
		l.goAway(*ga)
	}
	return true
}

// fatal closes the connection for a protocol error, with one log line.
func (l *clientLink) fatal(err error) {
	l.Log.Warn("closing connection", zap.Stringer("peer", l.Conn.RemoteAddr()), zap.Error(err))
	l.ProtocolError(err)
}

// goAway stops new calls on l; it closes once the calls in flight finish.
func (l *clientLink) goAway(ga wire.GoAway) {
	if ga.Code != 0 {
		l.Log.Warn("server is closing the connection", zap.Stringer("code", codes.Code(ga.Code)), zap.String("reason", ga.Message))
		l.SetReason(status.New(codes.Code(ga.Code), "server closed the connection: "+ga.Message))
		if ga.Message == tooManyPings {
			l.cc.serverPingBackoff()
		}
	}
	l.cc.forget(l, false)
	l.mu.Lock()
	l.draining = true
	retire := l.idleDraining()
	l.mu.Unlock()
	l.slots.Close()
	if retire {
		l.retire()
	}
}

// failAll fails every pending call with st, after the link closed.
func (l *clientLink) failAll(st *status.Status) {
	l.mu.Lock()
	l.draining = true
	calls := l.pending
	l.pending = map[uint64]*pendingCall{}
	l.expired = nil
	l.turn.ClearLocked()
	streams := make([]*clientStream, 0, len(l.streams))
	for _, cs := range l.streams {
		streams = append(streams, cs)
	}
	l.mu.Unlock()
	l.slots.Close()
	for _, p := range calls {
		p.done <- result{err: st.Err()}
	}
	for _, cs := range streams {
		cs.finish(st, true)
	}
}
