package wire

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/metadata"
)

// FuzzDecode feeds arbitrary frames to the decoder, seeded with real frames
// of every kind. Decoding must never panic, must fail only with
// ErrMalformed or ErrVersion, and whatever decodes must re-encode to a frame
// that decodes to the same thing.
func FuzzDecode(f *testing.F) {
	md := metadata.Pairs("user", "ada", "trace-bin", "\x01\x02")
	f.Add(append(AppendRequestHead(nil, 1, time.Second, "/rdmarpc.echo.v1.Echo/Say", md), 0x0a, 0x02, 'h', 'i'))
	f.Add(AppendRequestHead(nil, 2, 0, "/a/b", nil))
	f.Add(append(AppendResponseHead(nil, 1, 0, "", nil, metadata.Pairs("h", "1"), metadata.Pairs("t", "2")), 0x0a, 0x00))
	f.Add(AppendResponseHead(nil, 3, 5, "key not found", [][]byte{{0x0a, 0x01, 'x'}}, nil, nil))
	f.Add(AppendCancel(nil, 9))
	f.Add(AppendPing(nil, false, 12345))
	f.Add(AppendPing(nil, true, 12345))
	f.Add(AppendGoAway(nil, 0, "server shutting down"))
	f.Add(AppendOpen(nil, 4, FlagClientStreams|FlagServerStreams, time.Second, "/a.B/C", md))
	f.Add(append(AppendMessageHead(nil, 4), 0x0a, 0x01, 'x'))
	f.Add(AppendCloseSend(nil, 4))
	f.Add(AppendHeaders(nil, 4, md))
	f.Add(AppendTrailers(nil, 4, 3, "bad", [][]byte{{1}}, nil, metadata.Pairs("t", "2")))
	f.Add(AppendReset(nil, 4, 1, "canceled"))
	f.Add(AppendWindow(nil, 4, 65536))
	f.Add(AppendSettings(nil, Settings{MaxConcurrentStreams: 100}))
	f.Add(append(AppendSettings(nil, Settings{}), 0x7f, 0x01, 0x01, 0x05)) // an unknown setting, then a known one
	f.Add(countLie(KindOpen, 16<<10))
	f.Add(countLie(KindHeaders, 16<<10))
	f.Add(countLie(KindTrailers, 16<<10))
	// Frames whose counts claim far more entries than they carry: a
	// decoder that sizes anything from a count allocates far more than
	// the frame.
	f.Add(countLie(KindRequest, 16<<10))
	f.Add(countLie(KindResponse, 16<<10))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, alloc, err := decodeMeasured(b)
		// Decoding n bytes allocates O(n): copies of what the frame
		// holds, plus what the metadata limit bounds.
		if bound := 8*uint64(len(b)) + 128<<10; alloc > bound {
			t.Fatalf("decoding %d bytes allocated %d bytes (bound %d)", len(b), alloc, bound)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrMetadataTooLarge) {
				t.Fatalf("unexpected error type: %v", err)
			}
			return
		}
		var again []byte
		switch fr.Header.Kind {
		case KindRequest:
			r := fr.Request
			again = append(AppendRequestHead(nil, fr.Header.CallID, r.Timeout, r.Method, r.MD), r.Payload...)
			// The server's path, which names the method with a string of
			// its own, decodes the same request.
			_, body, _ := ParseHeader(b)
			known := "/known.S/M"
			rw, err := ParseRequestWith(body, DefaultMaxMetadata, func(name []byte) string {
				if string(name) == known {
					return known
				}
				return string(name)
			})
			if err != nil || !sameRequest(r, rw) {
				t.Fatalf("ParseRequestWith: %+v, %v; ParseRequest: %+v", rw, err, r)
			}
		case KindResponse:
			r := fr.Response
			again = append(AppendResponseHead(nil, fr.Header.CallID, r.Code, r.Message, r.Details, r.Header, r.Trailer), r.Payload...)
		case KindCancel:
			again = AppendCancel(nil, fr.Header.CallID)
		case KindPing, KindPong:
			again = AppendPing(nil, fr.Header.Kind == KindPong, fr.Ping)
			copy(again[4:12], b[4:12]) // the call id, which pings ignore
		case KindGoAway:
			again = AppendGoAway(nil, fr.GoAway.Code, fr.GoAway.Message)
			copy(again[4:12], b[4:12]) // the call id, which goaways ignore
		case KindOpen:
			r := fr.Open
			again = AppendOpen(nil, fr.Header.CallID, fr.Header.Flags, r.Timeout, r.Method, r.MD)
		case KindMessage:
			again = append(AppendMessageHead(nil, fr.Header.CallID), fr.Message...)
		case KindCloseSend:
			again = AppendCloseSend(nil, fr.Header.CallID)
		case KindHeaders:
			again = AppendHeaders(nil, fr.Header.CallID, fr.Headers)
		case KindTrailers:
			r := fr.Trailers
			again = AppendTrailers(nil, fr.Header.CallID, r.Code, r.Message, r.Details, r.Header, r.Trailer)
		case KindReset:
			again = AppendReset(nil, fr.Header.CallID, fr.Reset.Code, fr.Reset.Message)
		case KindWindow:
			again = AppendWindow(nil, fr.Header.CallID, fr.Window)
		case KindSettings:
			again = AppendSettings(nil, fr.Settings)
			copy(again[4:12], b[4:12]) // the call id, which settings ignore
		}
		fr2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if !equalFrames(fr, fr2) {
			t.Fatalf("round trip changed the frame:\n%+v\n%+v", fr, fr2)
		}
	})
}

