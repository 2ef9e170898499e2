package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/metadata"
)

func TestRequestRoundTrip(t *testing.T) {
	md := metadata.Pairs("a", "1", "a", "2", "trace-bin", "\x00\xff")
	b := AppendRequestHead(nil, 42, 1500*time.Millisecond, "/pkg.S/M", md)
	b = append(b, "payload"...)
	h, body, err := ParseHeader(b)
	if err != nil || h != (Header{Kind: KindRequest, CallID: 42}) {
		t.Fatalf("header %+v, %v", h, err)
	}
	r, err := ParseRequest(body, DefaultMaxMetadata)
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeout != 1500*time.Millisecond || r.Method != "/pkg.S/M" || string(r.Payload) != "payload" || !reflect.DeepEqual(r.MD, md) {
		t.Fatalf("got %+v", r)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	b := AppendResponseHead(nil, 7, 5, "not found", [][]byte{[]byte("d1"), nil}, metadata.Pairs("h", "v"), metadata.Pairs("t", "w"))
	_, body, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseResponse(body, DefaultMaxMetadata)
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != 5 || r.Message != "not found" || len(r.Details) != 2 || string(r.Details[0]) != "d1" ||
		r.Header.Get("h")[0] != "v" || r.Trailer.Get("t")[0] != "w" || len(r.Payload) != 0 {
		t.Fatalf("got %+v", r)
	}
	ok := append(AppendResponseHead(nil, 8, 0, "", nil, nil, nil), "reply"...)
	_, body, _ = ParseHeader(ok)
	if r, err := ParseResponse(body, DefaultMaxMetadata); err != nil || string(r.Payload) != "reply" {
		t.Fatalf("OK response: %+v, %v", r, err)
	}
}

func TestRejects(t *testing.T) {
	req := AppendRequestHead(nil, 1, 0, "/a/b", nil)
	cases := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"empty", nil, "shorter than the 12-byte header"},
		{"short header", req[:5], "shorter than"},
		{"version 2 peer", append([]byte{2}, req[1:]...), "unsupported frame version 2 (this side speaks 3): upgrade the older peer"},
		{"version 4", append([]byte{4}, req[1:]...), "unsupported frame version 4"},
		{"unknown kind", append([]byte{3, 99}, req[2:]...), "unknown frame kind 99"},
		{"flags", append([]byte{3, 1, 4}, req[3:]...), "unknown flags"},
		{"open flags", append([]byte{3, 7, 4}, req[3:]...), "unknown flags"},
		{"reserved", append([]byte{3, 1, 0, 9}, req[4:]...), "reserved header byte"},
		{"open with payload", append(AppendOpen(nil, 1, 0, 0, "/a/b", nil), 'x'), "trailing bytes after the open"},
		{"trailers with payload", append(AppendTrailers(nil, 1, 0, "", nil, nil, nil), 'x'), "trailing bytes after the trailers"},
		{"headers trailing", append(AppendHeaders(nil, 1, nil), 'x'), "trailing bytes after the stream header"},
		{"close-send body", append(AppendCloseSend(nil, 1), 'x'), "close-send frame with a 1-byte body"},
		{"reset trailing", append(AppendReset(nil, 1, 1, "x"), 'x'), "reset:"},
		{"zero window", AppendHeader(nil, KindWindow, 0, 1), "bad varint for window increment"},
		{"window 0", append(AppendHeader(nil, KindWindow, 0, 1), 0), "window increment 0 out of range"},
		{"window too large", binary.AppendUvarint(AppendHeader(nil, KindWindow, 0, 1), 1<<31), "out of range"},
		{"truncated method", req[:len(req)-3], "method of 4 bytes"},
		{"md count lie", append(AppendHeader(nil, KindRequest, 0, 1), 0, 0, 200, 1), "bad varint for request metadata key length"},
		{"bad md key", append(AppendHeader(nil, KindRequest, 0, 1), 0, 0, 1, 1, 'A', 1, 'v'), `metadata key "A"`},
		{"binary value", append(AppendHeader(nil, KindRequest, 0, 1), 0, 0, 1, 1, 'k', 1, 0), "-bin"},
		{"bad varint", append(AppendHeader(nil, KindRequest, 0, 1), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), "bad varint"},
		{"error with payload", append(AppendResponseHead(nil, 1, 3, "bad", nil, nil, nil), 'x'), "carries a 1-byte payload"},
		{"ping size", append(AppendHeader(nil, KindPing, 0, 0), 1, 2), "ping body of 2 bytes"},
		{"cancel body", append(AppendCancel(nil, 3), 1), "cancel frame with a 1-byte body"},
		{"goaway trailing", append(AppendGoAway(nil, 0, "bye"), 1), "trailing bytes"},
		{"settings truncated", append(AppendSettings(nil, Settings{}), 1), "bad varint for setting value"},
		{"settings zero streams", append(AppendSettings(nil, Settings{}), 1, 0), "MAX_CONCURRENT_STREAMS of 0"},
		{"settings value range", binary.AppendUvarint(append(AppendSettings(nil, Settings{}), 9), 1<<32), "value 4294967296 out of range"},
		{"settings small window", append(AppendSettings(nil, Settings{}), 2, 1), "CONNECTION_WINDOW of 1, not within"},
		{"settings too many", append(AppendSettings(nil, Settings{}), bytes.Repeat([]byte{9, 9}, 65)...), "more than 64 settings"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.frame)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrVersion", err)
			}
		})
	}
}

