package h2server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Config is what the RPC server tells a Conn of itself.
type Config struct {
	// Unary reports whether method ("/pkg.Service/Method") is a unary
	// method of the server: its request becomes a REQUEST, any other an
	// OPEN (which the server answers Unimplemented when it has no such
	// stream).
	Unary func(method string) bool
	// MaxRecvMsgSize bounds one request message.
	MaxRecvMsgSize int
	// MaxHeaderListSize bounds a request's header list
	// (SETTINGS_MAX_HEADER_LIST_SIZE, enforced on decoding).
	MaxHeaderListSize uint32
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS.
	MaxConcurrentStreams uint32
	// StreamWindow and ConnWindow are the HTTP/2 receive windows of each
	// stream and of the connection. Defaults 65535 and 16 MiB.
	StreamWindow, ConnWindow int32
	// MaxResets is how many more streams the client may reset (or open
	// past MAX_CONCURRENT_STREAMS) than it lets finish before the
	// connection is closed with GOAWAY ENHANCE_YOUR_CALM (rapid reset,
	// CVE-2023-44487). Default 1000.
	MaxResets int
	// CloseGrace bounds how long Close waits to write what is queued.
	// Default 2 s.
	CloseGrace time.Duration
	Log        *zap.Logger
}

// Limits of what the writer holds for the reader: control frames (SETTINGS
// and PING acks, window updates, resets) queued beyond it stop the reading
// until the client reads, so a flood costs no memory.
const maxQueuedControl = 256

// sendWindow is the rdmarpc connection window this side announces to the
// server: what of the server's stream messages may wait here for the
// client's HTTP/2 windows.
const sendWindow = 4 << 20

// Conn is one HTTP/2 client connection, served as rdmarpc frames.
type Conn struct {
	fc   transport.Conn // the accepted connection: Close, Done, addresses
	nc   net.Conn
	cfg  Config
	rfr  *http2.Framer // the reader's
	wfr  *http2.Framer // the writer's
	bw   *bufio.Writer
	henc *hpack.Encoder
	hbuf bytes.Buffer
	// acceptEnc is the grpc-accept-encoding of the responses: the
	// compressors registered when the connection came, "" for none.
	acceptEnc string

	received atomic.Uint64
	wg       sync.WaitGroup // the reader and the writer
	done     chan struct{}

	mu        sync.Mutex
	rcond     *sync.Cond // the reader waits for the control queue to shorten
	wcond     *sync.Cond // the writer waits for something to write
	recvq     [][]byte   // frames for Recv
	notify    chan struct{}
	closed    bool
	closeErr  error
	closing   bool // Close is flushing
	ctrl      []func() error
	outs      []*stream // streams with something to write
	streams   map[uint32]*stream
	maxID     uint32
	goAway    bool      // a GOAWAY went out: no new streams
	writing   bool      // the writer holds frames it took from the queues and has not flushed
	retry     []*stream // unary calls refused by the server, to send again
	sentGoAwy bool

	peerWindow  int32 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame   uint32
	peerTable   uint32
	tableChange bool
	sendConn    int64 // the client's connection window for DATA
	srvConn     int64 // the server's rdmarpc connection credit
	connInFl    int64 // bytes received on the connection not yet granted back
	srvGrant    int64 // rdmarpc connection window owed to the server
	streamWin   int64 // the streams' receive window announced now: cfg.StreamWindow, grown by bdp
	bdp         *grpcwire.BDP
	resets      int
}

type outKind uint8

const (
	outHeaders outKind = iota
	outData
	outTrailers
	outReset
)

type outItem struct {
	kind   outKind
	fields []hpack.HeaderField
	data   []byte
	cost   int // rdmarpc window to grant back once written (a MESSAGE)
	end    bool
	code   http2.ErrCode
}

type stream struct {
	id    uint32
	req   request
	unary bool
	start time.Time

	// client → server
	pre      [grpcwire.PrefixLen]byte
	npre     int
	want     int    // the message's length once its prefix is in, else -1
	msg      []byte // the message being assembled
	msgs     int
	body     []byte   // a unary request's message
	ended    bool     // END_STREAM seen
	pending  [][]byte // frames waiting for the server's credit, in order
	held     int64    // HTTP/2 bytes of pending messages
	inflight int64    // HTTP/2 bytes received and not granted back
	credit   int64    // the server's rdmarpc window for this stream
	opened   bool     // the server knows the stream (OPEN or REQUEST delivered)

	// server → client
	sendWin     int64
	out         []outItem
	queued      bool // in c.outs
	headersSent bool
	srvDone     bool // the server ended it
	grant       int64
	respEnc     bool // the response headers named a compressor: messages are flagged compressed
}

