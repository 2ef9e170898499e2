package rpc

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/internal/balancerload"
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// NewStream opens a stream for a streaming method ("/pkg.Service/Method")
// through the client's stream interceptors. Nothing waits for the server:
// the stream is open once the OPEN frame has left, and what the server
// thinks of it (an unknown method) comes back from RecvMsg. A stream the
// server refuses (its stream slots are full) is opened again once a slot
// frees and what was sent on it sent again, unseen by the caller, as a
// refused unary call is sent again, when no more than 32 KiB of messages
// had been sent on it; one refused later fails with Unavailable.
func (cc *ClientConn) NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error) {
	if len(cc.opts.callOptions) > 0 {
		opts = append(append([]CallOption(nil), cc.opts.callOptions...), opts...)
	}
	return cc.streamer(ctx, desc, cc, method, opts...)
}

// newStream is the end of the client's stream chain.
func (cc *ClientConn) newStream(ctx context.Context, desc *StreamDesc, method string, _ *ClientConn, opts ...CallOption) (ClientStream, error) {
	ci := callInfo{maxRecvSize: cc.opts.maxRecvSize, maxSendSize: cc.opts.maxSendSize}
	for _, o := range opts {
		o.apply(&ci)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	var rs *rpcStats
	if hs := cc.opts.statsHandlers; len(hs) > 0 {
		// Tagged before the metadata is read: a handler may add some.
		ctx, rs = beginRPC(ctx, hs, nil, true, method, !ci.waitForReady, desc)
	}
	cs, err := cc.openStream(ctx, desc, method, &ci, rs)
	if err != nil && rs != nil {
		rs.end(err, nil)
	}
	return cs, err
}

// openStream opens the stream on the current link, or on a new one when
// that link stopped taking new calls before the OPEN left.
func (cc *ClientConn) openStream(ctx context.Context, desc *StreamDesc, method string, ci *callInfo, rs *rpcStats) (ClientStream, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if err := wire.CheckMD(md); err != nil {
		return nil, status.Errorf(codes.Internal, "request metadata: %v", err)
	}
	md = outgoingMD(md)
	if ci.compressor != "" {
		c, err := sendCompressor(ci.compressor)
		if err != nil {
			return nil, err
		}
		ci.comp, md = c, withEncoding(md, c)
		if rs != nil && c != nil {
			rs.compression = c.Name()
		}
	}
	for attempt := 1; ; attempt++ {
		l, done, err := cc.link(ctx, method, ci.waitForReady, rs)
		if err != nil {
			return nil, err
		}
		cmd, err := l.callMD(ctx, method, md, ci)
		var cs *clientStream
		if err == nil {
			cs, err = l.open(ctx, desc, method, cmd, ci, rs)
		}
		if err == nil {
			cs.setPickDone(done)
			return cs, nil
		}
		if done != nil {
			done(balancer.DoneInfo{Err: err})
		}
		if err != errNotSent {
			return nil, err
		}
		cc.forget(l, false)
		if attempt == 3 {
			return nil, l.CloseStatus().Err()
		}
	}
}

// clientStream is the client's end of one stream.
type clientStream struct {
	cc     *ClientConn
	desc   *StreamDesc
	method string
	md     metadata.MD // the request metadata, for an OPEN sent again
	// callCount says who counts the RPC's end on the channel (channelz):
	// callCountMine once newStreamFromConfig made the stream the RPC's
	// own (not an attempt of a retryStream), callCountEnded once it ended.
	callCount atomic.Int32
	// recvComp is the compressor of the messages the server sends, from
	// its HEADERS (nil: not compressed): set by the reader before it
	// queues the first message.
	recvComp encoding.Compressor
	ci       callInfo
	ctx      context.Context
	cancel   context.CancelFunc
	parent   context.Context // the caller's: once it is done, nobody reads the stream

	in  conn.Inbox
	out conn.Credit
	// recving counts receives between taking a message and reporting its
	// InPayload (with stats handlers only): the stream's End waits for
	// them, so that it is reported last.
	recving atomic.Int32
	// yielded: the reader goroutine left the read turn for the receiver
	// (YieldLocked); skipYield: the messages it does not, after a flood
	// showed (readOwn).
	yielded   atomic.Bool
	skipYield conn.Backoff

	mu sync.Mutex
	// The link and id the stream is open on. They change only while
	// reopening is set, when the server refused the stream and it is
	// opened again; SendMsg and CloseSend wait for that.
	l         *clientLink
	id        uint64
	reopening chan struct{} // non-nil while the stream is opened again; closed after
	again     bool          // the stream was refused again before reopening was done
	// Until the server shows it took the stream (any frame of its but a
	// refusal), the MESSAGE frames sent are kept, up to maxKept bytes, to
	// be sent again should it refuse the stream. committed: no longer (the
	// server took the stream, too much was sent, or it ended); a refusal
	// is then the caller's to see.
	committed  atomic.Bool
	kept       [][]byte // whole MESSAGE frames, in order
	keptOne    [1][]byte
	keptBytes  int
	pickDone   func(balancer.DoneInfo) // the balancer's Done for the current link, until the stream ends
	header     metadata.MD
	gotHeader  chan struct{} // closed when the header came or the stream ended
	sawHeaders bool          // a HEADERS frame came: a retry policy no longer applies
	headerDone bool
	trailer    metadata.MD
	endStatus  *status.Status // why, once ended
	done       chan struct{}  // closed when ended
	ended      bool           // trailers, a reset, the context or the link ended it
	sentClose  bool
	sentOne    bool // !ClientStreams: the one request was sent (or tried)
	refusals   int  // the server refused the stream this many times in a row
	gotOne     bool // !ServerStreams: the one response was received
	// Messages kept past the stream's end (TRAILERS: finish without drop)
	// wait for RecvMsg until the caller abandons the stream.
	abandoned bool        // RecvMsg returned its final error, or they were dropped
	stopDrop  func() bool // stops the drop when the caller's context ends

	// nil without stats handlers. (Placed so that the struct keeps its
	// allocation size class: streams without handlers cost no more.)
	stats *rpcStats
}

// open makes a stream and opens it on l.
func (l *clientLink) open(ctx context.Context, desc *StreamDesc, method string, md metadata.MD, ci *callInfo, rs *rpcStats) (*clientStream, error) {
	cs := &clientStream{cc: l.cc, desc: desc, method: method, md: md, ci: *ci, gotHeader: make(chan struct{}), done: make(chan struct{}), stats: rs}
	l.cc.opts.initInbox(&cs.in)
	cs.out.Init()
	if rs != nil {
		rs.onConn(l.stats) // before the reader can see the stream
	}
	cs.ctx, cs.cancel = context.WithCancel(ctx)
	cs.parent = ctx
	if err := l.start(cs); err != nil {
		cs.cancel()
		return nil, err
	}
	if cs.stats != nil {
		cs.stats.outHeader(md, method, l.Conn)
	}
	// The stream's context ends it: a cancel resets it on the server.
	context.AfterFunc(cs.ctx, cs.contextDone)
	return cs, nil
}

// start registers cs on l under a new id and sends its OPEN frame (and a
// half-close the caller made already, for a stream opened again).
// errNotSent means l takes no new streams.
func (l *clientLink) start(cs *clientStream) error {
	// The caller's context, not the stream's: the server may end the
	// stream (an unknown method's TRAILERS) while its OPEN's window
	// updates are still going, which ends the stream's context; the
	// stream is open all the same, and RecvMsg reports how it ended.
	ctx := cs.parent
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
	}
	// A slot first: the server runs no more than it said (its SETTINGS).
	if ok, err := l.slots.Acquire(ctx); !ok {
		if err != nil {
			return status.FromContextError(err).Err()
		}
		return errNotSent
	}
	l.mu.Lock()
	if l.draining || l.Ctx.Err() != nil {
		l.mu.Unlock()
		l.slots.Release()
		return errNotSent
	}
	l.nextID++
	id := l.nextID
	l.streams[id] = cs
	l.turn.UnidleLocked(true) // the reader goroutine reads streams
	l.mu.Unlock()
	cs.mu.Lock()
	if cs.ended { // while it was being opened again
		st := cs.endStatus
		cs.mu.Unlock()
		l.forgetStream(id, false)
		return st.Err()
	}
	prev := cs.l
	cs.l, cs.id = l, id
	l.Flow.Allow(cs.ci.maxRecvSize)
	halfClosed := cs.sentClose
	kept := cs.kept
	cs.mu.Unlock()
	if prev != nil {
		prev.attemptEnded(errRefused) // refused there, opened again here
	}
	l.attemptStarted()

	var flags uint8
	if cs.desc.ClientStreams {
		flags |= wire.FlagClientStreams
	}
	if cs.desc.ServerStreams {
		flags |= wire.FlagServerStreams
	}
	frame := wire.AppendOpen(bufpool.Get(256)[:0], id, flags, timeout, cs.method, cs.md)
	err := l.Conn.Send(ctx, frame)
	bufpool.Put(frame)
	if err == nil {
		// A window larger than the protocol's initial one is granted
		// right after the OPEN.
		if extra := l.cc.opts.window - defaultWindow; extra > 0 {
			err = l.Conn.Send(ctx, wire.AppendWindow(nil, id, uint32(min(extra, wire.MaxWindowIncrement))))
		}
	}
	if len(kept) > 0 {
		// The messages go again on the new stream, whose window is the
		// initial one: they fit it (maxKept is less).
		cs.out.Reset()
		for _, f := range kept {
			if err != nil {
				break
			}
			if !l.Flow.Acquire(ctx.Done(), len(f)) {
				err = ctx.Err()
				break
			}
			again := append(bufpool.Get(len(f))[:0], f...)
			wire.AppendMessageHead(again[:0], id)
			if err = l.Conn.Send(ctx, again); err != nil {
				l.Flow.Add(int64(len(f)))
			} else {
				l.chz.MessageSent()
			}
			bufpool.Put(again)
			cs.out.Take(len(f))
		}
	}
	if err == nil && halfClosed {
		err = l.Conn.Send(ctx, wire.AppendCloseSend(nil, id))
	}
	if err != nil {
		l.forgetStream(id, false)
		if errors.Is(err, transport.ErrClosed) && ctx.Err() == nil {
			return errNotSent
		}
		if st := callerEnded(ctx); st != nil {
			return st.Err()
		}
		return conn.TransportStatus(err).Err()
	}
	return nil
}