func TestPingGoAway(t *testing.T) {
	f, err := Decode(AppendPing(nil, true, 99))
	if err != nil || f.Header.Kind != KindPong || f.Ping != 99 {
		t.Fatalf("%+v %v", f, err)
	}
	f, err = Decode(AppendGoAway(nil, 13, "protocol error"))
	if err != nil || f.GoAway != (GoAway{13, "protocol error"}) {
		t.Fatalf("%+v %v", f, err)
	}
}

// TestSettings: what AppendSettings writes decodes to the same settings;
// an unknown setting is skipped, a repeated one keeps its last value, and
// an empty SETTINGS says nothing.
func TestSettings(t *testing.T) {
	f, err := Decode(AppendSettings(nil, Settings{MaxConcurrentStreams: 100, ConnectionWindow: 1 << 24}))
	if err != nil || f.Header.Kind != KindSettings || f.Settings != (Settings{100, 1 << 24}) {
		t.Fatalf("%+v %v", f, err)
	}
	b := append(AppendSettings(nil, Settings{}), 0x7f, 0x05, 1, 7, 1, 9)
	if f, err = Decode(b); err != nil || f.Settings != (Settings{MaxConcurrentStreams: 9}) {
		t.Fatalf("unknown then twice known: %+v %v", f.Settings, err)
	}
	if f, err = Decode(AppendSettings(nil, Settings{})); err != nil || f.Settings != (Settings{}) {
		t.Fatalf("empty: %+v %v", f.Settings, err)
	}
}

func TestPayloadAliasesFrame(t *testing.T) {
	b := append(AppendRequestHead(nil, 1, 0, "/a/b", nil), "xyz"...)
	f, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Request.Payload, []byte("xyz")) || &f.Request.Payload[0] != &b[len(b)-3] {
		t.Fatal("payload is not the frame's own bytes")
	}
}

// TestDecodeAllocations guards the hot path: decoding a request costs one
// allocation (its method name), a response without metadata none.
func TestDecodeAllocations(t *testing.T) {
	req := append(AppendRequestHead(nil, 1, time.Second, "/a.B/C", nil), 1, 2, 3)
	_, body, _ := ParseHeader(req)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseRequest(body, DefaultMaxMetadata) }); n > 1 {
		t.Errorf("ParseRequest allocates %v times, want at most 1", n)
	}
	resp := append(AppendResponseHead(nil, 1, 0, "", nil, nil, nil), 1, 2, 3)
	_, body, _ = ParseHeader(resp)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseResponse(body, DefaultMaxMetadata) }); n > 0 {
		t.Errorf("ParseResponse allocates %v times, want none", n)
	}
}

// TestMetadataLimit: metadata over the limit fails with
// ErrMetadataTooLarge, whichever part of a response carries it, and the
// limit counts 32 bytes per entry as HTTP/2 does.
func TestMetadataLimit(t *testing.T) {
	md := metadata.Pairs("k", strings.Repeat("v", 100)) // 1+100+32 = 133 bytes
	_, body, _ := ParseHeader(AppendRequestHead(nil, 1, 0, "/a/b", md))
	if _, err := ParseRequest(body, 133); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if _, err := ParseRequest(body, 132); !errors.Is(err, ErrMetadataTooLarge) {
		t.Fatalf("one byte over: %v, want ErrMetadataTooLarge", err)
	}
	for name, frame := range map[string][]byte{
		"header":  AppendResponseHead(nil, 1, 0, "", nil, md, nil),
		"trailer": AppendResponseHead(nil, 1, 0, "", nil, nil, md),
		"details": AppendResponseHead(nil, 1, 3, "x", [][]byte{make([]byte, 101)}, nil, nil),
		"shared":  AppendResponseHead(nil, 1, 0, "", nil, metadata.Pairs("k", "v"), md),
	} {
		_, body, _ := ParseHeader(frame)
		if _, err := ParseResponse(body, 132); !errors.Is(err, ErrMetadataTooLarge) {
			t.Errorf("%s over the limit: %v, want ErrMetadataTooLarge", name, err)
		}
	}
}

func TestStreamFramesRoundTrip(t *testing.T) {
	md := metadata.Pairs("a", "1")
	f, err := Decode(AppendOpen(nil, 5, FlagServerStreams, time.Second, "/p.S/M", md))
	if err != nil || f.Header.Flags != FlagServerStreams || f.Header.Kind != KindOpen || f.Open.Method != "/p.S/M" || f.Open.Timeout != time.Second || !reflect.DeepEqual(f.Open.MD, md) {
		t.Fatalf("open: %+v, %v", f, err)
	}
	if f, err := Decode(append(AppendMessageHead(nil, 5), "msg"...)); err != nil || string(f.Message) != "msg" || f.Header.CallID != 5 {
		t.Fatalf("message: %+v, %v", f, err)
	}
	if f, err := Decode(AppendHeaders(nil, 5, md)); err != nil || !reflect.DeepEqual(f.Headers, md) {
		t.Fatalf("headers: %+v, %v", f, err)
	}
	if f, err := Decode(AppendTrailers(nil, 5, 9, "no", nil, nil, md)); err != nil || f.Trailers.Code != 9 || !reflect.DeepEqual(f.Trailers.Trailer, md) {
		t.Fatalf("trailers: %+v, %v", f, err)
	}
	if f, err := Decode(AppendReset(nil, 5, 1, "canceled")); err != nil || f.Reset != (Reset{1, "canceled"}) {
		t.Fatalf("reset: %+v, %v", f, err)
	}
	if f, err := Decode(AppendWindow(nil, 5, MaxWindowIncrement)); err != nil || f.Window != MaxWindowIncrement {
		t.Fatalf("window: %+v, %v", f, err)
	}
	if _, err := Decode(AppendCloseSend(nil, 5)); err != nil {
		t.Fatalf("close-send: %v", err)
	}
}
