package h2client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/transport"
)

// fakeServer is a hand-driven HTTP/2 server for one connection: it reads
// the client's preface, sends its SETTINGS and runs script.
type fakeServer struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
}

func startFake(t *testing.T, script func(s *fakeServer), settings ...http2.Setting) transport.Conn {
	t.Helper()
	c, _ := startFakeSettings(t, script, settings...)
	return c
}

// startFakeSettings is startFake, returning the SETTINGS the rpc layer is
// given too.
func startFakeSettings(t *testing.T, script func(s *fakeServer), settings ...http2.Setting) (transport.Conn, wire.Settings) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := lis.Accept()
		lis.Close()
		if err != nil {
			return
		}
		defer nc.Close()
		pre := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(nc, pre); err != nil || string(pre) != http2.ClientPreface {
			t.Errorf("client preface %q, %v", pre, err)
			return
		}
		s := &fakeServer{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
		s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		s.henc = hpack.NewEncoder(&s.hbuf)
		if err := s.fr.WriteSettings(settings...); err != nil {
			return
		}
		script(s)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Transport{}.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); <-done })
	f := recvFrame(t, c)
	if f.Header.Kind != wire.KindSettings {
		t.Fatalf("first frame %v, want the synthesized SETTINGS", f.Header.Kind)
	}
	return c, f.Settings
}

// next returns the next frame of type T, skipping others.
func next[T http2.Frame](s *fakeServer) T {
	for {
		f, err := s.fr.ReadFrame()
		if err != nil {
			s.t.Errorf("server read: %v", err)
			var zero T
			return zero
		}
		if v, ok := f.(T); ok {
			return v
		}
	}
}

// noGoAway stands for a GOAWAY the server could not read: the client
// closes right after writing it, and a TCP reset (the client had unread
// data) may overtake it.
const noGoAway = http2.ErrCode(1 << 31)

// goAwayCode reads up to the client's GOAWAY and returns its code.
func goAwayCode(s *fakeServer) http2.ErrCode {
	for {
		f, err := s.fr.ReadFrame()
		if err != nil {
			return noGoAway
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode
		}
	}
}

func (s *fakeServer) headers(id uint32, end bool, fields ...string) {
	s.hbuf.Reset()
	for i := 0; i < len(fields); i += 2 {
		s.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: s.hbuf.Bytes(), EndHeaders: true, EndStream: end})
}

func recvFrame(t *testing.T, c transport.Conn) wire.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		b, err := c.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		f, err := wire.Decode(bytes.Clone(b.Bytes()))
		b.Release()
		if err != nil {
			t.Fatalf("Recv: a frame the rpc layer cannot read: %v", err)
		}
		if f.Header.Kind != wire.KindWindow {
			return f
		}
	}
}

func request(id uint64, payload []byte) []byte {
	return append(wire.AppendRequestHead(nil, id, 0, "/test.S/M", nil), payload...)
}

func send(t *testing.T, c transport.Conn, f []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Send(ctx, f); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// headerBlock is a response header block whose decoded size is just
// past limit.
func headerBlock(limit int) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	size := 0
	for i := 0; size <= limit; i++ {
		f := hpack.HeaderField{Name: ":status", Value: "200"}
		if i > 0 {
			f = hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", 1000) + string(rune('a'+i%26))}
		}
		e.WriteField(f)
		size += int(f.Size())
	}
	return b.Bytes()
}

func (s *fakeServer) headerFrames(id uint32, block []byte) {
	s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:min(len(block), 16384)], EndHeaders: len(block) <= 16384})
	for block = block[min(len(block), 16384):]; len(block) > 0; {
		n := min(len(block), 16384)
		s.fr.WriteContinuation(id, n == len(block), block[:n])
		block = block[n:]
	}
}