// New serves fc, whose client sent HTTP/2's client preface, as a
// transport.Conn of rdmarpc frames. It writes the server's SETTINGS at once.
func New(fc transport.Foreign, cfg Config) *Conn {
	if cfg.StreamWindow <= 0 {
		cfg.StreamWindow = 65535
	}
	if cfg.ConnWindow < 65535 {
		cfg.ConnWindow = 16 << 20
	}
	if cfg.MaxResets <= 0 {
		cfg.MaxResets = 1000
	}
	if cfg.CloseGrace <= 0 {
		cfg.CloseGrace = 2 * time.Second
	}
	if cfg.MaxHeaderListSize == 0 {
		cfg.MaxHeaderListSize = 16 << 10
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	nc := fc.NetConn()
	c := &Conn{
		fc: fc, nc: nc, cfg: cfg,
		bw:         bufio.NewWriterSize(nc, 32<<10),
		done:       make(chan struct{}),
		notify:     make(chan struct{}, 1),
		streams:    make(map[uint32]*stream),
		peerWindow: 65535,
		peerFrame:  16384,
		sendConn:   65535,
		srvConn:    wire.MinConnectionWindow,
		acceptEnc:  grpcwire.AcceptEncoding(),
	}
	c.streamWin = int64(cfg.StreamWindow)
	c.bdp = grpcwire.NewBDP(uint32(cfg.StreamWindow), uint32(min(grpcwire.MaxBDPWindow, cfg.ConnWindow)))
	c.rcond = sync.NewCond(&c.mu)
	c.wcond = sync.NewCond(&c.mu)
	c.rfr = http2.NewFramer(nil, countingReader{nc, &c.received})
	c.rfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.rfr.MaxHeaderListSize = cfg.MaxHeaderListSize
	c.rfr.SetMaxReadFrameSize(1 << 20)
	c.wfr = http2.NewFramer(c.bw, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	// The client's side of rdmarpc's SETTINGS exchange.
	c.recvq = append(c.recvq, wire.AppendSettings(nil, wire.Settings{ConnectionWindow: sendWindow}))
	c.notify <- struct{}{}
	settings := []http2.Setting{
		{ID: http2.SettingInitialWindowSize, Val: uint32(cfg.StreamWindow)},
		{ID: http2.SettingMaxHeaderListSize, Val: cfg.MaxHeaderListSize},
		{ID: http2.SettingMaxFrameSize, Val: 1 << 20},
	}
	if cfg.MaxConcurrentStreams > 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: cfg.MaxConcurrentStreams})
	}
	c.ctrl = append(c.ctrl, func() error {
		if err := c.wfr.WriteSettings(settings...); err != nil {
			return err
		}
		if d := cfg.ConnWindow - 65535; d > 0 {
			return c.wfr.WriteWindowUpdate(0, uint32(d))
		}
		return nil
	})
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c
}

type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n.Add(uint64(n))
	return n, err
}

// deliver queues an rdmarpc frame for Recv (c.mu held).
func (c *Conn) deliver(f []byte) {
	c.recvq = append(c.recvq, f)
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// control queues a control frame for the writer (c.mu held).
func (c *Conn) control(f func() error) {
	c.ctrl = append(c.ctrl, f)
	c.wcond.Broadcast()
}

// fail ends the connection for err without waiting (c.mu held).
func (c *Conn) fail(err error) {
	if c.closed {
		return
	}
	c.closed = true
	c.closeErr = err
	c.rcond.Broadcast()
	c.wcond.Broadcast()
	close(c.done)
	// Unblocks the reader and the writer; Close waits for them and
	// closes the connection.
	_ = c.nc.SetDeadline(time.Unix(1, 0))
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// goAwayAndFail sends GOAWAY with code and debug, then ends the
// connection (c.mu held).
func (c *Conn) goAwayAndFail(code http2.ErrCode, debug string) {
	if c.closed {
		return
	}
	last := c.maxID
	c.sentGoAwy, c.goAway = true, true
	c.control(func() error {
		err := c.wfr.WriteGoAway(last, code, []byte(debug))
		if err == nil {
			err = c.bw.Flush()
		}
		c.mu.Lock()
		c.fail(fmt.Errorf("%w: %s", transport.ErrProtocol, debug))
		c.mu.Unlock()
		return err
	})
}

// readLoop reads the client's frames until the connection ends.
func (c *Conn) readLoop() {
	defer c.wg.Done()
	first := true
	for {
		f, err := c.rfr.ReadFrame()
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		if err != nil {
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &ce):
				c.goAwayAndFail(http2.ErrCode(ce), "HTTP/2 protocol error: "+err.Error())
			case errors.Is(err, http2.ErrFrameTooLarge):
				c.goAwayAndFail(http2.ErrCodeFrameSize, "frame too large")
			default:
				var se http2.StreamError
				if errors.As(err, &se) {
					c.resetStream(se.StreamID, se.Code)
					c.mu.Unlock()
					continue
				}
				c.fail(transport.Closed(err))
			}
			c.mu.Unlock()
			return
		}
		if first {
			if _, ok := f.(*http2.SettingsFrame); !ok {
				c.goAwayAndFail(http2.ErrCodeProtocol, "the client's first frame is not SETTINGS")
				c.mu.Unlock()
				return
			}
			first = false
		}
		c.frame(f)
		for !c.closed && len(c.ctrl) > maxQueuedControl {
			c.rcond.Wait()
		}
		c.mu.Unlock()
	}
}

