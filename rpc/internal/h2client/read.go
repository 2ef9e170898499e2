package h2client

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/net/http2"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/transport"
)

// readLoop reads the server's frames until the connection ends. Close
// waits for it.
func (c *Conn) readLoop() {
	defer close(c.readDone)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.streamError(se)
				continue
			}
			var ce http2.ConnectionError
			if _, ok := f.(*http2.MetaHeadersFrame); ok && errors.As(err, &ce) {
				// x/net's framer stops a header block that goes on past
				// the limit (HPACK and CONTINUATION bombs) or past a
				// malformed field without decoding it.
				c.connError(http2.ErrCode(ce), fmt.Errorf("%w: %w (%d bytes), or malformed and continued: %v", transport.ErrProtocol, ErrHeaderListTooLarge, MaxHeaderList, err))
				return
			}
			if errors.As(err, &ce) {
				c.connError(http2.ErrCode(ce), fmt.Errorf("%w: %v", transport.ErrProtocol, err))
				return
			}
			c.fail(fmt.Errorf("reading from the server: %w", err))
			return
		}
		if err := c.handle(f); err != nil {
			return
		}
		c.flushWindows()
	}
}

// connError ends the connection for a protocol error of the server's,
// telling it why with a GOAWAY.
func (c *Conn) connError(code http2.ErrCode, err error) error {
	c.wmu.Lock()
	c.mu.Lock()
	last := c.nextID - 2
	c.mu.Unlock()
	if c.fr.WriteGoAway(last, code, []byte(err.Error())) == nil {
		c.bw.Flush()
	}
	c.wmu.Unlock()
	c.fail(err)
	return err
}

// streamError fails one stream the framer found broken (a malformed or
// oversized header block) and resets it.
func (c *Conn) streamError(se http2.StreamError) {
	c.mu.Lock()
	s := c.byID[se.StreamID]
	c.mu.Unlock()
	if s == nil {
		return
	}
	code, msg := uint32(codes.Internal), "malformed response from the server: "+se.Error()
	if errors.Is(se.Cause, http2.ErrFrameTooLarge) || se.Code == http2.ErrCodeProtocol && isHeaderListTooLarge(se) {
		code, msg = uint32(codes.ResourceExhausted), fmt.Sprintf("%v (%d bytes)", ErrHeaderListTooLarge, MaxHeaderList)
	}
	c.reset(s, http2.ErrCodeCancel)
	c.mu.Lock()
	c.endLocked(s, code, msg, nil, nil, true)
	c.mu.Unlock()
}

func isHeaderListTooLarge(se http2.StreamError) bool {
	return se.Cause != nil && (errors.Is(se.Cause, errHeaderListTooLarge) || se.Cause.Error() == "http2: header list too large")
}

var errHeaderListTooLarge = errors.New("header list too large")

// handle takes one frame; an error ends the reading.
func (c *Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.applySettings(f); err != nil {
			return c.connError(http2.ErrCodeProtocol, err)
		}
		if err := c.writeFlush(c.fr.WriteSettingsAck); err != nil {
			c.fail(err)
			return err
		}
	case *http2.MetaHeadersFrame:
		c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.RSTStreamFrame:
		c.onReset(f)
	case *http2.WindowUpdateFrame:
		return c.onWindow(f)
	case *http2.PingFrame:
		if f.IsAck() {
			if f.Data == grpcwire.BDPPing {
				return c.bdpAck()
			}
			c.mu.Lock()
			if data, ok := c.pings[f.Data]; ok {
				delete(c.pings, f.Data)
				c.push(wire.AppendPing(nil, true, data))
			}
			c.mu.Unlock()
			return nil
		}
		if err := c.writeFlush(func() error { return c.fr.WritePing(true, f.Data) }); err != nil {
			c.fail(err)
			return err
		}
	case *http2.GoAwayFrame:
		c.onGoAway(f)
	case *http2.PushPromiseFrame:
		return c.connError(http2.ErrCodeProtocol, fmt.Errorf("%w: PUSH_PROMISE, which this client disabled", transport.ErrProtocol))
	}
	return nil // PRIORITY, unknown types: ignored
}