func equalFrames(a, b Frame) bool {
	if a.Header != b.Header || a.Ping != b.Ping || a.Settings != b.Settings || a.GoAway != b.GoAway || a.Reset != b.Reset || a.Window != b.Window ||
		string(a.Message) != string(b.Message) || !sameMD(a.Headers, b.Headers) {
		return false
	}
	if oa, ob := a.Open, b.Open; oa.Timeout != ob.Timeout || oa.Method != ob.Method || !sameMD(oa.MD, ob.MD) {
		return false
	}
	if ta, tb := a.Trailers, b.Trailers; ta.Code != tb.Code || ta.Message != tb.Message || len(ta.Details) != len(tb.Details) ||
		!sameMD(ta.Header, tb.Header) || !sameMD(ta.Trailer, tb.Trailer) {
		return false
	}
	ra, rb := a.Request, b.Request
	if ra.Timeout != rb.Timeout || ra.Method != rb.Method || string(ra.Payload) != string(rb.Payload) || !sameMD(ra.MD, rb.MD) {
		return false
	}
	sa, sb := a.Response, b.Response
	if sa.Code != sb.Code || sa.Message != sb.Message || len(sa.Details) != len(sb.Details) ||
		string(sa.Payload) != string(sb.Payload) || !sameMD(sa.Header, sb.Header) || !sameMD(sa.Trailer, sb.Trailer) {
		return false
	}
	for i := range sa.Details {
		if string(sa.Details[i]) != string(sb.Details[i]) {
			return false
		}
	}
	return true
}

// sameMD compares metadata as multisets of values per key (map order makes
// the encoding order vary, not the values of one key).
func sameMD(a, b metadata.MD) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb := b[k]
		if len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}

// countLie is a frame of about n bytes whose metadata (and for a
// response, details) count claims n/2 entries, of which one is there.
func countLie(k Kind, n int) []byte {
	b := AppendHeader(nil, k, 0, 1)
	switch k {
	case KindRequest, KindOpen:
		b = append(b, 0, 0) // no timeout, empty method
	case KindHeaders:
	default:
		b = append(b, 0, 0, 0) // code 0, empty message, no details
	}
	b = appendUvarint(b, uint64(n/2-16))
	b = append(b, 1, 'k', 1, 'v')
	for len(b) < n {
		b = append(b, 0xff) // not a valid entry: decoding stops here
	}
	return b
}

// decodeMeasured decodes b and returns the bytes the decoding allocated.
func decodeMeasured(b []byte) (Frame, uint64, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fr, err := Decode(b)
	runtime.ReadMemStats(&after)
	return fr, after.TotalAlloc - before.TotalAlloc, err
}

func sameRequest(a, b Request) bool {
	return a.Timeout == b.Timeout && a.Method == b.Method && string(a.Payload) == string(b.Payload) && sameMD(a.MD, b.MD)
}
