package h2client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Limits of this side. The windows are what this side announces; what the
// connection holds of the server's data is bounded by them plus, per
// stream, the one message being assembled (at most MaxRecvMessage).
const (
	// StreamWindow is the HTTP/2 receive window each stream starts with;
	// it grows from measured bandwidth-delay (grpcwire.BDP) up to
	// ConnWindow.
	StreamWindow = 64 << 10
	// ConnWindow is the HTTP/2 receive window of the connection.
	ConnWindow = 16 << 20
	// MaxHeaderList is the largest response header block (HTTP/2's
	// MAX_HEADER_LIST_SIZE: each field's name and value plus 32 bytes)
	// this side decodes; a larger one fails its call with
	// ResourceExhausted and the stream is reset.
	MaxHeaderList = 32 << 10
	// MaxRecvMessage is the largest message taken from the server; the
	// rpc layer applies the call's own, smaller limit after.
	MaxRecvMessage = transport.DefaultMaxMessageSize
	// MinPingInterval is the least time between two HTTP/2 PINGs this
	// side sends, gRPC-go's servers' default enforcement (MinTime 5 min):
	// a keepalive that asks more often is answered here, without a PING.
	MinPingInterval = 5 * time.Minute
	// rpcConnWindow is the connection window the rpc layer is told the
	// "server" has: its frames are written (or waiting for HTTP/2 window)
	// in Send, so this only bounds what Send holds.
	rpcConnWindow = 16 << 20
	// maxSendMessage is the largest message Send accepts.
	maxSendMessage = math.MaxInt32 - grpcwire.PrefixLen
)

// ErrHeaderListTooLarge is wrapped by the status message of a call whose
// response headers exceeded MaxHeaderList.
var ErrHeaderListTooLarge = errors.New("the server's header list exceeds this client's limit")

// Conn is one HTTP/2 connection to a gRPC server, seen as a transport.Conn
// that carries rdmarpc link frames.
type Conn struct {
	nc        net.Conn
	authority string
	scheme    string // "http" or "https"
	auth      credentials.AuthInfo
	received  atomic.Uint64

	// The reader goroutine alone reads fr.
	fr       *http2.Framer
	readDone chan struct{}

	wmu  sync.Mutex // writing: bw, the framer's writes, henc, stream ids
	bw   *bufio.Writer
	henc *hpack.Encoder
	hbuf bytes.Buffer
	dbuf []byte // a small request's DATA payload

	mu           sync.Mutex
	byID         map[uint32]*stream // open HTTP/2 streams
	byRPC        map[uint64]*stream // streams the rpc layer still hears of
	nextID       uint32
	active       int    // HTTP/2 streams open (counted against maxStreams)
	maxStreams   uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	maxFrame     uint32 // the server's SETTINGS_MAX_FRAME_SIZE
	initWindow   int64  // the server's SETTINGS_INITIAL_WINDOW_SIZE
	sendWindow   int64  // connection send window
	recvUsed     int64  // connection receive window used, not granted back
	recvUnack    int64  // DATA bytes done with and not yet granted back
	changed      chan struct{}
	goneAway     bool
	lastPing     time.Time
	pings        map[[8]byte]uint64 // PINGs in flight: their rdmarpc data
	winOut       []windowUpdate     // granted, to be written
	tableLimit   *uint32            // the server's new SETTINGS_HEADER_TABLE_SIZE
	settingsSent bool
	owed         int   // the rpc layer's connection credit to give back
	rpcConn      int64 // the rpc layer's connection window left for MESSAGEs (docs/wire.md, "The connection window")
	streamWin    int64 // the streams' receive window announced now: StreamWindow, grown by bdp
	bdp          *grpcwire.BDP
	rq           [][]byte // frames for Recv
	rqWake       chan struct{}
	closeErr     error
	done         chan struct{}
	closeOnce    sync.Once
}