// frame handles one frame from the client (c.mu held).
func (c *Conn) frame(f http2.Frame) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}
		c.settings(f)
	case *http2.MetaHeadersFrame:
		c.headers(f)
	case *http2.DataFrame:
		c.data(f)
	case *http2.RSTStreamFrame:
		c.clientReset(f.StreamID)
	case *http2.WindowUpdateFrame:
		c.windowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			if f.Data == grpcwire.BDPPing {
				c.bdpAck()
				return
			}
			c.deliver(wire.AppendPing(nil, true, 0))
			return
		}
		data := f.Data
		c.control(func() error { return c.wfr.WritePing(true, data) })
		if len(c.streams) == 0 {
			// The server's keepalive policy judges the client's pings
			// without calls (gRPC-go's clients ping during calls to
			// measure the bandwidth-delay product).
			c.deliver(wire.AppendPing(nil, false, 0))
		}
	case *http2.GoAwayFrame:
		// The client closes when it is done; nothing to tell the server.
	case *http2.PushPromiseFrame:
		c.goAwayAndFail(http2.ErrCodeProtocol, "PUSH_PROMISE from a client")
	}
}

func (c *Conn) settings(f *http2.SettingsFrame) {
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - int64(c.peerWindow)
			c.peerWindow = int32(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
			}
			c.wcond.Broadcast()
		case http2.SettingMaxFrameSize:
			c.peerFrame = s.Val
		case http2.SettingHeaderTableSize:
			c.peerTable, c.tableChange = s.Val, true
		}
		return nil
	})
	if err != nil {
		var ce http2.ConnectionError
		code := http2.ErrCodeProtocol
		if errors.As(err, &ce) {
			code = http2.ErrCode(ce)
		}
		c.goAwayAndFail(code, "bad SETTINGS: "+err.Error())
		return
	}
	c.control(func() error { return c.wfr.WriteSettingsAck() })
}