// refused handles the server's refusal of stream id on l (its stream
// slots were full; the handler never ran). When what was sent on it is
// still kept (nothing of the server's came, and no more than maxKept
// bytes of messages went), it is opened again once a slot frees and sent
// again, as gRPC does with a stream refused by REFUSED_STREAM, and refused
// reports true; the caller sees nothing of it. Otherwise the refusal ends
// the stream as any status does.
func (cs *clientStream) refused(l *clientLink, id uint64) bool {
	cs.mu.Lock()
	if cs.committed.Load() || cs.ended || cs.headerDone || cs.l != l || cs.id != id {
		cs.mu.Unlock()
		return false
	}
	reopening := cs.reopening != nil
	if reopening {
		// The OPEN sent again was refused before reopen was done with
		// it: reopen goes round once more.
		cs.again = true
	} else {
		cs.reopening = make(chan struct{})
		cs.refusals++
	}
	n := cs.refusals
	cs.mu.Unlock()
	l.forgetStream(id, false)
	if !reopening {
		go cs.reopen(l, n)
	}
	return true
}

// reopen waits, after the n-th refusal in a row, for a slot on l (or a
// backoff, or l's end), and opens the stream again on the ClientConn's
// current link. It ends with the stream's context at the latest.
func (cs *clientStream) reopen(l *clientLink, n int) {
	for {
		err := l.waitForSlot(cs.ctx, n)
		for attempt := 1; err == nil; attempt++ {
			var done func(balancer.DoneInfo)
			if l, done, err = cs.cc.link(cs.ctx, cs.method, cs.ci.waitForReady, cs.stats); err != nil {
				break
			}
			if err = l.start(cs); err == nil {
				cs.setPickDone(done)
				break
			}
			if done != nil {
				done(balancer.DoneInfo{Err: err})
			}
			if err != errNotSent {
				break
			}
			cs.cc.forget(l, false)
			err = nil // the next link
			if attempt == 3 {
				err = l.CloseStatus().Err()
			}
		}
		if err != nil {
			cs.finish(status.Convert(err), true)
		}
		cs.mu.Lock()
		if err == nil && cs.again && !cs.ended {
			cs.again = false
			cs.refusals++
			n = cs.refusals
			cs.mu.Unlock()
			continue
		}
		ch := cs.reopening
		cs.reopening = nil
		cs.mu.Unlock()
		close(ch)
		return
	}
}