// stream is one call or stream.
type stream struct {
	id    uint32
	rid   uint64
	unary bool

	// Under Conn.mu.
	sendWindow int64
	sentEnd    bool      // END_STREAM or RST_STREAM sent: Send drops its frames
	h2closed   bool      // HTTP/2 stream over: no longer in byID
	owed       int       // the rpc layer's stream credit to give back
	deadline   time.Time // the call's, from its timeout (zero: none)
	remoteEnd  bool      // the server ended its side (END_STREAM, RST_STREAM, refused by GOAWAY)
	recvUsed   int64
	recvUnack  int64 // received and not granted back
	connDone   int64 // of recvUnack, what the connection's window was given back for
	gotHeaders bool
	header     metadata.MD
	msgs       [][]byte // unary: the response message(s), payload only
	pending    [][]byte // streaming: MESSAGE frames the rpc layer has no window for yet
	credit     int      // the rpc layer's stream window
	final      []byte   // the TRAILERS frame, delivered after pending
	prefix     [grpcwire.PrefixLen]byte
	prefixN    int
	asm        []byte // the message being assembled: wire header + payload so far
	msgLen     int
	sendComp   bool   // the request named a compressor: its messages are flagged compressed
	recvEnc    string // the response's grpc-encoding, "" for none
}

func newConn(nc net.Conn, authority string, secure bool, auth credentials.AuthInfo) *Conn {
	c := &Conn{
		nc: nc, authority: authority, scheme: "http", auth: auth,
		readDone:   make(chan struct{}),
		byID:       make(map[uint32]*stream),
		byRPC:      make(map[uint64]*stream),
		nextID:     1,
		maxStreams: math.MaxUint32,
		maxFrame:   16384,
		initWindow: 65535,
		sendWindow: 65535,
		changed:    make(chan struct{}),
		pings:      make(map[[8]byte]uint64),
		rqWake:     make(chan struct{}, 1),
		rpcConn:    wire.MinConnectionWindow,
		streamWin:  StreamWindow,
		bdp:        grpcwire.NewBDP(StreamWindow, min(grpcwire.MaxBDPWindow, ConnWindow)),
		done:       make(chan struct{}),
	}
	if secure {
		c.scheme = "https"
	}
	c.bw = bufio.NewWriterSize(nc, 32<<10)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(countingReader{nc, &c.received}, 32<<10))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = MaxHeaderList
	c.henc = hpack.NewEncoder(&c.hbuf)
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

// handshake sends the client preface and SETTINGS and reads the server's
// SETTINGS, within ctx.
func (c *Conn) handshake(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(dl)
		defer c.nc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	err := c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: MaxHeaderList},
	)
	if err == nil {
		err = c.fr.WriteWindowUpdate(0, ConnWindow-65535)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("reading the server's SETTINGS: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("%w: the server's first frame is %v, not SETTINGS (is it an HTTP/2 server?)", transport.ErrProtocol, f.Header().Type)
	}
	if err := c.applySettings(sf); err != nil {
		return err
	}
	return c.writeFlush(c.fr.WriteSettingsAck)
}