// headers starts a stream, or ends one with trailers.
func (c *Conn) headers(f *http2.MetaHeadersFrame) {
	id := f.StreamID
	if st := c.streams[id]; st != nil {
		// Trailers from the client: only END_STREAM matters.
		if !f.StreamEnded() {
			c.resetStream(id, http2.ErrCodeProtocol)
			return
		}
		c.endOfStream(st)
		return
	}
	if id%2 == 0 {
		c.goAwayAndFail(http2.ErrCodeProtocol, "HEADERS on an even stream id")
		return
	}
	if id <= c.maxID {
		// A stream that is over: a stream error.
		c.control(func() error { return c.wfr.WriteRSTStream(id, http2.ErrCodeStreamClosed) })
		return
	}
	c.maxID = id
	if c.goAway {
		c.control(func() error { return c.wfr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
		return
	}
	if c.cfg.MaxConcurrentStreams > 0 && len(c.streams) >= int(c.cfg.MaxConcurrentStreams) {
		c.control(func() error { return c.wfr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
		c.strike()
		return
	}
	st := &stream{id: id, start: time.Now(), want: -1, credit: conn64k, sendWin: int64(c.peerWindow)}
	c.streams[id] = st
	if f.Truncated {
		c.refuse(st, &refusal{code: codes.ResourceExhausted, msg: fmt.Sprintf("request header list larger than the limit of %d bytes", c.cfg.MaxHeaderListSize)})
		return
	}
	req, ref := decodeRequest(f.Fields)
	if ref != nil {
		c.refuse(st, ref)
		return
	}
	st.req = req
	st.unary = c.cfg.Unary != nil && c.cfg.Unary(req.method)
	if !st.unary {
		st.opened = true
		c.deliver(wire.AppendOpen(nil, uint64(id), 0, req.timeout, req.method, req.md))
	}
	if f.StreamEnded() {
		c.endOfStream(st)
	}
}

// bdpAck takes the ack of the BDP PING: when the estimate grew, every
// stream's window grows to it (SETTINGS_INITIAL_WINDOW_SIZE changes the
// open streams' windows too). The connection's window bounds the growth,
// so what a connection holds stays within it (c.mu held).
func (c *Conn) bdpAck() {
	w := c.bdp.Acked(time.Now())
	if w == 0 {
		return
	}
	c.streamWin = int64(w)
	c.control(func() error {
		return c.wfr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: w})
	})
}

// conn64k is the rdmarpc stream window each side starts with.
const conn64k = 65536

// refuse answers a stream that cannot run (c.mu held): trailers-only with
// a gRPC status, or an HTTP status.
func (c *Conn) refuse(st *stream, r *refusal) {
	st.srvDone = true
	if r.httpStatus != 0 {
		st.push(c, outItem{kind: outHeaders, end: true, fields: []hpack.HeaderField{
			{Name: ":status", Value: strconv.Itoa(r.httpStatus)},
			{Name: "content-type", Value: "text/plain"},
			{Name: "grpc-status", Value: strconv.Itoa(int(grpcwire.CodeForHTTPStatus(r.httpStatus)))},
			{Name: "grpc-message", Value: grpcwire.EncodeMessage(r.msg)},
		}})
		return
	}
	st.push(c, outItem{kind: outTrailers, end: true, fields: c.trailerFields(st, uint32(r.code), r.msg, nil, nil)})
}

// strike counts a reset or refused stream; past the limit, the connection
// ends with ENHANCE_YOUR_CALM (c.mu held).
func (c *Conn) strike() {
	c.resets++
	if c.resets > c.cfg.MaxResets {
		c.cfg.Log.Warn("closing an HTTP/2 connection that resets too many streams", zap.Stringer("peer", c.nc.RemoteAddr()), zap.Int("resets", c.resets))
		c.goAwayAndFail(http2.ErrCodeEnhanceYourCalm, "too many streams reset")
	}
}

// data takes a DATA frame's messages.
func (c *Conn) data(f *http2.DataFrame) {
	n := int64(f.Length)
	c.connInFl += n
	if c.connInFl > int64(c.cfg.ConnWindow) {
		c.goAwayAndFail(http2.ErrCodeFlowControl, "DATA past the connection's window")
		return
	}
	// The connection's window comes back as bytes arrive; the streams'
	// bound what is held.
	if c.connInFl >= int64(c.cfg.ConnWindow)/4 {
		g := uint32(c.connInFl)
		c.connInFl = 0
		c.control(func() error { return c.wfr.WriteWindowUpdate(0, g) })
	}
	if n > 0 && c.bdp.Received(int(n), time.Now()) {
		c.control(func() error { return c.wfr.WritePing(false, grpcwire.BDPPing) })
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxID || f.StreamID == 0 {
			c.goAwayAndFail(http2.ErrCodeProtocol, "DATA on an idle stream")
		}
		return
	}
	if st.ended {
		c.resetStream(st.id, http2.ErrCodeStreamClosed)
		return
	}
	st.inflight += n
	if st.inflight > c.streamWin {
		c.resetStream(st.id, http2.ErrCodeFlowControl)
		return
	}
	if !st.srvDone {
		if !c.messages(st, f.Data()) {
			return
		}
	}
	c.grantStream(st)
	if f.StreamEnded() {
		c.endOfStream(st)
	}
}

// messages cuts b into gRPC messages for st; false when the stream failed.
func (c *Conn) messages(st *stream, b []byte) bool {
	for len(b) > 0 {
		if st.want < 0 {
			k := copy(st.pre[st.npre:], b)
			st.npre += k
			b = b[k:]
			if st.npre < grpcwire.PrefixLen {
				return true
			}
			compressed, n, err := grpcwire.ParsePrefix(st.pre, c.cfg.MaxRecvMsgSize)
			switch {
			case errors.Is(err, grpcwire.ErrTooLarge):
				c.failStream(st, codes.ResourceExhausted, fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", int64(n), c.cfg.MaxRecvMsgSize))
				return false
			case err != nil:
				c.failStream(st, codes.Internal, err.Error())
				return false
			case compressed && st.req.encoding == "":
				c.failStream(st, codes.Internal, "grpc: compressed message without a grpc-encoding")
				return false
			}
			st.want = n
			st.msg = make([]byte, st.head(), st.head()+min(n, 64<<10))
		}
		head := st.head()
		k := min(len(b), st.want-(len(st.msg)-head))
		st.msg = grpcwire.AppendPart(st.msg, b[:k], head+st.want)
		b = b[k:]
		if len(st.msg)-head == st.want {
			msg := st.msg
			st.msg, st.want, st.npre = nil, -1, 0
			if st.pre[0] == 0 && st.req.encoding != "" {
				z, _, err := grpcwire.Compress(st.req.encoding, msg[head:])
				if err != nil {
					c.failStream(st, codes.Internal, fmt.Sprintf("grpc: compressing an uncompressed message of a %s request: %v", st.req.encoding, err))
					return false
				}
				msg = append(msg[:head:head], z...)
			}
			if !c.message(st, msg) {
				return false
			}
		}
	}
	return true
}

// head is the room a message of st is assembled behind: a streaming
// method's become MESSAGE frames in place, a unary request's is its
// REQUEST's payload.
func (st *stream) head() int {
	if st.unary {
		return 0
	}
	return wire.HeaderLen
}

// message hands one whole message towards the server: for a unary
// method the payload, else the payload behind room for the MESSAGE
// frame's header.
func (c *Conn) message(st *stream, msg []byte) bool {
	st.msgs++
	if st.unary {
		if st.msgs > 1 {
			c.failStream(st, codes.Internal, "grpc: a unary method's request has more than one message")
			return false
		}
		st.body = msg // the REQUEST is built at END_STREAM
		return true
	}
	wire.AppendMessageHead(msg[:0], uint64(st.id))
	st.pending = append(st.pending, msg)
	st.held += int64(grpcwire.PrefixLen + len(msg) - wire.HeaderLen)
	c.flushPending(st)
	return true
}

// endOfStream: the client sends no more.
func (c *Conn) endOfStream(st *stream) {
	if st.ended {
		return
	}
	st.ended = true
	if st.srvDone {
		c.maybeForget(st)
		return
	}
	if st.want >= 0 || st.npre > 0 {
		c.failStream(st, codes.Internal, "grpc: the request ended inside a message")
		return
	}
	if st.unary {
		if st.msgs != 1 {
			c.failStream(st, codes.Internal, fmt.Sprintf("grpc: a unary method's request has %d messages, not 1", st.msgs))
			return
		}
		c.sendRequest(st)
		return
	}
	st.pending = append(st.pending, wire.AppendCloseSend(nil, uint64(st.id)))
	c.flushPending(st)
}

// sendRequest queues st's REQUEST for the server. The message stays with
// st until the server answers, to be sent again if the server refuses it.
func (c *Conn) sendRequest(st *stream) {
	timeout := st.req.timeout
	if timeout > 0 {
		timeout = max(1, timeout-time.Since(st.start))
	}
	f := wire.AppendRequestHead(make([]byte, 0, 64+len(st.body)), uint64(st.id), timeout, st.req.method, st.req.md)
	f = append(f, st.body...)
	st.pending = append(st.pending, f)
	c.flushPending(st)
}

// refused holds a unary call the server refused for want of room
// (docs/wire.md, "The refusal mark") until another call ends, as rdmarpc's
// client does: an HTTP/2 client that keeps to MAX_CONCURRENT_STREAMS is
// never refused. It reports false when no other call runs to wait for.
func (c *Conn) refused(st *stream) bool {
	for _, o := range c.streams {
		if o != st && o.opened && !o.srvDone {
			st.opened = false
			c.retry = append(c.retry, st)
			return true
		}
	}
	return false
}

// retryRefused sends the refused calls again: a call ended.
func (c *Conn) retryRefused() {
	retry := c.retry
	c.retry = nil
	for _, st := range retry {
		if c.streams[st.id] == st && !st.srvDone {
			c.sendRequest(st)
		}
	}
}

// flushPending delivers st's pending frames the server has credit for.
func (c *Conn) flushPending(st *stream) {
	for len(st.pending) > 0 {
		f := st.pending[0]
		h, _, _ := wire.ParseHeader(f)
		switch h.Kind {
		case wire.KindMessage:
			if st.credit <= 0 || c.srvConn <= 0 {
				return
			}
			st.credit -= int64(len(f))
			c.srvConn -= int64(len(f))
			st.held -= int64(grpcwire.PrefixLen + len(f) - wire.HeaderLen)
		case wire.KindRequest:
			if c.srvConn <= 0 {
				return
			}
			c.srvConn -= int64(len(f))
			st.opened = true
		}
		st.pending[0] = nil
		st.pending = st.pending[1:]
		c.deliver(f)
	}
	st.pending = nil
	c.grantStream(st)
}

// grantStream gives the client back the stream window of what is not held.
func (c *Conn) grantStream(st *stream) {
	g := st.inflight - st.held
	// In updates of a quarter window at least: a client whose window is
	// spent has a quarter not held, or waits for the server to read.
	if st.ended || g < c.streamWin/4 {
		return
	}
	st.inflight -= g
	id := st.id
	c.control(func() error { return c.wfr.WriteWindowUpdate(id, uint32(g)) })
}

// failStream ends st with a status the server never saw or the server
// must forget (c.mu held).
func (c *Conn) failStream(st *stream, code codes.Code, msg string) {
	c.tellServerGone(st)
	st.pending, st.held, st.msg = nil, 0, nil
	if st.srvDone {
		return
	}
	st.srvDone = true
	st.out = nil
	kind := outTrailers
	st.push(c, outItem{kind: kind, end: true, fields: c.trailerFields(st, uint32(code), msg, nil, nil)})
}

// tellServerGone ends the server's side of st, if it has one.
func (c *Conn) tellServerGone(st *stream) {
	if !st.opened || st.srvDone {
		return
	}
	if st.unary {
		c.deliver(wire.AppendCancel(nil, uint64(st.id)))
	} else {
		c.deliver(wire.AppendReset(nil, uint64(st.id), uint32(codes.Canceled), "the client reset the stream"))
	}
	st.opened = false
}

// clientReset: RST_STREAM from the client cancels the call.
func (c *Conn) clientReset(id uint32) {
	st := c.streams[id]
	if st == nil {
		if id > c.maxID {
			c.goAwayAndFail(http2.ErrCodeProtocol, "RST_STREAM on an idle stream")
		}
		return
	}
	if !st.srvDone {
		c.strike()
	}
	c.tellServerGone(st)
	c.forget(st)
}

// resetStream resets st with code (c.mu held).
func (c *Conn) resetStream(id uint32, code http2.ErrCode) {
	if st := c.streams[id]; st != nil {
		c.tellServerGone(st)
		c.forget(st)
	}
	c.control(func() error { return c.wfr.WriteRSTStream(id, code) })
}

func (c *Conn) forget(st *stream) {
	st.srvDone, st.ended = true, true
	st.out, st.pending = nil, nil
	delete(c.streams, st.id)
}

// maybeForget forgets st once both sides are done and its frames written.
func (c *Conn) maybeForget(st *stream) {
	if st.srvDone && st.ended && len(st.out) == 0 {
		delete(c.streams, st.id)
	}
}

func (c *Conn) windowUpdate(f *http2.WindowUpdateFrame) {
	if f.StreamID == 0 {
		c.sendConn += int64(f.Increment)
		if c.sendConn > math.MaxInt32 {
			c.goAwayAndFail(http2.ErrCodeFlowControl, "connection window past 2^31-1")
			return
		}
		c.wcond.Broadcast()
		return
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return
	}
	st.sendWin += int64(f.Increment)
	if st.sendWin > math.MaxInt32 {
		c.resetStream(st.id, http2.ErrCodeFlowControl)
		return
	}
	c.wcond.Broadcast()
}

// push queues an item for the writer (c.mu held).
func (st *stream) push(c *Conn, it outItem) {
	st.out = append(st.out, it)
	if !st.queued {
		st.queued = true
		c.outs = append(c.outs, st)
	}
	c.wcond.Broadcast()
}

// trailerFields are the fields of a stream's end: trailers, or a
// trailers-only response when nothing was sent before.
func (c *Conn) trailerFields(st *stream, code uint32, msg string, details [][]byte, trailer metadata.MD) []hpack.HeaderField {
	var fs []hpack.HeaderField
	if !st.headersSent {
		st.headersSent = true
		ct := st.req.contentType
		if ct == "" {
			ct = "application/grpc"
		}
		fs = append(fs, hpack.HeaderField{Name: ":status", Value: "200"}, hpack.HeaderField{Name: "content-type", Value: ct})
		fs = c.appendAcceptEncoding(fs)
	}
	fs = append(fs, hpack.HeaderField{Name: "grpc-status", Value: strconv.FormatUint(uint64(code), 10)})
	if msg != "" {
		fs = append(fs, hpack.HeaderField{Name: "grpc-message", Value: grpcwire.EncodeMessage(msg)})
	}
	if len(details) > 0 {
		fs = append(fs, hpack.HeaderField{Name: "grpc-status-details-bin", Value: grpcwire.EncodeBinary(statusProto(code, msg, details))})
	}
	return grpcwire.AppendMetadata(fs, trailer)
}

// statusProto is a google.rpc.Status: code, message and the details, each
// a serialized google.protobuf.Any.
func statusProto(code uint32, msg string, details [][]byte) []byte {
	var b []byte
	if code != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(code))
	}
	if msg != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, msg)
	}
	for _, d := range details {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

func (c *Conn) headerFields(st *stream, header metadata.MD) []hpack.HeaderField {
	st.headersSent = true
	ct := st.req.contentType
	if ct == "" {
		ct = "application/grpc"
	}
	fs := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: ct}}
	if v := header["grpc-encoding"]; len(v) > 0 && grpcwire.Encoding(v[0]) != "" {
		// The server compresses what it sends (rpc/compress.go).
		st.respEnc = true
		fs = append(fs, hpack.HeaderField{Name: "grpc-encoding", Value: v[0]})
	}
	fs = c.appendAcceptEncoding(fs)
	return grpcwire.AppendMetadata(fs, header)
}