// bdpAck takes the ack of the BDP PING: when the estimate grew, every
// stream's window grows to it (SETTINGS_INITIAL_WINDOW_SIZE changes the
// open streams' windows too), within the connection's window, which
// bounds what the connection holds.
func (c *Conn) bdpAck() error {
	c.mu.Lock()
	w := c.bdp.Acked(time.Now())
	if w > 0 {
		c.streamWin = int64(w)
	}
	c.mu.Unlock()
	if w == 0 {
		return nil
	}
	if err := c.writeFlush(func() error {
		return c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: w})
	}); err != nil {
		c.fail(err)
		return err
	}
	return nil
}

// onHeaders takes a response's headers or trailers.
func (c *Conn) onHeaders(f *http2.MetaHeadersFrame) {
	c.mu.Lock()
	s := c.byID[f.StreamID]
	c.mu.Unlock()
	if s == nil {
		if f.StreamID >= c.nextIDLocked() {
			c.connError(http2.ErrCodeProtocol, fmt.Errorf("%w: HEADERS on stream %d, which this client never opened", transport.ErrProtocol, f.StreamID))
		}
		return
	}
	if f.Truncated {
		c.reset(s, http2.ErrCodeCancel) // first: the slot is free when the call ends
		c.mu.Lock()
		c.endLocked(s, uint32(codes.ResourceExhausted), fmt.Sprintf("%v (%d bytes, each field counting its name, value and 32 bytes)", ErrHeaderListTooLarge, MaxHeaderList), nil, nil, true)
		c.mu.Unlock()
		return
	}
	r, err := parseResponseHeaders(f.Fields)
	end := f.StreamEnded()
	c.mu.Lock()
	first := !s.gotHeaders && s.header == nil
	switch {
	case err != nil:
		c.endLocked(s, uint32(codes.Internal), "malformed response headers: "+err.Error(), nil, nil, true)
	case first && r.httpStatus == 0:
		c.endLocked(s, uint32(codes.Internal), "malformed response headers: no :status", nil, nil, true)
		err = errors.New("no :status")
	case first && !r.hasGRPC && (r.httpStatus != 200 || !isGRPC(r.contentType)):
		code, msg := httpFailure(r)
		c.endLocked(s, uint32(code), msg, nil, nil, true)
		err = errors.New(msg)
	case first && !end:
		s.header = r.md
		if s.header == nil {
			s.header = metadata.MD{}
		}
		if r.encoding != "" {
			// The rpc layer decompresses the messages (bounded by its
			// limit), or fails the call for a compressor it lacks.
			s.recvEnc = r.encoding
			s.header["grpc-encoding"] = []string{r.encoding}
		}
		if !s.unary {
			s.gotHeaders = true
			c.push(wire.AppendHeaders(nil, s.rid, s.header))
		}
	case !end:
		c.endLocked(s, uint32(codes.Internal), "the server sent a second header block that does not end the stream", nil, nil, true)
		err = errors.New("headers after headers")
	default: // trailers, or trailers-only
		if first {
			s.header = r.md
			r.md = nil
		}
		code, msg := r.code, r.message
		if !r.hasGRPC {
			code, msg = uint32(codes.Internal), "the server ended the stream without grpc-status"
		}
		if s.asm != nil || s.prefixN != 0 {
			code, msg = uint32(codes.Internal), "the server ended the stream inside a message"
		}
		c.endLocked(s, code, msg, r.details, r.md, false)
		s.remoteEnd = true
		c.closeH2Locked(s) // the server is done; our own end, if unsent, becomes a reset below
	}
	sentEnd := s.sentEnd
	c.mu.Unlock()
	if err != nil || (end && !sentEnd) {
		code := http2.ErrCodeCancel
		if err == nil {
			code = http2.ErrCodeNo
		}
		c.resetOpen(s, code)
	}
}