// writeFlush writes one control frame with write and flushes it, holding
// the write lock.
func (c *Conn) writeFlush(write func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := write(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// applySettings takes the server's SETTINGS. It returns the rdmarpc
// SETTINGS frame to hand the rpc layer when the stream limit changed.
func (c *Conn) applySettings(sf *http2.SettingsFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	limitChanged := false
	err := sf.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxFrameSize:
			c.maxFrame = s.Val
		case http2.SettingInitialWindowSize:
			d := int64(s.Val) - c.initWindow
			c.initWindow = int64(s.Val)
			for _, st := range c.byID {
				st.sendWindow += d
			}
		case http2.SettingMaxConcurrentStreams:
			limitChanged = limitChanged || c.maxStreams != s.Val
			c.maxStreams = s.Val
		case http2.SettingHeaderTableSize:
			v := s.Val
			c.tableLimit = &v // applied by the next header block (lock order: wmu, then mu)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: the server's SETTINGS: %v", transport.ErrProtocol, err)
	}
	if limitChanged || !c.settingsSent {
		c.settingsSent = true
		ms := c.maxStreams
		if ms == 0 {
			ms = 1 // 0 would stop every call; rdmarpc's SETTINGS cannot say it
		}
		c.push(wire.AppendSettings(nil, wire.Settings{MaxConcurrentStreams: ms, ConnectionWindow: rpcConnWindow}))
	}
	c.broadcast()
	return nil
}

// push queues a frame for Recv. c.mu is held.
func (c *Conn) push(f []byte) {
	c.rq = append(c.rq, f)
	select {
	case c.rqWake <- struct{}{}:
	default:
	}
}

// broadcast wakes whoever waits for a window or a stream slot. c.mu is held.
func (c *Conn) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Recv returns the next rdmarpc frame.
func (c *Conn) Recv(ctx context.Context) (transport.Buffer, error) {
	for {
		c.mu.Lock()
		if len(c.rq) > 0 {
			f := c.rq[0]
			c.rq[0] = nil
			c.rq = c.rq[1:]
			if len(c.rq) == 0 {
				c.rq = c.rq[:0:0]
			}
			c.mu.Unlock()
			return transport.NewBuffer(f, nil, 0), nil
		}
		err := c.closeErr
		c.mu.Unlock()
		if err != nil {
			return transport.Buffer{}, err
		}
		select {
		case <-c.rqWake:
		case <-c.done:
		case <-ctx.Done():
			return transport.Buffer{}, ctx.Err()
		}
	}
}

// Send translates one rdmarpc frame into HTTP/2.
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	h, body, err := wire.ParseHeader(msg)
	if err != nil {
		return err
	}
	if err := c.closedErr(); err != nil {
		return err
	}
	switch h.Kind {
	case wire.KindRequest:
		req, err := wire.ParseRequest(body, math.MaxInt32)
		if err != nil {
			return err
		}
		return c.open(ctx, h.CallID, true, req, len(msg))
	case wire.KindOpen:
		req, err := wire.ParseOpen(body, math.MaxInt32)
		if err != nil {
			return err
		}
		return c.open(ctx, h.CallID, false, req, 0)
	case wire.KindMessage:
		s := c.rpcStream(h.CallID)
		if s == nil {
			return nil // ended: the frame crossed the end
		}
		if err := c.writeData(ctx, s, body, true, false); err != nil {
			return err
		}
		c.grant(h.CallID, len(msg))
		return nil
	case wire.KindCloseSend:
		if s := c.rpcStream(h.CallID); s != nil {
			return c.writeData(ctx, s, nil, false, true)
		}
		return nil
	case wire.KindCancel, wire.KindReset:
		// Whether or not this side's end was sent: the server is told
		// (unless it ended the stream), and its data is not waited for.
		c.mu.Lock()
		s := c.byRPC[h.CallID]
		c.mu.Unlock()
		if s != nil {
			c.reset(s, http2.ErrCodeCancel)
			c.forget(s)
		}
		return nil
	case wire.KindWindow:
		n, err := wire.ParseWindow(body)
		if err != nil {
			return err
		}
		if h.CallID == 0 {
			c.rpcConnWindow(int64(n))
		} else {
			c.rpcWindow(h.CallID, int(n))
		}
		return nil
	case wire.KindSettings:
		set, err := wire.ParseSettings(body)
		if err != nil {
			return err
		}
		if set.ConnectionWindow > wire.MinConnectionWindow {
			c.rpcConnWindow(int64(set.ConnectionWindow) - wire.MinConnectionWindow)
		}
		return nil
	case wire.KindPing:
		data, err := wire.ParsePing(body)
		if err != nil {
			return err
		}
		return c.ping(data)
	}
	return nil // PONG, GOAWAY
}