// waitReopened waits, with cs.mu held, until no re-open is in progress.
func (cs *clientStream) waitReopened() {
	for cs.reopening != nil {
		ch := cs.reopening
		cs.mu.Unlock()
		<-ch
		cs.mu.Lock()
	}
}

// maxKept bounds the bytes of MESSAGE frames a stream keeps until the
// server takes it: half the initial window, so that what is sent again
// always fits a new stream's window.
const maxKept = defaultWindow / 2

// accepted: the server sent a frame for the stream other than a refusal,
// so it took the stream; nothing needs keeping any more.
func (cs *clientStream) accepted() {
	if cs.committed.Load() {
		return
	}
	cs.mu.Lock()
	cs.commitLocked()
	cs.mu.Unlock()
}

// commitLocked drops the kept frames; from now on a refusal is the
// caller's to see. Called with cs.mu held.
func (cs *clientStream) commitLocked() {
	cs.committed.Store(true)
	cs.kept, cs.keptBytes = nil, 0
}

// where returns the link and id the stream is open on.
func (cs *clientStream) where() (*clientLink, uint64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.l, cs.id
}

// forgetStream removes stream id from l, and gives its slot back unless a
// RESET that ends it is still to leave (resetting: the RESET frees it); a
// draining link with nothing left closes. It reports whether l had the
// stream.
func (l *clientLink) forgetStream(id uint64, resetting bool) bool {
	l.mu.Lock()
	_, ok := l.streams[id]
	delete(l.streams, id)
	retire := l.idleDraining()
	l.mu.Unlock()
	if ok && !resetting {
		l.slots.Release()
	}
	if retire {
		l.retire()
	}
	return ok
}