// A header list a little past MaxHeaderList fails its call with
// ResourceExhausted; the connection serves the next call.
func TestHeaderListOverLimit(t *testing.T) {
	c := startFake(t, func(s *fakeServer) {
		h := next[*http2.MetaHeadersFrame](s)
		s.headerFrames(h.StreamID, headerBlock(MaxHeaderList))
		next[*http2.RSTStreamFrame](s)
		h = next[*http2.MetaHeadersFrame](s)
		s.headers(h.StreamID, false, ":status", "200", "content-type", "application/grpc")
		s.fr.WriteData(h.StreamID, false, grpcwire.AppendPrefix(nil, false, 2))
		s.fr.WriteData(h.StreamID, false, []byte("ok"))
		s.headers(h.StreamID, true, "grpc-status", "0")
		next[*http2.GoAwayFrame](s)
	})
	send(t, c, request(1, nil))
	f := recvFrame(t, c)
	if f.Header.Kind != wire.KindResponse || codes.Code(f.Response.Code) != codes.ResourceExhausted || !strings.Contains(f.Response.Message, "header list") {
		t.Fatalf("got %v %v %q, want a ResourceExhausted RESPONSE naming the header list", f.Header.Kind, codes.Code(f.Response.Code), f.Response.Message)
	}
	send(t, c, request(3, nil))
	if f := recvFrame(t, c); f.Header.Kind != wire.KindResponse || f.Response.Code != 0 || string(f.Response.Payload) != "ok" {
		t.Fatalf("the next call: %v %v %q %q", f.Header.Kind, codes.Code(f.Response.Code), f.Response.Message, f.Response.Payload)
	}
}