// appendAcceptEncoding adds to a response's headers the compressors the
// server takes (PROTOCOL-HTTP2.md's Message-Accept-Encoding), so that a
// client knows which it may use.
func (c *Conn) appendAcceptEncoding(fs []hpack.HeaderField) []hpack.HeaderField {
	if c.acceptEnc == "" {
		return fs
	}
	return append(fs, hpack.HeaderField{Name: "grpc-accept-encoding", Value: c.acceptEnc})
}

// refusedKey marks a server's refusal (docs/wire.md, "The refusal mark").
const refusedKey = "rdmarpc-refused"

// Send takes one rdmarpc frame from the server.
func (c *Conn) Send(_ context.Context, f []byte) error {
	h, body, err := wire.ParseHeader(f)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return transport.Closed(c.closeErr)
	}
	id := uint32(h.CallID)
	switch h.Kind {
	case wire.KindSettings:
		s, err := wire.ParseSettings(body)
		if err != nil {
			return err
		}
		if s.ConnectionWindow != 0 {
			c.srvConn += int64(s.ConnectionWindow) - wire.MinConnectionWindow
			c.flushAll()
		}
	case wire.KindPing:
		c.control(func() error { return c.wfr.WritePing(false, [8]byte{'r', 'd', 'm', 'a', 'r', 'p', 'c', 0}) })
	case wire.KindPong:
		// The client's PING was answered when it came.
	case wire.KindGoAway:
		ga, err := wire.ParseGoAway(body)
		if err != nil {
			return err
		}
		code := http2.ErrCodeNo
		switch codes.Code(ga.Code) {
		case codes.OK:
		case codes.ResourceExhausted:
			code = http2.ErrCodeEnhanceYourCalm
		case codes.Unavailable:
			code = http2.ErrCodeNo
		default:
			code = http2.ErrCodeInternal
		}
		if !c.sentGoAwy || code != http2.ErrCodeNo {
			c.sentGoAwy, c.goAway = true, true
			last := c.maxID
			msg := ga.Message
			c.control(func() error { return c.wfr.WriteGoAway(last, code, []byte(msg)) })
		}
	case wire.KindWindow:
		n, err := wire.ParseWindow(body)
		if err != nil {
			return err
		}
		if id == 0 {
			c.srvConn += int64(n)
			c.flushAll()
			return nil
		}
		if st := c.streams[id]; st != nil {
			st.credit += int64(n)
			c.flushPending(st)
		}
	case wire.KindHeaders:
		md, err := wire.ParseHeaders(body, math.MaxInt32)
		if err != nil {
			return err
		}
		if st := c.live(id); st != nil && !st.headersSent {
			st.push(c, outItem{kind: outHeaders, fields: c.headerFields(st, md)})
		}
	case wire.KindMessage:
		st := c.live(id)
		if st == nil {
			// Its window comes back: the message is dropped.
			c.grantServer(nil, len(f))
			return nil
		}
		if !st.headersSent {
			st.push(c, outItem{kind: outHeaders, fields: c.headerFields(st, nil)})
		}
		d := grpcwire.AppendPrefix(make([]byte, 0, grpcwire.PrefixLen+len(body)), st.respEnc, len(body))
		st.push(c, outItem{kind: outData, data: append(d, body...), cost: len(f)})
	case wire.KindResponse, wire.KindTrailers:
		var r wire.Response
		if h.Kind == wire.KindResponse {
			r, err = wire.ParseResponse(body, math.MaxInt32)
		} else {
			r, err = wire.ParseTrailers(body, math.MaxInt32)
		}
		if err != nil {
			return err
		}
		st := c.live(id)
		if st == nil {
			return nil
		}
		if codes.Code(r.Code) == codes.Unavailable && len(r.Trailer[refusedKey]) > 0 && !st.headersSent {
			if h.Kind == wire.KindResponse && c.refused(st) {
				return nil
			}
			st.srvDone = true
			st.out = nil
			st.push(c, outItem{kind: outReset, code: http2.ErrCodeRefusedStream})
			return nil
		}
		st.srvDone = true
		st.body = nil
		if len(c.retry) > 0 {
			c.retryRefused()
		}
		delete(r.Trailer, refusedKey)
		if c.resets > 0 {
			c.resets--
		}
		if h.Kind == wire.KindResponse && r.Code == 0 {
			if st.headersSent {
				return fmt.Errorf("%w: a RESPONSE on stream %d after its HEADERS", transport.ErrProtocol, id)
			}
			st.push(c, outItem{kind: outHeaders, fields: c.headerFields(st, r.Header)})
			d := grpcwire.AppendPrefix(make([]byte, 0, grpcwire.PrefixLen+len(r.Payload)), st.respEnc, len(r.Payload))
			st.push(c, outItem{kind: outData, data: append(d, r.Payload...)})
		}
		if !st.headersSent && len(r.Header) > 0 {
			// Header metadata goes in headers of its own, as gRPC-go's
			// server sends it: a trailers-only response has none.
			st.push(c, outItem{kind: outHeaders, fields: c.headerFields(st, r.Header)})
		}
		st.push(c, outItem{kind: outTrailers, end: true, fields: c.trailerFields(st, r.Code, r.Message, r.Details, r.Trailer)})
	case wire.KindReset:
		r, err := wire.ParseReset(body)
		if err != nil {
			return err
		}
		st := c.live(id)
		if st == nil {
			return nil
		}
		st.srvDone, st.opened = true, false
		st.out = nil
		st.push(c, outItem{kind: outTrailers, end: true, fields: c.trailerFields(st, r.Code, r.Message, nil, nil)})
	default:
		return fmt.Errorf("%w: the server sent a %v frame", transport.ErrProtocol, h.Kind)
	}
	return nil
}

