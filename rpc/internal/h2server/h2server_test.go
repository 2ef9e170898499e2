package h2server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds what would otherwise hang: progress, not speed.
const hangGuard = 60 * time.Second

// started counts the calls the test service's handler began; block, when
// not nil, holds them until the call's context ends.
type service struct {
	started atomic.Int64
	block   bool
	ended   chan error // each blocked call's context error
}

var desc = rpc.ServiceDesc{
	ServiceName: "t.S",
	HandlerType: (*any)(nil),
	Methods: []rpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt rpc.UnaryServerInterceptor) (any, error) {
			s := srv.(*service)
			s.started.Add(1)
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				if s.block {
					<-ctx.Done()
					s.ended <- ctx.Err()
					return nil, ctx.Err()
				}
				return req, nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &rpc.UnaryServerInfo{Server: srv, FullMethod: "/t.S/Call"}, h)
		},
	}},
}

// serve starts a server of svc on tcp:// with opts; it stops with the test.
func serve(t *testing.T, svc *service, to tcp.Options, opts ...rpc.ServerOption) string {
	t.Helper()
	lis, err := tcp.New(to).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(opts...)
	s.RegisterService(&desc, svc)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// client is a raw HTTP/2 client.
type client struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(hangGuard))
	c := &client{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// headers writes a request's HEADERS: the usual fields, then extra.
func (c *client) headers(id uint32, end bool, extra ...string) {
	c.t.Helper()
	c.hbuf.Reset()
	fields := []string{":method", "POST", ":scheme", "http", ":path", "/t.S/Call", ":authority", "x", "content-type", "application/grpc", "te", "trailers"}
	fields = append(fields, extra...)
	for i := 0; i < len(fields); i += 2 {
		_ = c.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
		c.t.Fatal(err)
	}
}

// message writes an empty gRPC message and END_STREAM on id.
func (c *client) message(id uint32) {
	c.t.Helper()
	if err := c.fr.WriteData(id, true, grpcwire.AppendPrefix(nil, false, 0)); err != nil {
		c.t.Fatal(err)
	}
}

// until reads frames until stop says so, answering nothing; it fails the
// test when the connection ends first.
func (c *client) until(stop func(http2.Frame) bool) {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading: %v", err)
		}
		if stop(f) {
			return
		}
	}
}

// endOf reads until stream id ends and returns its last header fields.
func (c *client) endOf(id uint32) map[string]string {
	c.t.Helper()
	var got map[string]string
	c.until(func(f http2.Frame) bool {
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == id {
			got = map[string]string{}
			for _, hf := range h.Fields {
				got[hf.Name] = hf.Value
			}
			return h.StreamEnded()
		}
		return false
	})
	return got
}

func TestUnary(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}))
	c.headers(1, false)
	c.message(1)
	if got := c.endOf(1); got["grpc-status"] != "0" {
		t.Fatalf("trailers %v", got)
	}
}

// TestContentType: a request that is not gRPC's gets HTTP 415.
func TestContentType(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}))
	c.hbuf.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/t.S/Call"}, {Name: "content-type", Value: "application/json"}} {
		_ = c.henc.WriteField(f)
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if got := c.endOf(1); got[":status"] != "415" {
		t.Fatalf("response %v, want :status 415", got)
	}
}

// TestResetCancels: RST_STREAM from the client cancels the call's context.
func TestResetCancels(t *testing.T) {
	svc := &service{block: true, ended: make(chan error, 1)}
	c := dial(t, serve(t, svc, tcp.Options{}))
	c.headers(1, false)
	c.message(1)
	// The call is running once the server has its message: wait for the
	// handler (progress, not time).
	for svc.started.Load() == 0 {
		runtime.Gosched()
	}
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-svc.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the handler's context ended with %v, want Canceled", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("the handler's context never ended")
	}
}

// TestHeaderListOverLimit: a header list over the limit gets a clear
// refusal of the call, and the connection goes on.
func TestHeaderListOverLimit(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}, rpc.MaxHeaderListSize(8<<10)))
	big := strings.Repeat("v", 3<<10)
	c.headers(1, true, "x-a", big, "x-b", big, "x-c", big)
	if got := c.endOf(1); got["grpc-status"] != "8" || !strings.Contains(grpcwire.DecodeMessage(got["grpc-message"]), "header list") {
		t.Fatalf("refusal %v, want grpc-status 8 naming the header list", got)
	}
	c.headers(3, false)
	c.message(3)
	if got := c.endOf(3); got["grpc-status"] != "0" {
		t.Fatalf("the next call: %v", got)
	}
}

// TestHeaderListBomb: a header list far over the limit, in CONTINUATION
// frames, ends the connection with a GOAWAY, having held bounded memory.
func TestHeaderListBomb(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}, rpc.MaxHeaderListSize(8<<10)))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c.hbuf.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/t.S/Call"}, {Name: "content-type", Value: "application/grpc"}} {
		_ = c.henc.WriteField(f)
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hbuf.Bytes()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Up to 32 MiB of headers, each a new field (so the table cannot
		// shrink it), until the server stops taking them.
		henc := hpack.NewEncoder(&c.hbuf)
		v := strings.Repeat("v", 1000)
		const frames = 2048
		for i := range frames {
			c.hbuf.Reset()
			for j := range 16 {
				_ = henc.WriteField(hpack.HeaderField{Name: "x-" + strconv.Itoa(i*16+j), Value: v, Sensitive: true})
			}
			if err := c.fr.WriteContinuation(1, i == frames-1, c.hbuf.Bytes()); err != nil {
				return
			}
		}
	}()
	var ga *http2.GoAwayFrame
	for ga == nil {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without a GOAWAY: %v", err)
		}
		ga, _ = f.(*http2.GoAwayFrame)
	}
	runtime.ReadMemStats(&after)
	c.nc.Close()
	<-done
	if ga.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("GOAWAY %v %q, want PROTOCOL_ERROR", ga.ErrCode, ga.DebugData())
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Fatalf("the heap grew %d bytes taking a header list bomb", grew)
	}
}