func (c *Conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

func (c *Conn) rpcStream(rid uint64) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.byRPC[rid]; s != nil && !s.sentEnd {
		return s
	}
	return nil
}

// grant gives the rpc layer back the credit of a frame it sent: for its
// stream (a MESSAGE) and for the connection.
func (c *Conn) grant(rid uint64, cost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeErr != nil {
		return
	}
	// In batches, so that a small call does not wake the rpc layer's
	// reader for its credit: a stream's credit when a quarter of the
	// default stream window is owed, the connection's at a quarter of
	// what it was told.
	if rid != 0 {
		if s := c.byRPC[rid]; s != nil {
			s.owed += cost
			if s.owed >= 16<<10 {
				c.push(wire.AppendWindow(nil, rid, uint32(s.owed)))
				s.owed = 0
			}
		}
	}
	c.owed += cost
	if c.owed >= rpcConnWindow/4 {
		c.push(wire.AppendWindow(nil, 0, uint32(c.owed)))
		c.owed = 0
	}
}

// open starts an HTTP/2 stream for a REQUEST (unary, with its payload) or
// an OPEN, waiting for a stream slot within ctx.
func (c *Conn) open(ctx context.Context, rid uint64, unary bool, req wire.Request, cost int) error {
	s := &stream{rid: rid, unary: unary, credit: 64 << 10}
	if v := req.MD["grpc-encoding"]; len(v) > 0 && grpcwire.Encoding(v[0]) != "" {
		s.sendComp = true // the rpc layer compresses every message (rpc/compress.go)
	}
	if req.Timeout > 0 {
		s.deadline = time.Now().Add(req.Timeout)
	}
	c.mu.Lock()
	for c.closeErr == nil && !c.goneAway && uint32(c.active) >= c.maxStreams {
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	if c.closeErr != nil {
		err := c.closeErr
		c.mu.Unlock()
		return err
	}
	if c.goneAway {
		c.byRPC[rid] = s
		c.refuseLocked(s, "the server sent GOAWAY: no new calls on this connection")
		c.mu.Unlock()
		return nil
	}
	c.active++
	c.byRPC[rid] = s
	c.mu.Unlock()

	block := c.requestHeaders(req)
	c.wmu.Lock()
	c.mu.Lock()
	s.id = c.nextID
	if s.id > math.MaxInt32 {
		c.active--
		c.refuseLocked(s, "the connection's HTTP/2 stream ids are used up")
		c.goneAway = true
		c.push(wire.AppendGoAway(nil, 0, "stream ids used up"))
		c.mu.Unlock()
		c.wmu.Unlock()
		return nil
	}
	c.nextID += 2
	if c.tableLimit != nil {
		c.henc.SetMaxDynamicTableSizeLimit(*c.tableLimit)
		c.tableLimit = nil
	}
	s.sendWindow = c.initWindow
	c.byID[s.id] = s
	maxFrame := int(c.maxFrame)
	c.mu.Unlock()
	err := c.writeHeaders(s.id, block, maxFrame)
	if err == nil && unary {
		// A request that fits the windows and a frame leaves with its
		// HEADERS, in one write.
		n := grpcwire.PrefixLen + len(req.Payload)
		c.mu.Lock()
		fits := n <= maxFrame && int64(n) <= s.sendWindow && int64(n) <= c.sendWindow
		if fits {
			s.sendWindow -= int64(n)
			c.sendWindow -= int64(n)
			s.sentEnd = true
		}
		c.mu.Unlock()
		if fits {
			c.dbuf = append(grpcwire.AppendPrefix(c.dbuf[:0], s.sendComp, len(req.Payload)), req.Payload...)
			err = c.fr.WriteData(s.id, true, c.dbuf)
			if cap(c.dbuf) > 64<<10 {
				c.dbuf = nil
			}
			if err == nil {
				err = c.bw.Flush()
			}
			c.wmu.Unlock()
			if err != nil {
				return c.writeFailed(err)
			}
			c.grant(0, cost)
			return nil
		}
	}
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		return c.writeFailed(err)
	}
	if unary {
		if err := c.writeData(ctx, s, req.Payload, true, true); err != nil {
			// Not (wholly) sent: the call never started for the rpc layer.
			c.reset(s, http2.ErrCodeCancel)
			c.forget(s)
			return err
		}
		c.grant(0, cost)
	}
	return nil
}