// doneInfo is what a pick's Done is told of an attempt that ended with err
// and trailer: the server's load report in it too, parsed by the format
// a package installed (package orca's).
func doneInfo(err error, trailer metadata.MD) balancer.DoneInfo {
	return balancer.DoneInfo{Err: err, Trailer: trailer, ServerLoad: balancerload.Parse(trailer)}
}

// setPickDone makes done, the balancer's for the stream's current link,
// be called when the stream ends; one of an earlier link (the stream was
// refused there and opened again) is called now.
func (cs *clientStream) setPickDone(done func(balancer.DoneInfo)) {
	cs.mu.Lock()
	old := cs.pickDone
	cs.pickDone = done
	var st *status.Status
	var trailer metadata.MD
	if cs.ended {
		cs.pickDone, st, trailer = nil, cs.endStatus, cs.trailer
	}
	cs.mu.Unlock()
	if old != nil {
		old(balancer.DoneInfo{Err: status.Error(codes.Unavailable, "stream refused by the server; opened again")})
	}
	if st != nil && done != nil {
		done(doneInfo(st.Err(), trailer))
	}
}

// contextDone ends the stream when its context does (the caller's cancel or
// deadline, or the stream's own end): a RESET tells the server, unless the
// stream had ended anyway.
func (cs *clientStream) contextDone() {
	st := callerEnded(cs.ctx)
	if st == nil {
		st = status.New(codes.Canceled, context.Canceled.Error())
	}
	cs.finishAt(st, true, true)
}

// finish ends the stream with st (OK: io.EOF after the queued messages).
// drop throws the queued messages away (the stream failed). It reports
// whether this call ended it.
func (cs *clientStream) finish(st *status.Status, drop bool) bool {
	_, _, ok := cs.finishAt(st, drop, false)
	return ok
}

// finishAt is finish, and says the link and id the stream ended on. With
// reset, a stream it ends is reset on the server (a RESET with st).
func (cs *clientStream) finishAt(st *status.Status, drop, reset bool) (*clientLink, uint64, bool) {
	cs.mu.Lock()
	if cs.ended {
		cs.mu.Unlock()
		return nil, 0, false
	}
	l, id := cs.l, cs.id
	pickDone, trailer := cs.pickDone, cs.trailer
	cs.pickDone = nil
	cs.ended, cs.endStatus = true, st
	cs.commitLocked()
	if !cs.headerDone {
		cs.headerDone = true
		close(cs.gotHeader)
	}
	close(cs.done)
	cs.mu.Unlock()
	var err error = io.EOF
	if st.Code() != codes.OK {
		err = st.Err()
	}
	if pickDone != nil {
		pickDone(doneInfo(st.Err(), trailer))
	}
	if l != nil {
		l.attemptEnded(st.Err())
	}
	if cs.callCount.Swap(callCountEnded) == callCountMine {
		cs.cc.chz.Calls.End(st.Code() == codes.OK)
	}
	if drop {
		cs.release(l, cs.dropQueued(err))
		cs.endStats()
	} else {
		cs.in.End(err)
		if cs.in.Queued() {
			cs.keepUnread() // End is reported once they are read or dropped
		} else if cs.recving.Load() == 0 {
			cs.endStats() // else the receive under way reports it, after its InPayload
		}
	}
	// A stream l no longer has (refused, being opened again) needs no
	// RESET: the server does not have it either.
	if l.forgetStream(id, reset) && reset {
		l.QueueEnd(wire.AppendReset(nil, id, uint32(st.Code()), st.Message()))
	}
	cs.cancel()
	return l, id, true
}

// release gives the bytes of dropped messages back to l, the link they
// came on.
func (cs *clientStream) release(l *clientLink, msgs [][]byte) {
	for _, m := range msgs {
		l.held.Add(-int64(conn.PayloadCost(m)))
		l.ConnFree(conn.PayloadCost(m))
		putMessage(m)
	}
}

// keepUnread: the stream ended with messages nobody has read yet. They wait
// for RecvMsg, counted in the link's held, until the caller abandons the
// stream as gRPC-go's ClientStream lets it: its context done (cancel or
// deadline), or RecvMsg returned a final error. Then they are dropped.
func (cs *clientStream) keepUnread() {
	stop := context.AfterFunc(cs.parent, func() {
		st := callerEnded(cs.parent)
		if st == nil {
			st = status.New(codes.Canceled, context.Canceled.Error())
		}
		cs.discard(st.Err())
	})
	cs.mu.Lock()
	if cs.abandoned {
		cs.mu.Unlock()
		stop()
		return
	}
	cs.stopDrop = stop
	cs.mu.Unlock()
}