// A header bomb (8 MiB of header block in CONTINUATIONs) closes the
// connection with a GOAWAY and an error naming the header list, having
// decoded and kept a bounded part of it.
func TestHeaderBomb(t *testing.T) {
	const bomb = 8 << 20
	goaway := make(chan http2.ErrCode, 1)
	block := headerBlock(bomb) // made before measuring: the server shares the process
	c := startFake(t, func(s *fakeServer) {
		h := next[*http2.MetaHeadersFrame](s)
		go func() { goaway <- goAwayCode(s) }()
		s.headerFrames(h.StreamID, block)
	})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	send(t, c, request(1, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for err == nil {
		var b transport.Buffer
		b, err = c.Recv(ctx) // the credit of the request's frame, then the end
		b.Release()
	}
	runtime.ReadMemStats(&after)
	if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, ErrHeaderListTooLarge) {
		t.Fatalf("Recv: %v, want the connection closed for the header list", err)
	}
	if code := <-goaway; code != http2.ErrCodeProtocol && code != noGoAway {
		t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", code)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("an %d-byte header block allocated %d bytes", bomb, got)
	}
}

// DATA past a stream's window (messages the rpc layer has not taken, so
// no WINDOW_UPDATE for them) is a connection error, told with GOAWAY
// FLOW_CONTROL_ERROR.
func TestDataBeyondWindow(t *testing.T) {
	goaway := make(chan http2.ErrCode, 1)
	c := startFake(t, func(s *fakeServer) {
		h := next[*http2.MetaHeadersFrame](s)
		read := make(chan http2.ErrCode, 1)
		go func() { read <- goAwayCode(s) }()
		s.headers(h.StreamID, false, ":status", "200", "content-type", "application/grpc")
		msg := grpcwire.AppendPrefix(nil, false, 16384-grpcwire.PrefixLen)
		msg = append(msg, make([]byte, 16384-grpcwire.PrefixLen)...)
		for range 64 { // 1 MiB, heeding no window
			if s.fr.WriteData(h.StreamID, false, msg) != nil {
				break
			}
		}
		goaway <- <-read // the connection stays open until the client ends it
	})
	send(t, c, wire.AppendOpen(nil, 1, wire.FlagClientStreams|wire.FlagServerStreams, 0, "/test.S/M", nil))
	if code := <-goaway; code != http2.ErrCodeFlowControl && code != noGoAway {
		t.Fatalf("GOAWAY %v, want FLOW_CONTROL_ERROR", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		b, err := c.Recv(ctx)
		if err != nil {
			if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "receive window") {
				t.Fatalf("Recv: %v, want a protocol error closing the connection", err)
			}
			break
		}
		b.Release()
	}
}

// The client never sends past the server's window: with no WINDOW_UPDATE
// it sends the 65535 bytes of the initial window, and its Send waits.
func TestSendKeepsToWindow(t *testing.T) {
	got := make(chan int, 1)
	after := make(chan http2.Frame, 1)
	canceled := make(chan struct{})
	c := startFake(t, func(s *fakeServer) {
		next[*http2.MetaHeadersFrame](s)
		n := 0
		for n < 65535 {
			d := next[*http2.DataFrame](s)
			if len(d.Data()) > 16384 {
				t.Errorf("a DATA frame of %d bytes, past the server's MAX_FRAME_SIZE", len(d.Data()))
			}
			n += len(d.Data())
		}
		got <- n
		<-canceled
		for {
			f, err := s.fr.ReadFrame()
			if err != nil {
				after <- nil
				return
			}
			switch f.(type) {
			case *http2.DataFrame, *http2.RSTStreamFrame:
				after <- f
				next[*http2.GoAwayFrame](s)
				return
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	sent := make(chan error, 1)
	go func() { sent <- c.Send(ctx, request(1, make([]byte, 100<<10))) }()
	if n := <-got; n != 65535 {
		t.Fatalf("the server got %d bytes before any WINDOW_UPDATE", n)
	}
	cancel()
	close(canceled)
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send: %v, want it to wait for window until cancelled", err)
	}
	if f := <-after; f == nil || f.Header().Type != http2.FrameRSTStream {
		t.Fatalf("after the window was used up the server read %v, want RST_STREAM", f)
	}
}

// RST_STREAM codes map to statuses; REFUSED_STREAM carries the refusal
// mark, so the rpc layer sends the call again.
func TestResetCodes(t *testing.T) {
	codesSent := []http2.ErrCode{http2.ErrCodeRefusedStream, http2.ErrCodeCancel, http2.ErrCodeEnhanceYourCalm, http2.ErrCodeInternal}
	c := startFake(t, func(s *fakeServer) {
		for _, code := range codesSent {
			h := next[*http2.MetaHeadersFrame](s)
			s.fr.WriteRSTStream(h.StreamID, code)
		}
		next[*http2.GoAwayFrame](s)
	})
	want := []codes.Code{codes.Unavailable, codes.Canceled, codes.ResourceExhausted, codes.Internal}
	for i := range codesSent {
		send(t, c, request(uint64(i+1), []byte("x")))
		f := recvFrame(t, c)
		if f.Header.Kind != wire.KindResponse || codes.Code(f.Response.Code) != want[i] {
			t.Fatalf("RST_STREAM %v: %v %v, want %v", codesSent[i], f.Header.Kind, codes.Code(f.Response.Code), want[i])
		}
		if refused := len(f.Response.Trailer[refusedKey]) > 0; refused != (i == 0) {
			t.Errorf("RST_STREAM %v: refusal mark %v", codesSent[i], refused)
		}
	}
}

// A non-gRPC answer maps its HTTP status as gRPC's spec says, and a
// trailers-only response carries its status.
func TestHTTPStatusAndTrailersOnly(t *testing.T) {
	c := startFake(t, func(s *fakeServer) {
		h := next[*http2.MetaHeadersFrame](s)
		s.headers(h.StreamID, true, ":status", "503", "content-type", "text/html")
		h = next[*http2.MetaHeadersFrame](s)
		s.headers(h.StreamID, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "5", "grpc-message", "no%20such%20key", "x-why", "gone")
		next[*http2.GoAwayFrame](s)
	})
	send(t, c, request(1, nil))
	if f := recvFrame(t, c); codes.Code(f.Response.Code) != codes.Unavailable || !strings.Contains(f.Response.Message, "503") {
		t.Fatalf("HTTP 503: %v %q", codes.Code(f.Response.Code), f.Response.Message)
	}
	send(t, c, request(3, nil))
	f := recvFrame(t, c)
	if codes.Code(f.Response.Code) != codes.NotFound || f.Response.Message != "no such key" || f.Response.Header.Get("x-why")[0] != "gone" {
		t.Fatalf("trailers-only: %v %q %v", codes.Code(f.Response.Code), f.Response.Message, f.Response.Header)
	}
}

// FuzzResponseHeaders decodes arbitrary header blocks as the reader does
// (HPACK with the header list limit, then the gRPC fields): no panic, and
// what reaches the rpc layer is metadata its decoder accepts.
func FuzzResponseHeaders(f *testing.F) {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	for _, hf := range []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"},
		{Name: "grpc-status", Value: "3"}, {Name: "grpc-message", Value: "bad%20arg"}, {Name: "x-bin", Value: "AAEC"},
		{Name: "grpc-status-details-bin", Value: "CAMSA2JhZBoA"}, {Name: "x-Upper", Value: "\x01"}} {
		e.WriteField(hf)
	}
	f.Add(b.Bytes())
	f.Add([]byte{0x88})
	f.Add([]byte{0x3f, 0xe1, 0x1f})
	f.Fuzz(func(t *testing.T, block []byte) {
		var fields []hpack.HeaderField
		size := 0
		d := hpack.NewDecoder(4096, func(hf hpack.HeaderField) {
			size += int(hf.Size())
			if size <= MaxHeaderList {
				fields = append(fields, hf)
			}
		})
		d.SetMaxStringLength(MaxHeaderList)
		if _, err := d.Write(block); err != nil {
			return
		}
		r, err := parseResponseHeaders(fields)
		if err != nil {
			return
		}
		frame := wire.AppendResponseHead(nil, 1, r.code, r.message, r.details, r.md, nil)
		if _, err := wire.Decode(frame); err != nil && !errors.Is(err, wire.ErrMetadataTooLarge) {
			t.Fatalf("the rpc layer cannot read what the headers became: %v", err)
		}
		for k := range r.md {
			if grpcwire.IsReserved(k) {
				t.Fatalf("reserved header %q passed as metadata", k)
			}
		}
	})
}

// The server's SETTINGS_MAX_CONCURRENT_STREAMS reaches the rpc layer, and
// a call beyond it waits in Send for a slot (here until its context
// ends) rather than opening a stream the server would refuse.
func TestStreamSlots(t *testing.T) {
	tried := make(chan struct{})
	c, set := startFakeSettings(t, func(s *fakeServer) {
		h := next[*http2.MetaHeadersFrame](s)
		if h.StreamID != 1 {
			t.Errorf("first stream %d", h.StreamID)
		}
		next[*http2.DataFrame](s)
		<-tried
		s.headers(1, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "7")
		h = next[*http2.MetaHeadersFrame](s)
		s.headers(h.StreamID, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "0")
		next[*http2.GoAwayFrame](s)
	}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	if set.MaxConcurrentStreams != 1 {
		t.Fatalf("the rpc layer's SETTINGS say %d streams, want 1", set.MaxConcurrentStreams)
	}
	send(t, c, request(1, []byte("a")))
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Send(expired, request(2, []byte("b"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second call with the only slot taken: %v, want it to wait", err)
	}
	close(tried)
	if f := recvFrame(t, c); codes.Code(f.Response.Code) != codes.PermissionDenied {
		t.Fatalf("first call: %v", codes.Code(f.Response.Code))
	}
	send(t, c, request(3, []byte("c"))) // the slot is free again
	if f := recvFrame(t, c); f.Header.CallID != 3 || codes.Code(f.Response.Code) != codes.Internal {
		t.Fatalf("third call: %d %v %q", f.Header.CallID, codes.Code(f.Response.Code), f.Response.Message)
	}
}

// The rpc layer's keepalive PINGs become HTTP/2 PINGs only while calls
// are open and MinPingInterval apart (gRPC-go's servers close
// connections pinged more often); the others are answered here.
func TestPingPolicy(t *testing.T) {
	seen := make(chan string, 8)
	c := startFake(t, func(s *fakeServer) {
		for {
			f, err := s.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.PingFrame:
				seen <- "PING"
				s.fr.WritePing(true, f.Data)
			case *http2.MetaHeadersFrame:
				seen <- "HEADERS"
			case *http2.GoAwayFrame:
				return
			}
		}
	})
	pong := func(data uint64) {
		t.Helper()
		send(t, c, wire.AppendPing(nil, false, data))
		if f := recvFrame(t, c); f.Header.Kind != wire.KindPong || f.Ping != data {
			t.Fatalf("after PING %d: %v %d", data, f.Header.Kind, f.Ping)
		}
	}
	pong(1) // idle: answered here
	send(t, c, request(1, nil))
	if got := <-seen; got != "HEADERS" {
		t.Fatalf("the server saw %s first, want the call's HEADERS (no PING while idle)", got)
	}
	pong(2) // a call is open: a real PING
	if got := <-seen; got != "PING" {
		t.Fatalf("the server saw %s, want a PING", got)
	}
	pong(3) // within MinPingInterval of the last: answered here
	send(t, c, request(3, nil))
	if got := <-seen; got != "HEADERS" {
		t.Fatalf("the server saw %s, want the next call's HEADERS (no second PING within %v)", got, MinPingInterval)
	}
}

// Cancelling a call whose request was wholly sent (END_STREAM gone)
// still resets its stream, so the server stops and the slot is free.
func TestCancelAfterRequestSent(t *testing.T) {
	got := make(chan *http2.RSTStreamFrame, 1)
	c := startFake(t, func(s *fakeServer) {
		next[*http2.MetaHeadersFrame](s)
		if d := next[*http2.DataFrame](s); !d.StreamEnded() {
			t.Error("the request's DATA did not end the stream")
		}
		got <- next[*http2.RSTStreamFrame](s)
		next[*http2.GoAwayFrame](s)
	})
	send(t, c, request(1, []byte("x")))
	send(t, c, wire.AppendCancel(nil, 1))
	if r := <-got; r.StreamID != 1 || r.ErrCode != http2.ErrCodeCancel {
		t.Fatalf("RST_STREAM %d %v, want stream 1 CANCEL", r.StreamID, r.ErrCode)
	}
}

// Request metadata larger than a frame goes in HEADERS and CONTINUATION
// frames within the server's MAX_FRAME_SIZE, binary values in base64.
func TestLargeRequestHeaders(t *testing.T) {
	big := strings.Repeat("m", 40<<10)
	got := make(chan *http2.MetaHeadersFrame, 1)
	c := startFake(t, func(s *fakeServer) {
		s.fr.ReadMetaHeaders.SetMaxStringLength(1 << 20)
		s.fr.MaxHeaderListSize = 1 << 20
		got <- next[*http2.MetaHeadersFrame](s)
		next[*http2.GoAwayFrame](s)
	})
	md := metadata.MD{"x-big": {big}, "x-bin": {"\x00\xff"}}
	send(t, c, append(wire.AppendRequestHead(nil, 1, 3*time.Second, "/test.S/M", md), 'x'))
	h := <-got
	if h.Truncated {
		t.Fatal("the server's decoder truncated the block")
	}
	want := map[string]string{":path": "/test.S/M", ":method": "POST", "te": "trailers", "content-type": "application/grpc",
		"grpc-timeout": "3000000u", "x-big": big, "x-bin": grpcwire.EncodeBinary([]byte("\x00\xff"))}
	fields := map[string]string{}
	for _, f := range h.Fields {
		fields[f.Name] = f.Value
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("%s: %q, want %q", k, grpcwire.Clip(fields[k]), grpcwire.Clip(v))
		}
	}
}

// RST_STREAM CANCEL once the call's deadline has passed is the deadline
// (gRPC-go's server cancels such streams), before it a cancellation.
func TestResetAfterDeadline(t *testing.T) {
	c := startFake(t, func(s *fakeServer) {
		h := next[*http2.MetaHeadersFrame](s)
		s.fr.WriteRSTStream(h.StreamID, http2.ErrCodeCancel)
		h = next[*http2.MetaHeadersFrame](s)
		s.fr.WriteRSTStream(h.StreamID, http2.ErrCodeCancel)
		next[*http2.GoAwayFrame](s)
	})
	send(t, c, append(wire.AppendRequestHead(nil, 1, 1, "/test.S/M", nil), 'x')) // 1 ns: over when the reset comes
	if f := recvFrame(t, c); codes.Code(f.Response.Code) != codes.DeadlineExceeded {
		t.Fatalf("reset past the deadline: %v", codes.Code(f.Response.Code))
	}
	send(t, c, append(wire.AppendRequestHead(nil, 3, time.Hour, "/test.S/M", nil), 'x'))
	if f := recvFrame(t, c); codes.Code(f.Response.Code) != codes.Canceled {
		t.Fatalf("reset within the deadline: %v", codes.Code(f.Response.Code))
	}
}

// GOAWAY: streams above its last id are refused (sent again elsewhere),
// those below go on; ENHANCE_YOUR_CALM "too_many_pings" reaches the rpc
// layer as such, so its keepalive backs off.
func TestGoAway(t *testing.T) {
	c := startFake(t, func(s *fakeServer) {
		h1 := next[*http2.MetaHeadersFrame](s)
		next[*http2.MetaHeadersFrame](s)
		s.fr.WriteGoAway(h1.StreamID, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings"))
		s.headers(h1.StreamID, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "9")
		next[*http2.GoAwayFrame](s)
	})
	send(t, c, request(1, nil))
	send(t, c, request(3, nil))
	var goaway, refused, answered bool
	for !(goaway && refused && answered) {
		f := recvFrame(t, c)
		switch {
		case f.Header.Kind == wire.KindGoAway:
			goaway = true
			if codes.Code(f.GoAway.Code) != codes.ResourceExhausted || f.GoAway.Message != "too_many_pings" {
				t.Fatalf("GOAWAY %v %q", codes.Code(f.GoAway.Code), f.GoAway.Message)
			}
		case f.Header.CallID == 3:
			refused = true
			if codes.Code(f.Response.Code) != codes.Unavailable || len(f.Response.Trailer[refusedKey]) == 0 {
				t.Fatalf("the call above the last id: %v %v", codes.Code(f.Response.Code), f.Response.Trailer)
			}
		case f.Header.CallID == 1:
			answered = true
			if codes.Code(f.Response.Code) != codes.FailedPrecondition {
				t.Fatalf("the call below the last id: %v", codes.Code(f.Response.Code))
			}
		}
	}
	// No new stream after GOAWAY: refused here at once.
	send(t, c, request(5, nil))
	if f := recvFrame(t, c); f.Header.CallID != 5 || len(f.Response.Trailer[refusedKey]) == 0 {
		t.Fatalf("a call after GOAWAY: %d %v", f.Header.CallID, codes.Code(f.Response.Code))
	}
}

// WINDOW_UPDATEs past 2^31-1 are a connection error.
func TestWindowOverflow(t *testing.T) {
	c := startFake(t, func(s *fakeServer) {
		s.fr.WriteWindowUpdate(0, 1<<31-1)
		goAwayCode(s) // the connection stays open until the client ends it
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		b, err := c.Recv(ctx)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "2^31-1") {
				t.Fatalf("Recv: %v, want a protocol error about the window", err)
			}
			return
		}
		b.Release()
	}
}