// live is the stream id if the server may still send on it (c.mu held).
func (c *Conn) live(id uint32) *stream {
	st := c.streams[id]
	if st == nil || st.srvDone {
		return nil
	}
	return st
}

// flushAll delivers what waited for the server's connection credit.
func (c *Conn) flushAll() {
	for _, st := range c.streams {
		if len(st.pending) > 0 {
			c.flushPending(st)
		}
	}
}

// grantServer gives the server back the rdmarpc window of a message
// written (or dropped), in batches (c.mu held).
func (c *Conn) grantServer(st *stream, n int) {
	c.srvGrant += int64(n)
	if c.srvGrant >= sendWindow/4 {
		c.deliver(wire.AppendWindow(nil, 0, uint32(c.srvGrant)))
		c.srvGrant = 0
	}
	if st == nil {
		return
	}
	st.grant += int64(n)
	if st.grant >= conn64k/4 {
		c.deliver(wire.AppendWindow(nil, uint64(st.id), uint32(st.grant)))
		st.grant = 0
	}
}

// writeLoop writes control frames and the streams' frames, as the
// client's windows allow, until the connection ends.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	var ctrl []func() error
	type wr struct {
		st *stream
		it outItem
	}
	var work []wr
	for {
		c.mu.Lock()
		for {
			if c.closed {
				c.mu.Unlock()
				return
			}
			ctrl, c.ctrl = c.ctrl, ctrl[:0]
			c.rcond.Broadcast()
			work = work[:0]
			// Each stream with something to write, round robin: its
			// frames up to the first DATA the windows stop.
			outs := c.outs[:0]
			for _, st := range c.outs {
				for len(st.out) > 0 {
					it := st.out[0]
					if it.kind == outData {
						n := int64(len(it.data))
						if n > 0 {
							n = min(n, int64(c.peerFrame), st.sendWin, c.sendConn)
							if n <= 0 {
								break
							}
						}
						st.sendWin -= n
						c.sendConn -= n
						if int(n) < len(it.data) {
							work = append(work, wr{st, outItem{kind: outData, data: it.data[:n]}})
							st.out[0].data = it.data[n:]
							continue
						}
					}
					work = append(work, wr{st, it})
					st.out[0] = outItem{}
					st.out = st.out[1:]
				}
				if len(st.out) > 0 {
					outs = append(outs, st)
				} else {
					st.queued = false
					st.out = nil
				}
			}
			c.outs = outs
			if len(ctrl) > 0 || len(work) > 0 {
				break
			}
			c.wcond.Broadcast() // Close waits for an empty queue
			c.wcond.Wait()
		}
		table, change := c.peerTable, c.tableChange
		c.tableChange = false
		c.writing = true // Close waits for the flush, not just an empty queue
		c.mu.Unlock()
		if change {
			c.henc.SetMaxDynamicTableSizeLimit(min(table, 4096))
		}
		err := func() error {
			for _, f := range ctrl {
				if err := f(); err != nil {
					return err
				}
			}
			for _, w := range work {
				if err := c.write(w.st, w.it); err != nil {
					return err
				}
			}
			return c.bw.Flush()
		}()
		c.mu.Lock()
		c.writing = false
		if err != nil {
			c.fail(transport.Closed(err))
			c.mu.Unlock()
			return
		}
		for _, w := range work {
			if w.it.cost > 0 {
				c.grantServer(w.st, w.it.cost)
			}
			if w.it.end {
				if !w.st.ended {
					// The server is done before the client: the client
					// need send no more (RFC 9113 §8.1).
					id := w.st.id
					c.control(func() error { return c.wfr.WriteRSTStream(id, http2.ErrCodeNo) })
					w.st.ended = true
				}
				c.maybeForget(w.st)
			}
			if w.it.kind == outReset {
				w.st.ended = true
				c.maybeForget(w.st)
			}
		}
		c.mu.Unlock()
	}
}

