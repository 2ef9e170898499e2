package h2server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/transport/tcp"

	_ "github.com/rdmarpc/rdmarpc/encoding/gzip"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// response reads stream id to its end: the first header block's fields,
// the DATA bytes, and the trailers' fields.
func (c *client) response(id uint32) (head map[string]string, data []byte, trailers map[string]string) {
	c.t.Helper()
	c.until(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				return false
			}
			m := map[string]string{}
			for _, hf := range f.Fields {
				m[hf.Name] = hf.Value
			}
			if head == nil && !f.StreamEnded() {
				head = m
				return false
			}
			trailers = m
			return f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID == id {
				data = append(data, f.Data()...)
			}
		}
		return false
	})
	return head, data, trailers
}

// TestCompressedRequest: a gzip request (flag 1) is answered gzip, as
// gRPC-go's server does; so is one whose message is left uncompressed
// (flag 0, as gRPC-go's client leaves an empty message).
func TestCompressedRequest(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}))
	for i, msg := range [][]byte{
		grpcwire.AppendPrefix(nil, true, len(gzipped(t, nil))),
		grpcwire.AppendPrefix(nil, false, 0),
	} {
		id := uint32(1 + 2*i)
		if i == 0 {
			msg = append(msg, gzipped(t, nil)...)
		}
		c.headers(id, false, "grpc-encoding", "gzip", "grpc-accept-encoding", "gzip")
		if err := c.fr.WriteData(id, true, msg); err != nil {
			t.Fatal(err)
		}
		head, data, tr := c.response(id)
		if tr["grpc-status"] != "0" {
			t.Fatalf("message %d: trailers %v", i, tr)
		}
		if head["grpc-encoding"] != "gzip" {
			t.Fatalf("message %d: response headers %v, want grpc-encoding gzip", i, head)
		}
		if len(data) < grpcwire.PrefixLen || data[0] != 1 {
			t.Fatalf("message %d: response message %x, want the compressed flag", i, data)
		}
		r, err := gzip.NewReader(bytes.NewReader(data[grpcwire.PrefixLen:]))
		if err != nil {
			t.Fatalf("message %d: the response is not gzip: %v", i, err)
		}
		var out bytes.Buffer
		if _, err := out.ReadFrom(r); err != nil || out.Len() != 0 {
			t.Fatalf("message %d: the response decompressed to %d bytes, %v; want the empty message", i, out.Len(), err)
		}
	}
}

// TestGzipBomb: a small compressed message that inflates past the
// server's limit is refused ResourceExhausted, having been read no
// further than the limit; the connection goes on.
func TestGzipBomb(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}, rpc.MaxRecvMsgSize(64<<10)))
	bomb := gzipped(t, make([]byte, 8<<20))
	if len(bomb) > 200<<10 {
		t.Fatalf("the bomb is %d bytes", len(bomb))
	}
	c.headers(1, false, "grpc-encoding", "gzip")
	msg := append(grpcwire.AppendPrefix(nil, true, len(bomb)), bomb...)
	for len(msg) > 0 {
		n := min(len(msg), 16<<10)
		if err := c.fr.WriteData(1, n == len(msg), msg[:n]); err != nil {
			t.Fatal(err)
		}
		msg = msg[n:]
	}
	if _, _, tr := c.response(1); tr["grpc-status"] != "8" || !strings.Contains(grpcwire.DecodeMessage(tr["grpc-message"]), "decompression") {
		t.Fatalf("trailers %v, want grpc-status 8 (ResourceExhausted) about decompression", tr)
	}
	c.headers(3, false)
	c.message(3)
	if got := c.endOf(3); got["grpc-status"] != "0" {
		t.Fatalf("the next call: %v", got)
	}
}

// TestCompressedWithoutEncoding: the compressed flag on a request that
// named no grpc-encoding is Internal, as the spec says.
func TestCompressedWithoutEncoding(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}))
	c.headers(1, false)
	if err := c.fr.WriteData(1, true, append(grpcwire.AppendPrefix(nil, true, 3), 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if got := c.endOf(1); got["grpc-status"] != "13" {
		t.Fatalf("trailers %v, want grpc-status 13", got)
	}
}

// TestUnknownEncoding: a compressor the server lacks is Unimplemented.
func TestUnknownEncoding(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}))
	c.headers(1, false, "grpc-encoding", "x-none")
	c.message(1)
	if got := c.endOf(1); got["grpc-status"] != "12" {
		t.Fatalf("trailers %v, want grpc-status 12", got)
	}
}