// discard abandons an ended stream's unread messages: they are dropped,
// and when there were some RecvMsg returns err from now on. The drop
// waiting for the caller's context is stopped, so that a long-lived context
// keeps nothing of the stream.
func (cs *clientStream) discard(err error) {
	cs.mu.Lock()
	cs.abandoned = true
	stop := cs.stopDrop
	cs.stopDrop = nil
	l := cs.l
	cs.mu.Unlock()
	if stop != nil {
		stop()
	}
	cs.release(l, cs.in.Drop(err))
	cs.endStats()
}

// endStats reports the stream's InTrailer (when it came) and End, once it
// has ended and its messages were read: as gRPC-go's, after the last
// InPayload.
func (cs *clientStream) endStats() {
	if cs.stats == nil {
		return
	}
	cs.mu.Lock()
	st, trailer, trailerLen, ended := cs.endStatus, cs.trailer, cs.stats.trailerLen, cs.ended
	cs.mu.Unlock()
	if ended {
		cs.stats.endAfterTrailer(st.Err(), trailer, trailerLen)
	}
}

// recvReported ends a receive that reported its InPayload (or failed):
// the stream's End, if the stream ended meanwhile with nothing left to
// read, is reported now.
func (cs *clientStream) recvReported() {
	if cs.recving.Add(-1) != 0 {
		return
	}
	cs.mu.Lock()
	ended := cs.ended
	cs.mu.Unlock()
	if ended && !cs.in.Queued() {
		cs.endStats()
	}
}

func (cs *clientStream) dropQueued(err error) [][]byte {
	return cs.in.DropAll(err)
}

// streamFrame routes a stream frame from the server to its stream. Frames
// for a stream the client has ended are dropped; frames for an id it never
// gave out are a protocol error.
func (l *clientLink) streamFrame(h wire.Header, body []byte, b transport.Buffer) bool {
	defer b.Release()
	l.mu.Lock()
	cs := l.streams[h.CallID]
	unknown := cs == nil && h.CallID > l.nextID
	lone := cs != nil && l.loneLocked()
	l.mu.Unlock()
	if unknown {
		l.fatal(errors.New("the server sent a " + h.Kind.String() + " frame for a stream the client never opened"))
		return false
	}
	maxMD := l.cc.opts.maxHeaderListSize
	switch h.Kind {
	case wire.KindHeaders:
		md, err := wire.ParseHeaders(body, maxMD)
		if cs == nil {
			return true
		}
		if err != nil {
			cs.reset(streamDecodeStatus("header", err))
			return true
		}
		cs.accepted()
		rc, name, ok := takeEncoding(md)
		if !ok {
			cs.reset(status.Newf(codes.Internal, "grpc: Decompressor is not installed for grpc-encoding %q", name))
			return true
		}
		cs.mu.Lock()
		cs.sawHeaders = true
		first := !cs.headerDone
		if first {
			cs.recvComp = rc
			cs.header, cs.headerDone = withContentType(md), true
			close(cs.gotHeader)
		}
		cs.mu.Unlock()
		if first && cs.stats != nil {
			cs.stats.inHeader(md, len(body)+wire.HeaderLen, "", nil)
		}
	case wire.KindMessage:
		// Every MESSAGE costs the connection's window, whatever becomes
		// of it: what is not held is given back at once.
		cost := conn.MessageCost(len(body))
		if !l.Flow.Accepts(l.held.Load()) {
			l.fatal(errPastConnWindow)
			return false
		}
		if cs == nil {
			l.ConnFree(cost)
			return true
		}
		cs.accepted()
		if len(body) > cs.ci.maxRecvSize {
			l.ConnFree(cost)
			cs.reset(status.Newf(codes.ResourceExhausted, "received message of %d bytes is larger than the limit (%d)", len(body), cs.ci.maxRecvSize))
			return true
		}
		msg := takeMessage(&b)
		// A lone stream's receiver that finds nothing queued reads for
		// itself next (readOwn): the reader goroutine leaves it the
		// turn.
		first := lone && cs.skipYield.Allow() && !cs.in.Queued()
		if cs != l.ownReader {
			l.streamHandoffs.Add(1) // before the receiver can have it
		}
		switch cs.in.Push(msg, cost) {
		case conn.Pushed:
			l.held.Add(int64(cost))
			if first {
				l.mu.Lock()
				cs.yielded.Store(l.turn.YieldLocked())
				l.mu.Unlock()
			}
		case conn.PastWindow:
			putMessage(msg)
			l.ConnFree(cost)
			l.Log.Warn("resetting a stream", zap.Uint64("stream", h.CallID), zap.String("reason", "the server sent past the stream's window"))
			cs.reset(status.New(codes.Internal, "flow control: the server sent past the stream's window"))
		case conn.PushEnded:
			putMessage(msg)
			l.ConnFree(cost)
		}
	case wire.KindTrailers:
		if len(body) > maxMD+responseOverhead {
			if cs != nil {
				cs.reset(status.Newf(codes.ResourceExhausted, "received trailers of %d bytes, larger than the limit", len(body)))
			}
			return true
		}
		r, err := wire.ParseTrailers(body, maxMD)
		if cs == nil {
			return true
		}
		if err != nil {
			cs.reset(streamDecodeStatus("trailers", err))
			return true
		}
		if r.Code == uint32(codes.Unavailable) && len(r.Trailer[refusedKey]) > 0 && cs.refused(l, h.CallID) {
			return true
		}
		cs.mu.Lock()
		first := !cs.headerDone
		if first {
			cs.header, cs.headerDone = r.Header, true
			close(cs.gotHeader)
		}
		cs.trailer = r.Trailer
		if cs.stats != nil {
			cs.stats.trailerLen = len(body) + wire.HeaderLen
		}
		cs.mu.Unlock()
		if first && cs.stats != nil {
			cs.stats.inHeader(r.Header, 0, "", nil)
		}
		cs.finish(responseStatus(r), false)
		l.freeSlot()
	case wire.KindReset:
		r, err := wire.ParseReset(body)
		if err != nil {
			l.fatal(err)
			return false
		}
		if cs != nil {
			cs.finish(status.New(codes.Code(r.Code), "stream reset by the server: "+r.Message), true)
		}
	case wire.KindWindow:
		if h.CallID == conn.ConnStream {
			if err := l.ConnWindowUpdate(body); err != nil {
				l.fatal(err)
				return false
			}
			return true
		}
		n, err := wire.ParseWindow(body)
		if err != nil {
			l.fatal(err)
			return false
		}
		if cs != nil {
			cs.accepted()
			if !cs.out.Add(n) {
				cs.reset(status.New(codes.Internal, "flow control: window updates past 2^31-1 bytes"))
			}
		}
	default: // OPEN, CLOSE_SEND: only clients send them
		l.fatal(errors.New("server sent a " + h.Kind.String() + " frame, which only clients send"))
		return false
	}
	return true
}