// resetOpen sends RST_STREAM for s even when the server's side has ended:
// the stream's slot at the server is freed only by both ends.
func (c *Conn) resetOpen(s *stream, code http2.ErrCode) {
	c.wmu.Lock()
	c.mu.Lock()
	send := !s.sentEnd
	s.sentEnd = true
	c.mu.Unlock()
	if send {
		if c.fr.WriteRSTStream(s.id, code) == nil {
			c.bw.Flush()
		}
	}
	c.wmu.Unlock()
	c.mu.Lock()
	c.closeH2Locked(s)
	c.mu.Unlock()
}

func (c *Conn) nextIDLocked() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextID
}

func isGRPC(ct string) bool {
	_, ok := grpcwire.ContentSubtype(ct)
	return ok
}

// onData takes a DATA frame: flow control first, then the messages in it.
func (c *Conn) onData(f *http2.DataFrame) error {
	n := int64(f.Length)
	c.mu.Lock()
	if n > 0 && c.bdp.Received(int(n), time.Now()) {
		// Written once the frame's messages are handed on: the PING
		// measures the path, it need not delay them.
		defer func() {
			if err := c.writeFlush(func() error { return c.fr.WritePing(false, grpcwire.BDPPing) }); err != nil {
				c.fail(err)
			}
		}()
	}
	c.recvUsed += n
	if c.recvUsed > ConnWindow {
		c.mu.Unlock()
		return c.connError(http2.ErrCodeFlowControl, fmt.Errorf("%w: the server sent past the connection's receive window of %d bytes", transport.ErrProtocol, ConnWindow))
	}
	s := c.byID[f.StreamID]
	if s == nil {
		c.recvUnack += n // a stream that ended here: done with at once
		c.grantConnLocked()
		next := c.nextID
		c.mu.Unlock()
		if f.StreamID >= next {
			return c.connError(http2.ErrCodeProtocol, fmt.Errorf("%w: DATA on stream %d, which this client never opened", transport.ErrProtocol, f.StreamID))
		}
		return nil
	}
	s.recvUsed += n
	s.recvUnack += n
	if s.recvUsed > c.streamWin {
		w := c.streamWin
		c.mu.Unlock()
		return c.connError(http2.ErrCodeFlowControl, fmt.Errorf("%w: the server sent past stream %d's receive window of %d bytes", transport.ErrProtocol, f.StreamID, w))
	}
	var bad error
	if !s.gotHeaders && s.header == nil {
		bad = errors.New("DATA before the response headers")
	} else {
		bad = c.messagesLocked(s, f.Data())
	}
	if bad != nil {
		code := codes.Internal
		if errors.Is(bad, grpcwire.ErrTooLarge) {
			code = codes.ResourceExhausted
		}
		c.endLocked(s, uint32(code), bad.Error(), nil, nil, true)
	} else {
		c.deliverLocked(s)
		if s.unary || len(s.pending) == 0 {
			c.grantStreamLocked(s, false)
		}
	}
	c.grantConnLocked()
	end := f.StreamEnded()
	c.mu.Unlock()
	if bad != nil {
		c.reset(s, http2.ErrCodeCancel)
	} else if end {
		c.mu.Lock()
		c.endLocked(s, uint32(codes.Internal), "the server ended the stream without trailers", nil, nil, false)
		s.remoteEnd = true
		c.closeH2Locked(s)
		c.mu.Unlock()
		c.resetOpen(s, http2.ErrCodeCancel)
	}
	return nil
}