// TestRapidReset: streams opened and reset at once (CVE-2023-44487) end
// the connection with GOAWAY ENHANCE_YOUR_CALM, and most never ran.
func TestRapidReset(t *testing.T) {
	svc := &service{}
	c := dial(t, serve(t, svc, tcp.Options{}))
	const n = 5000
	done := make(chan error, 1)
	go func() {
		var err error
		for i := range uint32(n) {
			id := 2*i + 1
			c.hbuf.Reset()
			for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/t.S/Call"}, {Name: "content-type", Value: "application/grpc"}} {
				_ = c.henc.WriteField(f)
			}
			if err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
				break
			}
			if err = c.fr.WriteData(id, false, grpcwire.AppendPrefix(nil, false, 0)); err != nil {
				break
			}
			if err = c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
				break
			}
		}
		done <- err
	}()
	var ga *http2.GoAwayFrame
	for ga == nil {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without a GOAWAY: %v", err)
		}
		ga, _ = f.(*http2.GoAwayFrame)
	}
	if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
	}
	c.nc.Close()
	<-done
	if got := svc.started.Load(); got != 0 {
		t.Fatalf("%d reset calls ran", got)
	}
}

// TestPrefaceNeverFinishes: a client that stops inside the preface is
// dropped by the handshake timeout.
func TestPrefaceNeverFinishes(t *testing.T) {
	addr := serve(t, &service{}, tcp.Options{HandshakeTimeout: 100 * time.Millisecond})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, http2.ClientPreface[:20]); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(hangGuard))
	n, err := nc.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("read %d bytes, %v; want the server to close", n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestMaxConcurrentStreams: the server's SETTINGS carry
// MaxConcurrentStreams, and a stream past it is refused (REFUSED_STREAM)
// without running.
func TestMaxConcurrentStreams(t *testing.T) {
	svc := &service{block: true, ended: make(chan error, 3)}
	c := dial(t, serve(t, svc, tcp.Options{}, rpc.MaxConcurrentStreams(2)))
	c.until(func(f http2.Frame) bool {
		s, ok := f.(*http2.SettingsFrame)
		if !ok || s.IsAck() {
			return false
		}
		if v, ok := s.Value(http2.SettingMaxConcurrentStreams); !ok || v != 2 {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (%v), want 2", v, ok)
		}
		return true
	})
	for _, id := range []uint32{1, 3, 5} {
		c.headers(id, false)
		c.message(id)
	}
	c.until(func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		if ok && (r.StreamID != 5 || r.ErrCode != http2.ErrCodeRefusedStream) {
			t.Fatalf("RST_STREAM %d %v, want 5 REFUSED_STREAM", r.StreamID, r.ErrCode)
		}
		return ok
	})
	for svc.started.Load() < 2 {
		runtime.Gosched()
	}
	if got := svc.started.Load(); got != 2 {
		t.Fatalf("%d calls ran, want 2", got)
	}
	// Cancelled, the two running calls end.
	for _, id := range []uint32{1, 3} {
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
		<-svc.ended
	}
}

// TestInterceptorSeesGRPCCall: a gRPC client's call takes the server's
// call path: its interceptor runs with the method, the metadata (-bin
// decoded, reserved headers left out but grpc-accept-encoding, as gRPC-go's)
// and the peer.
func TestInterceptorSeesGRPCCall(t *testing.T) {
	type seen struct {
		method string
		md     metadata.MD
		peer   net.Addr
	}
	got := make(chan seen, 1)
	icpt := func(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		p, _ := peer.FromContext(ctx)
		m, _ := rpc.Method(ctx) // the server's, from :path
		got <- seen{m, md, p.Addr}
		return h(ctx, req)
	}
	c := dial(t, serve(t, &service{}, tcp.Options{}, rpc.UnaryInterceptor(icpt)))
	c.headers(1, false, "x-k", "v", "x-k-bin", grpcwire.EncodeBinary([]byte{0, 0xff}), "grpc-accept-encoding", "gzip")
	c.message(1)
	if tr := c.endOf(1); tr["grpc-status"] != "0" {
		t.Fatalf("trailers %v", tr)
	}
	s := <-got
	if s.method != "/t.S/Call" {
		t.Errorf("method %q", s.method)
	}
	if v := s.md["x-k"]; len(v) != 1 || v[0] != "v" {
		t.Errorf("x-k %q", v)
	}
	if v := s.md["x-k-bin"]; len(v) != 1 || v[0] != string([]byte{0, 0xff}) {
		t.Errorf("x-k-bin %q", v)
	}
	for _, k := range []string{"te", ":path"} {
		if _, ok := s.md[k]; ok {
			t.Errorf("reserved header %q in the metadata", k)
		}
	}
	// As gRPC-go's server does (http2_server.go puts it in the metadata).
	if v := s.md["grpc-accept-encoding"]; len(v) != 1 || v[0] != "gzip" {
		t.Errorf("grpc-accept-encoding %q, want gzip", v)
	}
	if s.peer == nil || s.peer.String() != c.nc.LocalAddr().String() {
		t.Errorf("peer %v, want %v", s.peer, c.nc.LocalAddr())
	}
}