func streamDecodeStatus(what string, err error) *status.Status {
	if errors.Is(err, wire.ErrMetadataTooLarge) {
		return status.Newf(codes.ResourceExhausted, "stream %s: %v", what, err)
	}
	return status.Newf(codes.Internal, "malformed stream %s: %v", what, err)
}

// reset ends the stream here with st and tells the server. A stream the
// server has ended already (by its TRAILERS) drops what is still queued:
// the caller got st from RecvMsg, its final error.
func (cs *clientStream) reset(st *status.Status) {
	if _, _, ok := cs.finishAt(st, true, true); ok {
		return
	}
	cs.discard(st.Err())
}

// Header waits for the server's header.
func (cs *clientStream) Header() (metadata.MD, error) {
	<-cs.gotHeader
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.header == nil && cs.ended && cs.endStatus.Code() != codes.OK && cs.trailer == nil {
		return nil, cs.endStatus.Err()
	}
	return cs.header, nil
}

// Trailer returns the server's trailer, complete once RecvMsg failed.
func (cs *clientStream) Trailer() metadata.MD {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.trailer
}

// Context is the stream's context, done when the stream ends.
func (cs *clientStream) Context() context.Context { return cs.ctx }

// CloseSend half-closes the stream.
func (cs *clientStream) CloseSend() error {
	cs.mu.Lock()
	cs.waitReopened()
	if cs.sentClose || cs.ended {
		cs.mu.Unlock()
		return nil
	}
	// Should the server refuse the stream, the half-close is sent again
	// after its OPEN: it does not make the stream sent.
	cs.sentClose = true
	l, id := cs.l, cs.id
	cs.mu.Unlock()
	if err := l.Conn.Send(cs.ctx, wire.AppendCloseSend(nil, id)); err != nil && cs.ctx.Err() == nil {
		if nl, nid := cs.where(); nl == l && nid == id { // not opened again meanwhile
			cs.finish(conn.TransportStatus(err), true)
		}
	}
	return nil
}