// requestHeaders encodes a request's header block.
func (c *Conn) requestHeaders(req wire.Request) []hpack.HeaderField {
	fields := make([]hpack.HeaderField, 0, 8+len(req.MD))
	ua := "rdmarpc-go"
	if v := req.MD["user-agent"]; len(v) > 0 {
		ua = strings.Join(v, " ")
	}
	fields = append(fields,
		hpack.HeaderField{Name: ":method", Value: "POST"},
		hpack.HeaderField{Name: ":scheme", Value: c.scheme},
		hpack.HeaderField{Name: ":path", Value: req.Method},
		hpack.HeaderField{Name: ":authority", Value: c.authority},
		hpack.HeaderField{Name: "content-type", Value: grpcwire.ContentType("")},
		hpack.HeaderField{Name: "user-agent", Value: ua},
		hpack.HeaderField{Name: "te", Value: "trailers"},
	)
	if req.Timeout > 0 {
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: grpcwire.EncodeTimeout(req.Timeout)})
	}
	if v := req.MD["grpc-encoding"]; len(v) > 0 && grpcwire.Encoding(v[0]) != "" {
		fields = append(fields, hpack.HeaderField{Name: "grpc-encoding", Value: v[0]})
	}
	// Which compressors a response may use, as gRPC-go's client says on
	// every call; the rpc layer decompresses what the server chose.
	if v := req.MD["grpc-accept-encoding"]; len(v) > 0 {
		fields = append(fields, hpack.HeaderField{Name: "grpc-accept-encoding", Value: v[0]})
	} else if names := encoding.RegisteredCompressorNames(); len(names) > 0 {
		fields = append(fields, hpack.HeaderField{Name: "grpc-accept-encoding", Value: strings.Join(names, ",")})
	}
	fields = grpcwire.AppendMetadata(fields, req.MD)
	return fields
}

// writeHeaders writes a HEADERS frame and the CONTINUATIONs it needs.
// c.wmu is held.
func (c *Conn) writeHeaders(id uint32, fields []hpack.HeaderField, maxFrame int) error {
	c.hbuf.Reset()
	for _, f := range fields {
		if err := c.henc.WriteField(f); err != nil {
			return err
		}
	}
	return grpcwire.WriteHeaderBlock(c.fr, id, c.hbuf.Bytes(), maxFrame, false)
}