// write writes one item of st (the writer's).
func (c *Conn) write(st *stream, it outItem) error {
	switch it.kind {
	case outData:
		return c.wfr.WriteData(st.id, false, it.data)
	case outReset:
		return c.wfr.WriteRSTStream(st.id, it.code)
	}
	c.hbuf.Reset()
	for _, f := range it.fields {
		if err := c.henc.WriteField(f); err != nil {
			return err
		}
	}
	return grpcwire.WriteHeaderBlock(c.wfr, st.id, c.hbuf.Bytes(), int(c.peerFrameSize()), it.end)
}

func (c *Conn) peerFrameSize() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerFrame
}

// Recv returns the next rdmarpc frame from the client.
func (c *Conn) Recv(ctx context.Context) (transport.Buffer, error) {
	for {
		c.mu.Lock()
		if len(c.recvq) > 0 {
			f := c.recvq[0]
			c.recvq[0] = nil
			c.recvq = c.recvq[1:]
			if len(c.recvq) == 0 {
				c.recvq = nil
			}
			c.mu.Unlock()
			return transport.NewBuffer(f, nil, 0), nil
		}
		if c.closed {
			err := c.closeErr
			c.mu.Unlock()
			return transport.Buffer{}, transport.Closed(err)
		}
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-ctx.Done():
			return transport.Buffer{}, ctx.Err()
		}
	}
}