// messagesLocked cuts p into gRPC messages.
func (c *Conn) messagesLocked(s *stream, p []byte) error {
	for len(p) > 0 || (s.prefixN == grpcwire.PrefixLen && s.asm != nil && len(s.asm)-wire.HeaderLen == s.msgLen) {
		if s.prefixN < grpcwire.PrefixLen {
			k := copy(s.prefix[s.prefixN:], p)
			s.prefixN += k
			p = p[k:]
			if s.prefixN < grpcwire.PrefixLen {
				return nil
			}
			compressed, n, err := grpcwire.ParsePrefix(s.prefix, MaxRecvMessage)
			if err != nil {
				return fmt.Errorf("a message from the server: %w", err)
			}
			if compressed && s.recvEnc == "" {
				return errors.New("the server sent a compressed message without a grpc-encoding")
			}
			s.msgLen = n
			s.asm = make([]byte, wire.HeaderLen, wire.HeaderLen+min(n, 64<<10))
		}
		k := min(len(p), s.msgLen-(len(s.asm)-wire.HeaderLen))
		s.asm = grpcwire.AppendPart(s.asm, p[:k], wire.HeaderLen+s.msgLen)
		p = p[k:]
		if len(s.asm)-wire.HeaderLen < s.msgLen {
			return nil
		}
		msg := s.asm
		s.asm, s.prefixN = nil, 0
		if s.prefix[0] == 0 && s.recvEnc != "" {
			z, _, err := grpcwire.Compress(s.recvEnc, msg[wire.HeaderLen:])
			if err != nil {
				return fmt.Errorf("compressing an uncompressed message of a %s response: %w", s.recvEnc, err)
			}
			msg = append(msg[:wire.HeaderLen:wire.HeaderLen], z...)
		}
		if s.unary {
			if len(s.msgs) > 0 {
				return errors.New("the server sent more than one response message for a unary call")
			}
			s.msgs = append(s.msgs, msg[wire.HeaderLen:])
			continue
		}
		wire.AppendMessageHead(msg[:0], s.rid)
		s.pending = append(s.pending, msg)
	}
	return nil
}

// onReset takes the server's RST_STREAM: REFUSED_STREAM marks the call
// refused (never processed: the rpc layer may send it again), the other
// codes map as PROTOCOL-HTTP2.md says.
func (c *Conn) onReset(f *http2.RSTStreamFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.byID[f.StreamID]
	if s == nil {
		return
	}
	s.sentEnd, s.remoteEnd = true, true
	msg := fmt.Sprintf("stream terminated by RST_STREAM with error code: %v", f.ErrCode)
	code := grpcwire.CodeForReset(f.ErrCode)
	if code == codes.Canceled && !s.deadline.IsZero() && !time.Now().Before(s.deadline) {
		// The server cancels a stream whose deadline passed (gRPC-go
		// does); as gRPC-go's client, tell the deadline.
		code = codes.DeadlineExceeded
	}
	if f.ErrCode == http2.ErrCodeRefusedStream {
		c.refuseLocked(s, msg)
	} else {
		c.endLocked(s, uint32(code), msg, nil, nil, true)
	}
	c.closeH2Locked(s)
}

// onWindow takes a WINDOW_UPDATE.
func (c *Conn) onWindow(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > 1<<31-1 {
			c.mu.Unlock()
			return c.connError(http2.ErrCodeFlowControl, fmt.Errorf("%w: the server's WINDOW_UPDATEs take the connection window past 2^31-1", transport.ErrProtocol))
		}
	} else if s := c.byID[f.StreamID]; s != nil {
		s.sendWindow += int64(f.Increment)
		if s.sendWindow > 1<<31-1 {
			c.mu.Unlock()
			return c.connError(http2.ErrCodeFlowControl, fmt.Errorf("%w: the server's WINDOW_UPDATEs take stream %d's window past 2^31-1", transport.ErrProtocol, f.StreamID))
		}
	}
	c.broadcast()
	c.mu.Unlock()
	return nil
}

// onGoAway takes the server's GOAWAY: no new streams; those above its
// last stream id were never processed and are refused (Unavailable, so
// the rpc layer retries them on another connection).
func (c *Conn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.goneAway = true
	for id, s := range c.byID {
		if id > f.LastStreamID {
			s.sentEnd, s.remoteEnd = true, true
			c.refuseLocked(s, "the server sent GOAWAY before it processed the call")
			c.closeH2Locked(s)
		}
	}
	debug := string(f.DebugData())
	code, msg := uint32(0), debug
	switch {
	case f.ErrCode == http2.ErrCodeNo:
	case f.ErrCode == http2.ErrCodeEnhanceYourCalm && debug == "too_many_pings":
		code = uint32(codes.ResourceExhausted)
	default:
		code = uint32(codes.Unavailable)
		msg = fmt.Sprintf("GOAWAY %v: %s", f.ErrCode, grpcwire.Clip(debug))
	}
	c.push(wire.AppendGoAway(nil, code, msg))
	c.broadcast()
}