// writeData sends one gRPC message (prefix and payload) if msg, and
// END_STREAM if end (alone: an empty DATA frame), within the server's
// windows.
func (c *Conn) writeData(ctx context.Context, s *stream, payload []byte, msg, end bool) error {
	var prefix []byte
	if msg {
		prefix = grpcwire.AppendPrefix(make([]byte, 0, grpcwire.PrefixLen), s.sendComp, len(payload))
	}
	if !msg {
		c.wmu.Lock()
		c.mu.Lock()
		drop := s.sentEnd
		s.sentEnd = true
		c.mu.Unlock()
		var err error
		if !drop {
			err = c.fr.WriteData(s.id, true, nil)
			if err == nil {
				err = c.bw.Flush()
			}
		}
		c.wmu.Unlock()
		c.maybeDone(s)
		return c.writeFailed(err)
	}
	left := len(prefix) + len(payload)
	for left > 0 {
		c.mu.Lock()
		var n int
		for {
			if c.closeErr != nil {
				err := c.closeErr
				c.mu.Unlock()
				return err
			}
			if s.sentEnd {
				c.mu.Unlock()
				return nil // reset meanwhile
			}
			n = int(min(int64(left), int64(c.maxFrame), s.sendWindow, c.sendWindow))
			if n > 0 {
				break
			}
			ch := c.changed
			c.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				// Part of the message may be out: the stream cannot go on.
				if left < len(prefix)+len(payload) {
					c.reset(s, http2.ErrCodeCancel)
				}
				return ctx.Err()
			}
			c.mu.Lock()
		}
		s.sendWindow -= int64(n)
		c.sendWindow -= int64(n)
		c.mu.Unlock()

		off := len(prefix) + len(payload) - left
		var chunk []byte
		if off < len(prefix) && n > len(prefix)-off {
			chunk = append(append(make([]byte, 0, n), prefix[off:]...), payload[:n-(len(prefix)-off)]...)
		} else if off < len(prefix) {
			chunk = prefix[off : off+n]
		} else {
			chunk = payload[off-len(prefix) : off-len(prefix)+n]
		}
		left -= n
		last := end && left == 0
		c.wmu.Lock()
		c.mu.Lock()
		if s.sentEnd { // reset since the window was taken: nothing may follow its RST_STREAM
			c.mu.Unlock()
			c.wmu.Unlock()
			return nil
		}
		s.sentEnd = last
		c.mu.Unlock()
		err := c.fr.WriteData(s.id, last, chunk)
		if err == nil {
			err = c.bw.Flush()
		}
		c.wmu.Unlock()
		if err != nil {
			return c.writeFailed(err)
		}
	}
	if end {
		c.maybeDone(s)
	}
	return nil
}

// writeFailed closes the connection after a failed write and returns
// why, wrapping transport.ErrClosed.
func (c *Conn) writeFailed(err error) error {
	if err == nil {
		return nil
	}
	c.fail(fmt.Errorf("writing to the server: %w", err))
	return c.closedErr()
}

// reset sends RST_STREAM for s, unless its HTTP/2 stream is over, and
// retires it.
func (c *Conn) reset(s *stream, code http2.ErrCode) {
	c.wmu.Lock()
	c.mu.Lock()
	closed := s.h2closed
	s.sentEnd = true
	c.mu.Unlock()
	if !closed {
		if c.fr.WriteRSTStream(s.id, code) == nil {
			c.bw.Flush()
		}
	}
	c.wmu.Unlock()
	c.mu.Lock()
	c.closeH2Locked(s)
	c.mu.Unlock()
}

// maybeDone closes s's HTTP/2 stream once both ends are over.
func (c *Conn) maybeDone(s *stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.sentEnd && s.remoteEnd {
		c.closeH2Locked(s)
	}
}

// closeH2Locked retires s's HTTP/2 stream: its slot is free and its
// unacknowledged data is granted back to the connection.
func (c *Conn) closeH2Locked(s *stream) {
	if s.h2closed || s.id == 0 {
		return
	}
	s.h2closed = true
	delete(c.byID, s.id)
	c.active--
	c.recvUnack += s.recvUnack - s.connDone
	s.recvUnack, s.connDone = 0, 0
	c.broadcast()
}

// forget drops s: the rpc layer is done with it.
func (c *Conn) forget(s *stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byRPC[s.rid] == s {
		delete(c.byRPC, s.rid)
	}
	s.pending, s.final, s.asm, s.msgs = nil, nil, nil, nil
}

// refuseLocked ends s, which the server never saw, with Unavailable and
// the refusal mark, so the rpc layer may send it again elsewhere.
func (c *Conn) refuseLocked(s *stream, why string) {
	tr := metadata.Pairs(refusedKey, "1")
	c.endLocked(s, uint32(codes.Unavailable), why, nil, tr, true)
}

