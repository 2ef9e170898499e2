package grpcwire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http2"

	"github.com/rdmarpc/rdmarpc/codes"
)

func TestReaderMessages(t *testing.T) {
	var in []byte
	msgs := [][]byte{{}, []byte("hello"), bytes.Repeat([]byte{7}, 100<<10)}
	for i, m := range msgs {
		in = AppendPrefix(in, i == 1, len(m))
		in = append(in, m...)
	}
	r := NewReader(bytes.NewReader(in), 1<<20)
	buf := make([]byte, 0, 16)
	for i, want := range msgs {
		got, compressed, err := r.Next(buf)
		if err != nil || !bytes.Equal(got, want) || compressed != (i == 1) {
			t.Fatalf("message %d: %d bytes, compressed %v, %v", i, len(got), compressed, err)
		}
	}
	if _, _, err := r.Next(buf); err != io.EOF {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
}

func TestReaderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"bad flag", []byte{2, 0, 0, 0, 1, 'x'}, ErrMalformed},
		{"over the limit", AppendPrefix(nil, false, 1025), ErrTooLarge},
		{"over 2^31-1", []byte{0, 0xff, 0xff, 0xff, 0xff}, ErrTooLarge},
		{"ends in the prefix", []byte{0, 0, 0}, ErrMalformed},
		{"ends in the message", append(AppendPrefix(nil, false, 10), "abc"...), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := NewReader(bytes.NewReader(tc.in), 1024).Next(nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestAnnouncedIsNotAllocated: a peer that announces a message at the limit
// and sends a few bytes costs about what it sent.
func TestAnnouncedIsNotAllocated(t *testing.T) {
	in := append(AppendPrefix(nil, false, 256<<20), "just this"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := NewReader(bytes.NewReader(in), 256<<20).Next(nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("got %v, want a truncated message", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("a 256 MiB announcement with 9 bytes sent allocated %d bytes", got)
	}
}

func TestTimeout(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "1n"}, {-time.Second, "1n"}, {1, "1n"}, {99999999, "99999999n"},
		{time.Second, "1000000u"}, {1500 * time.Millisecond, "1500000u"},
		{time.Hour, "3600000m"}, {100 * 24 * time.Hour, "8640000S"}, {1000 * 24 * time.Hour, "86400000S"}, {10000 * 24 * time.Hour, "14400000M"},
		{time.Second + 1, "1000001u"}, // rounded up, never less time
		{math.MaxInt64, "2562048H"},
	} {
		if got := EncodeTimeout(tc.d); got != tc.want {
			t.Errorf("EncodeTimeout(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    string
		want time.Duration
	}{
		{"1n", 1}, {"0S", 0}, {"10S", 10 * time.Second}, {"5M", 5 * time.Minute},
		{"00000002H", 2 * time.Hour}, {"250m", 250 * time.Millisecond}, {"7u", 7 * time.Microsecond},
		{"99999999H", math.MaxInt64}, {"2562047H", 2562047 * time.Hour}, // past a Duration: the largest
	} {
		if got, err := DecodeTimeout(tc.s); err != nil || got != tc.want {
			t.Errorf("DecodeTimeout(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
	for _, s := range []string{"", "S", "1", "123456789S", "-1S", "+1S", "1x", "1s", " 1S", "1.5S", strings.Repeat("9", 1000) + "S"} {
		if _, err := DecodeTimeout(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeTimeout(%q): %v, want malformed", clip(s), err)
		}
	}
}

func TestMessage(t *testing.T) {
	for _, tc := range []struct{ in, wire string }{
		{"", ""}, {"plain text ~!", "plain text ~!"}, {"100%", "100%25"},
		{"h\u00e9llo\n", "h%C3%A9llo%0A"}, {"\u2603", "%E2%98%83"},
	} {
		if got := EncodeMessage(tc.in); got != tc.wire {
			t.Errorf("EncodeMessage(%q) = %q, want %q", tc.in, got, tc.wire)
		}
		if got := DecodeMessage(tc.wire); got != tc.in {
			t.Errorf("DecodeMessage(%q) = %q, want %q", tc.wire, got, tc.in)
		}
	}
	for _, tc := range []struct{ wire, want string }{
		{"%zz", "%zz"}, {"50%", "50%"}, {"5%4", "5%4"}, {"%C3", "\uFFFD"}, {"a\xffb", "a\uFFFDb"},
	} {
		if got := DecodeMessage(tc.wire); got != tc.want {
			t.Errorf("DecodeMessage(%q) = %q, want %q", tc.wire, got, tc.want)
		}
	}
}

func TestBinary(t *testing.T) {
	v := []byte{0, 1, 2, 250, 251}
	enc := EncodeBinary(v)
	if strings.Contains(enc, "=") {
		t.Errorf("EncodeBinary emitted padding: %q", enc)
	}
	for _, s := range []string{enc, enc + "="} {
		if got, err := DecodeBinary(s); err != nil || !bytes.Equal(got, v) {
			t.Errorf("DecodeBinary(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := DecodeBinary("not base64!"); !errors.Is(err, ErrMalformed) {
		t.Errorf("DecodeBinary of junk: %v", err)
	}
	if !IsBinaryHeader("trace-bin") || IsBinaryHeader("trace") {
		t.Error("IsBinaryHeader")
	}
}

func TestHeaders(t *testing.T) {
	for _, k := range []string{":path", "content-type", "grpc-status", "grpc-timeout", "te", "connection"} {
		if !IsReserved(k) {
			t.Errorf("%q is not reserved", k)
		}
	}
	for _, k := range []string{"authorization", "x-user", "grpc-trace-bin"} {
		if IsReserved(k) {
			t.Errorf("%q is reserved", k)
		}
	}
	for _, tc := range []struct {
		ct, sub string
		ok      bool
	}{
		{"application/grpc", "", true}, {"application/grpc+proto", "proto", true},
		{"application/grpc+json; charset=utf-8", "json", true}, {"Application/GRPC", "", true},
		{"application/grpc;x=y", "", true}, {"application/grpcx", "", false},
		{"application/json", "", false}, {"", "", false},
	} {
		if sub, ok := ContentSubtype(tc.ct); sub != tc.sub || ok != tc.ok {
			t.Errorf("ContentSubtype(%q) = %q, %v; want %q, %v", tc.ct, sub, ok, tc.sub, tc.ok)
		}
	}
	if ContentType("") != "application/grpc" || ContentType("json") != "application/grpc+json" {
		t.Error("ContentType")
	}
}

func TestCodes(t *testing.T) {
	for s, want := range map[int]codes.Code{400: codes.Internal, 401: codes.Unauthenticated, 403: codes.PermissionDenied,
		404: codes.Unimplemented, 429: codes.Unavailable, 502: codes.Unavailable, 503: codes.Unavailable,
		504: codes.Unavailable, 500: codes.Unknown, 200: codes.Unknown} {
		if got := CodeForHTTPStatus(s); got != want {
			t.Errorf("HTTP %d: %v, want %v", s, got, want)
		}
	}
	for e, want := range map[http2.ErrCode]codes.Code{http2.ErrCodeNo: codes.Internal, http2.ErrCodeProtocol: codes.Internal,
		http2.ErrCodeRefusedStream: codes.Unavailable, http2.ErrCodeCancel: codes.Canceled,
		http2.ErrCodeEnhanceYourCalm: codes.ResourceExhausted, http2.ErrCodeInadequateSecurity: codes.PermissionDenied} {
		if got := CodeForReset(e); got != want {
			t.Errorf("RST_STREAM %v: %v, want %v", e, got, want)
		}
	}
	if ResetFor(codes.DeadlineExceeded) != http2.ErrCodeCancel || ResetFor(codes.Internal) != http2.ErrCodeInternal {
		t.Error("ResetFor")
	}
}

func FuzzReader(f *testing.F) {
	f.Add(append(AppendPrefix(nil, false, 3), "abc"...), 16)
	f.Add([]byte{1, 0, 0, 0, 0}, 0)
	f.Add([]byte{9, 0xff, 0xff, 0xff, 0xff}, 1<<20)
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		limit = max(0, limit%(1<<20))
		r := NewReader(bytes.NewReader(in), limit)
		total := 0
		for {
			msg, _, err := r.Next(nil)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(msg) > limit {
				t.Fatalf("a message of %d bytes over the limit %d", len(msg), limit)
			}
			total += PrefixLen + len(msg)
			if total > len(in) {
				t.Fatalf("read %d bytes of messages from %d", total, len(in))
			}
		}
	})
}

func FuzzDecodeTimeout(f *testing.F) {
	for _, s := range []string{"1n", "99999999H", "10S", "-1S", "1x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := DecodeTimeout(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("DecodeTimeout(%q) = %v", s, d)
		}
		// What we send for d decodes to no less than d.
		if back, err := DecodeTimeout(EncodeTimeout(d)); err != nil || (d > 0 && back < d) {
			t.Fatalf("round trip of %v: %v, %v", d, back, err)
		}
	})
}

func FuzzMessage(f *testing.F) {
	for _, s := range []string{"", "%", "%4", "%41", "h\u00e9", "\xff", "100%25"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := DecodeMessage(s); !utf8.ValidString(got) {
			t.Fatalf("DecodeMessage(%q) = %q: not UTF-8", s, got)
		}
		enc := EncodeMessage(s)
		for i := 0; i < len(enc); i++ {
			if enc[i] < 0x20 || enc[i] > 0x7e {
				t.Fatalf("EncodeMessage(%q) = %q: byte %#x is not printable ASCII", s, enc, enc[i])
			}
		}
		if utf8.ValidString(s) && DecodeMessage(enc) != s {
			t.Fatalf("round trip of %q: %q", s, DecodeMessage(enc))
		}
	})
}

func FuzzDecodeBinary(f *testing.F) {
	f.Add("AAEC+vs")
	f.Add("AAEC+vs=")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := DecodeBinary(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if back, err := DecodeBinary(EncodeBinary(b)); err != nil || !bytes.Equal(back, b) {
			t.Fatalf("round trip of %x: %x, %v", b, back, err)
		}
	})
}

// A sample that fills the window at the best bandwidth doubles it, up to
// the bound; a small one, or a slower one, leaves it.
func TestBDP(t *testing.T) {
	b := NewBDP(64<<10, 1<<20)
	now := time.Unix(100, 0)
	if !b.Received(1000, now) {
		t.Fatal("the first DATA starts no measurement")
	}
	if b.Received(63<<10, now) {
		t.Fatal("a second PING while one is out")
	}
	if w := b.Acked(now.Add(time.Millisecond)); w != 2*(1000+63<<10) {
		t.Fatalf("window %d after a full sample, want twice the sample", w)
	}
	// A small sample: no growth.
	b.Received(100, now)
	if w := b.Acked(now.Add(time.Millisecond)); w != 0 {
		t.Fatalf("window %d after a small sample", w)
	}
	// Full samples grow it to the bound, and then no PING is asked for.
	for range 10 {
		if !b.Received(int(b.Window()), now) {
			break
		}
		b.Acked(now.Add(time.Millisecond))
	}
	if b.Window() != 1<<20 {
		t.Fatalf("window %d, want the bound", b.Window())
	}
	if b.Received(1, now) {
		t.Fatal("a PING asked for at the bound")
	}
	if b.Acked(now) != 0 {
		t.Fatal("an ack without a PING changed the window")
	}
}

// AppendPart ends with the message in a buffer of its size, having grown
// by doubling from a small start.
func TestAppendPart(t *testing.T) {
	const total = 65540
	msg := make([]byte, 0, 1024)
	want := make([]byte, 0, total)
	for i := 0; len(want) < total; i++ {
		p := bytes.Repeat([]byte{byte(i)}, min(16384, total-len(want)))
		want = append(want, p...)
		msg = AppendPart(msg, p, total)
		if cap(msg) > total {
			t.Fatalf("capacity %d past the message's %d", cap(msg), total)
		}
	}
	if !bytes.Equal(msg, want) || cap(msg) != total {
		t.Fatalf("assembled %d bytes in %d, want %d in %d", len(msg), cap(msg), total, total)
	}
}