// NewSendBuffer returns heap memory.
func (c *Conn) NewSendBuffer(_ context.Context, n int) (transport.Buffer, error) {
	return transport.NewBuffer(make([]byte, n), nil, 0), nil
}

// SendBuffer sends b.
func (c *Conn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	err := c.Send(ctx, b.Bytes())
	b.Release()
	return err
}

// Close writes what is queued (within the close grace), a GOAWAY when
// none went out, and closes the connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	if !c.closed && !c.closing {
		c.closing = true
		if !c.sentGoAwy {
			c.sentGoAwy, c.goAway = true, true
			last := c.maxID
			c.control(func() error { return c.wfr.WriteGoAway(last, http2.ErrCodeNo, []byte("server closing the connection")) })
		}
		t := time.AfterFunc(c.cfg.CloseGrace, func() {
			c.mu.Lock()
			c.fail(transport.ErrClosed)
			c.mu.Unlock()
		})
		for !c.closed && (c.writing || len(c.ctrl) > 0 || len(c.outs) > 0) {
			c.wcond.Wait()
		}
		t.Stop()
		c.fail(transport.ErrClosed)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return c.fc.Close()
}

// Done is closed when the connection is.
func (c *Conn) Done() <-chan struct{} { return c.done }

// MaxMessageSize is what the server may send as one frame.
func (c *Conn) MaxMessageSize() int { return math.MaxInt32 }

func (c *Conn) LocalAddr() net.Addr  { return c.fc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.fc.RemoteAddr() }

// BytesReceived is what came from the client (transport.Activity).
func (c *Conn) BytesReceived() uint64 { return c.received.Load() }

// AuthInfo is what the listener's credentials verified (transport.Secured).
func (c *Conn) AuthInfo() credentials.AuthInfo {
	if s, ok := c.fc.(transport.Secured); ok {
		return s.AuthInfo()
	}
	return nil
}