// endLocked ends s for the rpc layer with a status: a RESPONSE for a
// call, a TRAILERS for a stream (after the messages it holds, unless
// drop).
func (c *Conn) endLocked(s *stream, code uint32, msg string, details [][]byte, trailer metadata.MD, drop bool) {
	if c.byRPC[s.rid] != s || s.final != nil {
		return
	}
	if s.unary {
		var payload []byte
		if code == 0 {
			switch len(s.msgs) {
			case 1:
				payload = s.msgs[0]
			case 0:
				code, msg = uint32(codes.Internal), "the server sent no response message with status OK"
			default:
				code, msg = uint32(codes.Internal), fmt.Sprintf("the server sent %d response messages for a unary call", len(s.msgs))
			}
		}
		f := wire.AppendResponseHead(make([]byte, 0, 64+len(payload)), s.rid, code, msg, details, s.header, trailer)
		c.push(append(f, payload...))
		s.final = []byte{}
		delete(c.byRPC, s.rid)
		s.msgs = nil
		return
	}
	var header metadata.MD
	if !s.gotHeaders {
		header = s.header
	}
	s.final = wire.AppendTrailers(nil, s.rid, code, msg, details, header, trailer)
	if drop {
		s.pending = nil
	}
	c.deliverLocked(s)
}

// deliverLocked hands the rpc layer the messages its windows take (the
// stream's and the connection's: a MESSAGE goes while both are positive,
// and costs its frame of each), then the end. What waits keeps its HTTP/2
// window ungranted, so the server stops within this side's windows.
func (c *Conn) deliverLocked(s *stream) {
	for len(s.pending) > 0 && s.credit > 0 && c.rpcConn > 0 {
		f := s.pending[0]
		s.pending[0] = nil
		s.pending = s.pending[1:]
		s.credit -= len(f)
		c.rpcConn -= int64(len(f))
		c.push(f)
	}
	if len(s.pending) == 0 {
		s.pending = nil
		if len(s.final) > 0 {
			c.push(s.final)
			s.final = []byte{}
			delete(c.byRPC, s.rid)
		}
		c.grantStreamLocked(s, false)
	}
}

// grantStreamLocked gives the server back the HTTP/2 stream window of
// what this side is done with; force grants even a little.
func (c *Conn) grantStreamLocked(s *stream, force bool) {
	if s.h2closed || s.recvUnack == 0 {
		return
	}
	// The connection's window comes back for all of it at once, the
	// stream's in batches: many streams each below a batch must not
	// hold the connection's window (a grown stream window makes the
	// batch large).
	c.recvUnack += s.recvUnack - s.connDone
	s.connDone = s.recvUnack
	if !force && s.recvUnack < c.streamWin/8 {
		return
	}
	n := s.recvUnack
	s.recvUnack, s.connDone = 0, 0
	s.recvUsed -= n
	c.winOut = append(c.winOut, windowUpdate{s.id, uint32(n)})
}

// rpcWindow takes the rpc layer's stream window update.
func (c *Conn) rpcWindow(rid uint64, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.byRPC[rid]
	if s == nil || s.unary {
		return
	}
	s.credit += n
	c.deliverLocked(s)
	c.grantConnLocked()
	c.mu.Unlock()
	c.flushWindows()
	c.mu.Lock()
}

// rpcConnWindow takes the rpc layer's connection window: its SETTINGS
// (beyond the 65536 bytes assumed until then) or a WINDOW_UPDATE of call
// id 0. The rpc layer grants in batches of a quarter of its window, so
// streams held back wait for at most that much to be read.
func (c *Conn) rpcConnWindow(n int64) {
	c.mu.Lock()
	was := c.rpcConn
	c.rpcConn += n
	if was <= 0 && c.rpcConn > 0 {
		for _, s := range c.byRPC {
			if len(s.pending) > 0 && !s.unary {
				c.deliverLocked(s)
				if c.rpcConn <= 0 {
					break
				}
			}
		}
		c.grantConnLocked()
	}
	c.mu.Unlock()
	c.flushWindows()
}