// SendMsg sends m once the server's window lets it. When the stream has
// ended it returns io.EOF, and RecvMsg the stream's status.
func (cs *clientStream) SendMsg(m any) error {
	cs.mu.Lock()
	cs.waitReopened()
	closed, ended, keep := cs.sentClose, cs.ended, !cs.committed.Load()
	// A stream that is not client-streaming takes one request, as
	// gRPC-go's: the call after it fails as after CloseSend.
	closed = closed || cs.sentOne
	if !cs.desc.ClientStreams {
		cs.sentOne = true
	}
	l, id := cs.l, cs.id
	cs.mu.Unlock()
	if closed {
		return status.Error(codes.Internal, "SendMsg called after CloseSend")
	}
	if ended || !cs.out.Wait(cs.done) {
		return io.EOF
	}
	if keep {
		sc, sized := cs.codec().(SizedCodec)
		n := -1
		if sized {
			n = sc.Size(m)
		}
		if !sized || wire.HeaderLen+n <= maxKept {
			return cs.sendKept(m, n)
		}
		// Too large to keep: it goes straight into the transport's
		// memory, and a refusal from now on is the caller's to see.
		cs.mu.Lock()
		cs.waitReopened()
		cs.commitLocked()
		ended = cs.ended
		l, id = cs.l, cs.id
		cs.mu.Unlock()
		if ended {
			return io.EOF
		}
	}
	head := wire.AppendMessageHead(bufpool.Get(wire.HeaderLen)[:0], id)
	n, err := sendFrame(cs.ctx, l.Conn, cs.codec(), head, m, cs.ci.maxSendSize, nil, &l.Flow, nil)
	bufpool.Put(head)
	if err == nil {
		l.chz.MessageSent()
	}
	if err != nil {
		if _, ok := status.FromError(err); ok && cs.ctx.Err() == nil {
			return err // too large or not encodable: nothing was sent
		}
		if cs.ctx.Err() == nil {
			cs.finish(conn.TransportStatus(err), true)
		}
		return io.EOF
	}
	cs.out.Take(conn.MessageCost(n))
	if cs.stats != nil {
		cs.stats.outPayload(m, n, n+wire.HeaderLen)
	}
	return nil
}

// sendKept sends m on a stream the server has not shown it took, keeping
// the frame (within maxKept bytes for the stream) to send again should the
// server refuse the stream. n is m's size when the codec is a SizedCodec,
// else -1.
func (cs *clientStream) sendKept(m any, n int) error {
	var frame []byte
	if n >= 0 {
		frame = make([]byte, wire.HeaderLen+n)
		if err := cs.codec().(SizedCodec).MarshalTo(frame[wire.HeaderLen:], m); err != nil {
			return status.Errorf(codes.Internal, "encoding %T: %v", m, err)
		}
	} else {
		payload, err := cs.codec().Marshal(m)
		if err != nil {
			return status.Errorf(codes.Internal, "encoding %T: %v", m, err)
		}
		frame = append(make([]byte, wire.HeaderLen, wire.HeaderLen+len(payload)), payload...)
	}
	payload := frame[wire.HeaderLen:]
	cs.mu.Lock()
	cs.waitReopened() // a refusal came meanwhile: this frame goes on the new stream
	if cs.ended {
		cs.mu.Unlock()
		return io.EOF
	}
	l, id := cs.l, cs.id
	if err := checkSize(len(payload), cs.ci.maxSendSize, wire.HeaderLen, l.Conn); err != nil {
		cs.mu.Unlock()
		return err
	}
	wire.AppendMessageHead(frame[:0], id)
	if !cs.committed.Load() && cs.keptBytes+len(frame) <= maxKept {
		if cs.kept == nil {
			cs.kept = cs.keptOne[:0] // most streams keep one message
		}
		cs.kept = append(cs.kept, frame)
		cs.keptBytes += len(frame)
	} else {
		cs.commitLocked() // too much to keep: a refusal is the caller's to see
	}
	// The window is taken before the frame leaves, under the lock: a
	// refusal handled meanwhile sends it again, and counts it there.
	cs.out.Take(len(frame))
	cs.mu.Unlock()
	if !l.Flow.Acquire(cs.done, len(frame)) {
		return io.EOF
	}
	// OutPayload goes before the frame does, as gRPC-go's goes once the
	// frame is queued for its writer: reported after the send, it could
	// follow the server's answer (InHeader, reported by the reader), which
	// a loaded machine showed (TestStatsStreams).
	if cs.stats != nil {
		cs.stats.outPayload(m, len(payload), len(frame))
	}
	if err := l.Conn.Send(cs.ctx, frame); err != nil {
		l.Flow.Add(int64(len(frame)))
		if cs.ctx.Err() == nil {
			if nl, nid := cs.where(); nl == l && nid == id { // not opened again meanwhile
				cs.finish(conn.TransportStatus(err), true)
			}
		}
		return io.EOF
	}
	l.chz.MessageSent()
	return nil
}

// codec is what the stream's messages are encoded with: the client's
// codec, compressed when the call named a compressor.
func (cs *clientStream) codec() Codec { return sendCodec(cs.cc.opts.codec, cs.ci.comp) }