// A request that fills the stream window in a round trip grows it (BDP
// estimation, as gRPC-go's): the server PINGs on the first DATA, and on
// the ack announces a larger SETTINGS_INITIAL_WINDOW_SIZE, bounded by the
// connection's window.
func TestBDPGrowsStreamWindow(t *testing.T) {
	c := dial(t, serve(t, &service{}, tcp.Options{}))
	var w0 uint32
	c.until(func(f http2.Frame) bool {
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			w0, _ = s.Value(http2.SettingInitialWindowSize)
			return true
		}
		return false
	})
	if w0 == 0 {
		w0 = 65535
	}
	c.headers(1, false)
	data := append(grpcwire.AppendPrefix(nil, false, 1<<20), make([]byte, int(w0)-grpcwire.PrefixLen)...)
	for len(data) > 0 {
		n := min(len(data), 16384)
		if err := c.fr.WriteData(1, false, data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	c.until(func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		if ok && !p.IsAck() && p.Data == grpcwire.BDPPing {
			if err := c.fr.WritePing(true, p.Data); err != nil {
				t.Fatal(err)
			}
			return true
		}
		return false
	})
	var w uint32
	c.until(func(f http2.Frame) bool {
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			w, ok = s.Value(http2.SettingInitialWindowSize)
			return ok && w > w0
		}
		return false
	})
	if w != 2*w0 || w > grpcwire.MaxBDPWindow {
		t.Fatalf("the window grew from %d to %d, want twice the sample, at most %d", w0, w, grpcwire.MaxBDPWindow)
	}
}

// TestSetSendCompressor: a handler answers compressed with a compressor
// the gRPC client advertised in grpc-accept-encoding (SetSendCompressor),
// and not with one it did not; every response names the compressors the
// server takes in its own grpc-accept-encoding.
func TestSetSendCompressor(t *testing.T) {
	set := make(chan error, 1)
	addr := serve(t, &service{}, tcp.Options{}, rpc.UnaryInterceptor(func(ctx context.Context, req any, _ *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
		set <- rpc.SetSendCompressor(ctx, "gzip")
		return h(ctx, req)
	}))
	for _, advertised := range []bool{true, false} {
		c := dial(t, addr) // a connection each: the server remembers what a client advertised
		var extra []string
		if advertised {
			extra = []string{"grpc-accept-encoding", "identity,deflate,gzip"}
		}
		c.headers(1, false, extra...)
		c.message(1)
		head, data, tr := c.response(1)
		err := <-set
		if tr["grpc-status"] != "0" {
			t.Fatalf("advertised %v: trailers %v", advertised, tr)
		}
		if !slices.Contains(strings.Split(head["grpc-accept-encoding"], ","), "gzip") {
			t.Errorf("advertised %v: response headers %v, want a grpc-accept-encoding with gzip", advertised, head)
		}
		if !advertised {
			if err == nil || head["grpc-encoding"] != "" || len(data) < grpcwire.PrefixLen || data[0] != 0 {
				t.Errorf("not advertised: SetSendCompressor said %v; headers %v, message %x: want an error and no compression", err, head, data)
			}
			continue
		}
		if err != nil {
			t.Fatalf("SetSendCompressor(gzip) for a client that takes gzip: %v", err)
		}
		if head["grpc-encoding"] != "gzip" || len(data) < grpcwire.PrefixLen || data[0] != 1 {
			t.Fatalf("response headers %v, message %x: want grpc-encoding gzip and the compressed flag", head, data)
		}
		r, err := gzip.NewReader(bytes.NewReader(data[grpcwire.PrefixLen:]))
		if err != nil {
			t.Fatalf("the response is not gzip: %v", err)
		}
		var out bytes.Buffer
		if _, err := out.ReadFrom(r); err != nil || out.Len() != 0 {
			t.Fatalf("the response decompressed to %d bytes, %v; want the empty message", out.Len(), err)
		}
	}
}