// grantConnLocked grants connection window back once a quarter of it is
// done with.
func (c *Conn) grantConnLocked() {
	if c.recvUnack < ConnWindow/4 {
		return
	}
	n := c.recvUnack
	c.recvUnack = 0
	c.recvUsed -= n
	c.winOut = append(c.winOut, windowUpdate{0, uint32(n)})
}

type windowUpdate struct{ id, n uint32 }

// flushWindows writes the WINDOW_UPDATEs granted under c.mu (never
// written under it).
func (c *Conn) flushWindows() {
	c.mu.Lock()
	w := c.winOut
	c.winOut = nil
	c.mu.Unlock()
	if len(w) == 0 {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var err error
	for _, u := range w {
		if err == nil {
			err = c.fr.WriteWindowUpdate(u.id, u.n)
		}
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		c.fail(fmt.Errorf("writing to the server: %w", err))
	}
}

// ping sends an HTTP/2 PING for the rpc layer's keepalive, or answers it
// here: gRPC servers close connections that ping more often than their
// enforcement allows (gRPC-go: every 5 minutes while calls are open, 2
// hours without), so a PING goes out only while calls are open and
// MinPingInterval after the last one. The connection's reading counts as
// a sign of life meanwhile (transport.Activity).
func (c *Conn) ping(data uint64) error {
	c.mu.Lock()
	now := time.Now()
	if c.active == 0 || now.Sub(c.lastPing) < MinPingInterval {
		c.push(wire.AppendPing(nil, true, data))
		c.mu.Unlock()
		return nil
	}
	c.lastPing = now
	var key [8]byte
	for i := range key {
		key[i] = byte(data >> (56 - 8*i))
	}
	c.pings[key] = data
	c.mu.Unlock()
	return c.writeFailed(c.writeFlush(func() error { return c.fr.WritePing(false, key) }))
}

// NewSendBuffer returns a heap buffer of n bytes.
func (c *Conn) NewSendBuffer(ctx context.Context, n int) (transport.Buffer, error) {
	if n > maxSendMessage {
		return transport.Buffer{}, fmt.Errorf("%w: %d bytes", transport.ErrMessageTooLarge, n)
	}
	return transport.NewBuffer(make([]byte, n), nil, 0), nil
}

// SendBuffer sends b and releases it.
func (c *Conn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	err := c.Send(ctx, b.Bytes())
	b.Release()
	return err
}

// Close sends GOAWAY, closes the connection and waits for its reader.
func (c *Conn) Close() error {
	c.nc.SetWriteDeadline(time.Now().Add(time.Second)) // a write blocked on the server gives wmu up
	c.wmu.Lock()
	if c.fr.WriteGoAway(0, http2.ErrCodeNo, nil) == nil {
		c.bw.Flush()
	}
	c.wmu.Unlock()
	c.fail(errors.New("closed by this side"))
	<-c.readDone
	return nil
}

// fail closes the connection for err; the first reason wins.
func (c *Conn) fail(err error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closeErr = transport.Closed(err)
		c.broadcast()
		c.mu.Unlock()
		close(c.done)
		c.nc.Close()
	})
}

// Done is closed once the connection is.
func (c *Conn) Done() <-chan struct{} { return c.done }

// MaxMessageSize is the largest message Send takes: gRPC's 2^31-1 less
// the prefix. The server's own limit is unknown here; it answers a larger
// message with ResourceExhausted.
func (c *Conn) MaxMessageSize() int { return maxSendMessage }

func (c *Conn) LocalAddr() net.Addr  { return c.nc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// AuthInfo is what the transport credentials verified (nil: none).
func (c *Conn) AuthInfo() credentials.AuthInfo { return c.auth }

// BytesReceived is the bytes read from the server so far.
func (c *Conn) BytesReceived() uint64 { return c.received.Load() }