// RecvMsg receives the next message into m: io.EOF at the end of an OK
// stream, the status error otherwise.
func (cs *clientStream) RecvMsg(m any) error {
	err := cs.recv(m)
	if err == io.EOF && !cs.desc.ServerStreams && !cs.gotOne {
		// The stream ended OK without its one response: the server broke
		// the method's cardinality, as gRPC-go's client reports it.
		return status.Error(codes.Internal, "cardinality violation: received no response message from non-server-streaming RPC")
	}
	if err != nil || cs.desc.ServerStreams {
		return err
	}
	// One response only: the stream must end right after it.
	if cs.gotOne {
		return status.Error(codes.Internal, "RecvMsg called again on a stream with one response")
	}
	cs.gotOne = true
	switch err := cs.recv(nil); {
	case err == io.EOF:
		return nil
	case err != nil:
		return err
	}
	cs.reset(status.New(codes.Internal, "cardinality violation: more than one response on a client-streaming method"))
	return status.Error(codes.Internal, "cardinality violation: more than one response on a client-streaming method")
}

// readOwn reads the link on the receiver's goroutine until a message for
// the stream is queued (or the stream ended), when nothing is queued, the
// stream is alone on its link and the read turn is free (the reader
// goroutine left it idle after the last message, YieldLocked): as a unary
// caller reads its own response (clientturn.go), a lone stream's next
// message then costs no hand-off from the reader goroutine. Other frames
// that come meanwhile are dispatched as the reader goroutine would. The
// turn is passed on after: left idle while the stream is still alone,
// for its next RecvMsg.
func (cs *clientStream) readOwn() {
	if cs.skipYield.On() || cs.in.Settled() {
		return
	}
	l, id := cs.where()
	l.mu.Lock()
	if cs.in.Settled() {
		// Pushed meanwhile, by the reader goroutine that then left the
		// turn idle: taken, the turn would wait for a frame after it.
		l.mu.Unlock()
		return
	}
	if l.streams[id] != cs || !l.loneLocked() || l.Ctx.Err() != nil || !l.turn.TakeIdleLocked() {
		if cs.yielded.Swap(false) && !l.turn.YieldingLocked() {
			// Left the turn, the receiver found the reader goroutine
			// had taken it back for a frame that came first: frames
			// keep coming (a flood), where the reader goroutine reading
			// beside the receiver keeps both busy. (Found still about
			// to be left, it came early: its message will be handed
			// over once.)
			cs.skipYield.Start()
		}
		l.mu.Unlock()
		return
	}
	cs.yielded.Store(false)
	l.ownReader = cs
	l.mu.Unlock()
	for {
		b, err := l.RecvFrame(cs.ctx)
		if err != nil || !l.dispatch(b, nil) || cs.in.Settled() {
			break
		}
		if nl, nid := cs.where(); nl != l || nid != id {
			break // refused, and opened again elsewhere
		}
	}
	l.mu.Lock()
	l.ownReader = nil
	open := l.Ctx.Err() == nil
	if l.streams[id] == cs && l.loneLocked() && open {
		if l.turn.IdleLocked() {
			l.mu.Unlock()
			return // for the next RecvMsg
		}
		// The next frame has come already: the server sends without
		// waiting for the client (a flood), where the reader goroutine
		// reading beside the receiver keeps both busy. It takes the
		// turn, and is not asked to leave it for a while.
		cs.skipYield.Start()
	}
	l.turn.PassLocked(len(l.pending), false, open)
	l.mu.Unlock()
}

// loneLocked reports whether one stream and no call are open on l, which
// reads for that stream's receiver alone. Called with l.mu held.
func (l *clientLink) loneLocked() bool {
	return len(l.streams) == 1 && len(l.pending) == 0
}

// recv takes the next message into m (m nil: take it, decode nothing).
func (cs *clientStream) recv(m any) error {
	if cs.stats != nil {
		cs.recving.Add(1)
		defer cs.recvReported()
	}
	cs.readOwn()
	msg, grant, err, _ := cs.in.Pop(nil, conn.PayloadCost)
	if msg == nil {
		// The final error: nothing is queued, and nothing will be.
		cs.discard(err)
		return err
	}
	l, id := cs.where()
	l.held.Add(-int64(conn.PayloadCost(msg)))
	l.ConnFree(conn.PayloadCost(msg))
	if grant > 0 && !l.SendWindow(id, uint32(grant), conn.MaxQueuedCancels) {
		cs.in.Ungrant(grant)
	}
	if m != nil {
		// recvComp was set by the reader before it queued msg.
		err = decodeMsg(cs.cc.opts.codec, cs.recvComp, msg, cs.ci.maxRecvSize, m)
	}
	n := len(msg)
	putMessage(msg)
	if err != nil {
		st := status.Convert(decodeError(err, "response", m))
		cs.reset(st)
		return st.Err()
	}
	if cs.stats != nil && m != nil {
		cs.stats.inPayload(m, n, n+wire.HeaderLen)
	}
	return nil
}
