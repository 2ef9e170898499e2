package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rdmarpc/rdmarpc/metadata"
)

// Version is the frame format version this package speaks. Version 2 added
// streams (OPEN … WINDOW_UPDATE); version 3 adds SETTINGS, the first frame
// each side sends. A peer of another version is refused by the version
// byte of the first frame either side reads.
const Version = 3

// HeaderLen is the size of the fixed frame header.
const HeaderLen = 12

// Kind says what a frame is.
type Kind uint8

const (
	KindRequest  Kind = 1 // client → server: start a call
	KindResponse Kind = 2 // server → client: the call's outcome
	KindCancel   Kind = 3 // client → server: abandon a call
	KindPing     Kind = 4 // either way: are you there?
	KindPong     Kind = 5 // either way: the answer to a ping
	KindGoAway   Kind = 6 // server → client: no new calls on this connection

	// Streams (version 2).
	KindOpen      Kind = 7  // client → server: open a stream
	KindMessage   Kind = 8  // either way: one message on a stream
	KindCloseSend Kind = 9  // client → server: no more messages (half-close)
	KindHeaders   Kind = 10 // server → client: the stream's response headers
	KindTrailers  Kind = 11 // server → client: status and trailers; ends the stream
	KindReset     Kind = 12 // either way: abandon a stream, with a code
	KindWindow    Kind = 13 // either way: the receiver read this many more bytes

	// Version 3.
	KindSettings Kind = 14 // either way, first: the sender's limits
	lastKind          = KindSettings
)

// OPEN flags: what kind of stream the client believes it opens.
const (
	FlagClientStreams uint8 = 1 << 0
	FlagServerStreams uint8 = 1 << 1
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "REQUEST"
	case KindResponse:
		return "RESPONSE"
	case KindCancel:
		return "CANCEL"
	case KindPing:
		return "PING"
	case KindPong:
		return "PONG"
	case KindGoAway:
		return "GOAWAY"
	case KindOpen:
		return "OPEN"
	case KindMessage:
		return "MESSAGE"
	case KindCloseSend:
		return "CLOSE_SEND"
	case KindHeaders:
		return "HEADERS"
	case KindTrailers:
		return "TRAILERS"
	case KindReset:
		return "RESET"
	case KindWindow:
		return "WINDOW_UPDATE"
	case KindSettings:
		return "SETTINGS"
	}
	return fmt.Sprintf("KIND(%d)", uint8(k))
}

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed frame")

// ErrVersion is wrapped when a frame has another format version.
var ErrVersion = errors.New("unsupported frame version")

// Header is the fixed part of every frame.
type Header struct {
	Kind   Kind
	Flags  uint8
	CallID uint64
}

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// ParseHeader decodes a frame's header and returns the body after it.
// Unknown kinds are an error: they cannot be skipped safely because a
// peer that sends them expects something of us.
func ParseHeader(frame []byte) (Header, []byte, error) {
	if len(frame) < HeaderLen {
		return Header{}, nil, malformed("%d bytes, shorter than the %d-byte header", len(frame), HeaderLen)
	}
	if frame[0] != Version {
		return Header{}, nil, fmt.Errorf("%w %d (this side speaks %d): upgrade the older peer", ErrVersion, frame[0], Version)
	}
	h := Header{Kind: Kind(frame[1]), Flags: frame[2], CallID: binary.BigEndian.Uint64(frame[4:])}
	if h.Kind < KindRequest || h.Kind > lastKind {
		return Header{}, nil, malformed("unknown frame kind %d", frame[1])
	}
	if frame[2]&^allowedFlags(h.Kind) != 0 {
		return Header{}, nil, malformed("unknown flags %#x", frame[2])
	}
	if frame[3] != 0 {
		return Header{}, nil, malformed("reserved header byte is %d, not 0", frame[3])
	}
	return h, frame[HeaderLen:], nil
}

func allowedFlags(k Kind) uint8 {
	if k == KindOpen {
		return FlagClientStreams | FlagServerStreams
	}
	return 0
}

// AppendHeader appends a frame header.
func AppendHeader(b []byte, k Kind, flags uint8, callID uint64) []byte {
	b = append(b, Version, byte(k), flags, 0)
	return binary.BigEndian.AppendUint64(b, callID)
}

// reader consumes a body, remembering the first error.
type reader struct {
	b      []byte
	err    error
	mdMax  int // metadata budget of the frame, see charge
	mdUsed int
}

// The decoders label their errors with what they were reading; labels are
// pairs of strings joined only when an error is reported, so a frame that
// decodes cleanly costs no allocation for them.

func (r *reader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = malformed(format, a...)
	}
}

func (r *reader) uvarint(what string) uint64 { return r.uvarint2(what, "") }

// uvarint2 reads a varint labelled what+suffix.
func (r *reader) uvarint2(what, suffix string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint for %s%s", what, suffix)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(what string) []byte { return r.bytes2(what, "") }

// bytes2 reads a length-prefixed field labelled what+suffix.
func (r *reader) bytes2(what, suffix string) []byte {
	if r.err != nil {
		return nil
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.fail("bad varint for %s%s length", what, suffix)
		return nil
	}
	r.b = r.b[k:]
	if n > uint64(len(r.b)) {
		r.fail("%s%s of %d bytes, only %d left", what, suffix, n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string(what string) string { return string(r.bytes(what)) }

// md decodes metadata: a count of pairs, then key and value strings. The
// count only ends the loop: the map grows with the entries that are there,
// and each entry is charged to the frame's metadata budget before its
// strings are copied.
func (r *reader) md(what string) metadata.MD {
	n := r.uvarint2(what, " count")
	if r.err != nil || n == 0 {
		return nil
	}
	var md metadata.MD
	for i := uint64(0); i < n && r.err == nil; i++ {
		k := r.bytes2(what, " key")
		v := r.bytes2(what, " value")
		if r.err != nil {
			break
		}
		if !r.charge(len(k)+len(v), what) {
			break
		}
		if err := CheckKey(k); err != nil {
			r.fail("%s: %v", what, err)
			break
		}
		if err := CheckValue(k, v); err != nil {
			r.fail("%s: %v", what, err)
			break
		}
		if md == nil {
			md = make(metadata.MD)
		}
		key := string(k)
		md[key] = append(md[key], string(v))
	}
	return md
}

// EntryOverhead is what each metadata entry (and each status detail) costs
// on top of its bytes when charged to a metadata limit: HTTP/2's 32 bytes
// per header field, so the limit means what gRPC's MaxHeaderListSize means.
const EntryOverhead = 32

// DefaultMaxMetadata is the default limit on a frame's metadata, gRPC's
// default MaxHeaderListSize (16 KiB).
const DefaultMaxMetadata = 16 << 10

// ErrMetadataTooLarge is wrapped when a frame's metadata exceeds the
// receiver's limit; the frame's boundaries are intact.
var ErrMetadataTooLarge = errors.New("metadata too large")

// charge counts one entry of n bytes against the metadata budget, failing
// the decoding once it is exceeded.
func (r *reader) charge(n int, what string) bool {
	r.mdUsed += n + EntryOverhead
	if r.mdUsed > r.mdMax {
		if r.err == nil {
			r.err = fmt.Errorf("%w: %s: more than the limit of %d bytes (each entry counts %d bytes more than its key and value)", ErrMetadataTooLarge, what, r.mdMax, EntryOverhead)
		}
		return false
	}
	return true
}

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendMD(b []byte, md metadata.MD) []byte {
	n := 0
	for _, vs := range md {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range md {
		for _, v := range vs {
			b = appendString(b, k)
			b = appendString(b, v)
		}
	}
	return b
}

// CheckKey reports whether k is a valid metadata key: non-empty, made of
// lower-case letters, digits, '-', '_' and '.'.
func CheckKey(k []byte) error {
	if len(k) == 0 {
		return errors.New("empty metadata key")
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("metadata key %q has character %q (allowed: a-z 0-9 - _ .)", k, c)
		}
	}
	return nil
}

// CheckValue reports whether v may be the value of key k: printable ASCII,
// unless the key ends in "-bin", whose values are arbitrary bytes.
func CheckValue(k, v []byte) error {
	if len(k) > 4 && string(k[len(k)-4:]) == "-bin" {
		return nil
	}
	for _, c := range v {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("value of metadata key %q has byte %#x; use a key ending in -bin for binary values", k, c)
		}
	}
	return nil
}

// CheckMD validates outgoing metadata before it is encoded.
func CheckMD(md metadata.MD) error {
	for k, vs := range md {
		if err := CheckKey([]byte(k)); err != nil {
			return err
		}
		for _, v := range vs {
			if err := CheckValue([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Request is a decoded REQUEST body.
type Request struct {
	Timeout time.Duration // 0: no deadline
	Method  string        // "/package.Service/Method"
	MD      metadata.MD
	Payload []byte // aliases the frame
}

// AppendRequestHead appends a whole REQUEST frame except its payload,
// which follows it directly.
func AppendRequestHead(b []byte, callID uint64, timeout time.Duration, method string, md metadata.MD) []byte {
	b = AppendHeader(b, KindRequest, 0, callID)
	if timeout < 0 {
		timeout = 0
	}
	b = appendUvarint(b, uint64(timeout))
	b = appendString(b, method)
	return appendMD(b, md)
}

// ParseRequest decodes a REQUEST body whose metadata may take up to
// maxMD bytes (see EntryOverhead); beyond, it fails with an error wrapping
// ErrMetadataTooLarge.
func ParseRequest(body []byte, maxMD int) (Request, error) {
	return ParseRequestWith(body, maxMD, nil)
}

// ParseRequestWith is ParseRequest with method, unless nil, turning the
// method name's bytes (which alias body) into Request.Method: a server
// answers with the string of a method it knows, so a request costs no copy
// of its name.
func ParseRequestWith(body []byte, maxMD int, method func([]byte) string) (Request, error) {
	r := reader{b: body, mdMax: maxMD}
	t := r.uvarint("timeout")
	if t > math.MaxInt64 {
		r.fail("timeout %d ns out of range", t)
	}
	var m string
	if method == nil {
		m = r.string("method")
	} else if b := r.bytes("method"); r.err == nil {
		m = method(b)
	}
	md := r.md("request metadata")
	if r.err != nil {
		return Request{}, r.err
	}
	return Request{Timeout: time.Duration(t), Method: m, MD: md, Payload: r.b}, nil
}

// Response is a decoded RESPONSE body.
type Response struct {
	Code    uint32
	Message string
	Details [][]byte // each a serialized google.protobuf.Any, aliasing the frame
	Header  metadata.MD
	Trailer metadata.MD
	Payload []byte // aliases the frame; empty unless Code is 0
}

// AppendResponseHead appends a whole RESPONSE frame except its payload.
func AppendResponseHead(b []byte, callID uint64, code uint32, msg string, details [][]byte, header, trailer metadata.MD) []byte {
	b = AppendHeader(b, KindResponse, 0, callID)
	b = appendUvarint(b, uint64(code))
	b = appendString(b, msg)
	b = appendUvarint(b, uint64(len(details)))
	for _, d := range details {
		b = appendUvarint(b, uint64(len(d)))
		b = append(b, d...)
	}
	b = appendMD(b, header)
	return appendMD(b, trailer)
}

// ParseResponse decodes a RESPONSE body. Its status details, header and
// trailer share a budget of maxMD bytes (see EntryOverhead), as gRPC's
// status details travel in its trailers; beyond, it fails with an error
// wrapping ErrMetadataTooLarge.
func ParseResponse(body []byte, maxMD int) (Response, error) {
	r := reader{b: body, mdMax: maxMD}
	code := r.uvarint("status code")
	if code > math.MaxUint32 {
		r.fail("status code %d out of range", code)
	}
	msg := r.string("status message")
	nd := r.uvarint("detail count")
	var details [][]byte
	for i := uint64(0); i < nd && r.err == nil; i++ {
		d := r.bytes("detail")
		if r.err == nil && r.charge(len(d), "status details") {
			details = append(details, d)
		}
	}
	h := r.md("response header")
	tr := r.md("response trailer")
	if r.err != nil {
		return Response{}, r.err
	}
	if code != 0 && len(r.b) != 0 {
		return Response{}, malformed("error response (code %d) carries a %d-byte payload", code, len(r.b))
	}
	return Response{Code: uint32(code), Message: msg, Details: details, Header: h, Trailer: tr, Payload: r.b}, nil
}

// PingLen is the size of a PING or PONG body.
const PingLen = 8

// AppendPing appends a PING (or, with pong, a PONG) frame carrying data.
func AppendPing(b []byte, pong bool, data uint64) []byte {
	k := KindPing
	if pong {
		k = KindPong
	}
	b = AppendHeader(b, k, 0, 0)
	return binary.BigEndian.AppendUint64(b, data)
}

// ParsePing decodes a PING or PONG body.
func ParsePing(body []byte) (uint64, error) {
	if len(body) != PingLen {
		return 0, malformed("ping body of %d bytes, want %d", len(body), PingLen)
	}
	return binary.BigEndian.Uint64(body), nil
}

// AppendCancel appends a CANCEL frame for callID.
func AppendCancel(b []byte, callID uint64) []byte { return AppendHeader(b, KindCancel, 0, callID) }

// ParseCancel checks a CANCEL body (empty).
func ParseCancel(body []byte) error {
	if len(body) != 0 {
		return malformed("cancel frame with a %d-byte body", len(body))
	}
	return nil
}

// GoAway is a decoded GOAWAY body: code 0 for a graceful shutdown, another
// code when the sender closes the connection because of an error.
type GoAway struct {
	Code    uint32
	Message string
}

// AppendGoAway appends a GOAWAY frame.
func AppendGoAway(b []byte, code uint32, msg string) []byte {
	b = AppendHeader(b, KindGoAway, 0, 0)
	b = appendUvarint(b, uint64(code))
	return appendString(b, msg)
}

// ParseGoAway decodes a GOAWAY body.
func ParseGoAway(body []byte) (GoAway, error) {
	r := reader{b: body}
	code := r.uvarint("goaway code")
	if code > math.MaxUint32 {
		r.fail("goaway code %d out of range", code)
	}
	msg := r.string("goaway message")
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes after goaway", len(r.b))
	}
	if r.err != nil {
		return GoAway{}, r.err
	}
	return GoAway{Code: uint32(code), Message: msg}, nil
}

// An OPEN body is a REQUEST body without a payload: AppendOpen and
// ParseOpen reuse the request's layout.

// AppendOpen appends an OPEN frame for stream id.
func AppendOpen(b []byte, id uint64, flags uint8, timeout time.Duration, method string, md metadata.MD) []byte {
	start := len(b)
	b = AppendRequestHead(b, id, timeout, method, md)
	b[start+1], b[start+2] = byte(KindOpen), flags
	return b
}

// ParseOpen decodes an OPEN body (see ParseRequest for maxMD).
func ParseOpen(body []byte, maxMD int) (Request, error) {
	r, err := ParseRequest(body, maxMD)
	if err == nil && len(r.Payload) != 0 {
		return Request{}, malformed("%d trailing bytes after the open frame's metadata", len(r.Payload))
	}
	return r, err
}

// AppendHeaders appends a HEADERS frame for stream id.
func AppendHeaders(b []byte, id uint64, md metadata.MD) []byte {
	b = AppendHeader(b, KindHeaders, 0, id)
	return appendMD(b, md)
}

// ParseHeaders decodes a HEADERS body whose metadata may take maxMD bytes.
func ParseHeaders(body []byte, maxMD int) (metadata.MD, error) {
	r := reader{b: body, mdMax: maxMD}
	md := r.md("stream header")
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes after the stream header", len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return md, nil
}

// A TRAILERS body is a RESPONSE body without a payload; its header field
// is empty unless no HEADERS frame was sent (a trailers-only stream).

// AppendTrailers appends a TRAILERS frame.
func AppendTrailers(b []byte, id uint64, code uint32, msg string, details [][]byte, header, trailer metadata.MD) []byte {
	start := len(b)
	b = AppendResponseHead(b, id, code, msg, details, header, trailer)
	b[start+1] = byte(KindTrailers)
	return b
}

// ParseTrailers decodes a TRAILERS body (see ParseResponse for maxMD).
func ParseTrailers(body []byte, maxMD int) (Response, error) {
	r, err := ParseResponse(body, maxMD)
	if err == nil && len(r.Payload) != 0 {
		return Response{}, malformed("%d trailing bytes after the trailers", len(r.Payload))
	}
	return r, err
}

// AppendMessageHead appends a MESSAGE frame's header; the message follows.
func AppendMessageHead(b []byte, id uint64) []byte { return AppendHeader(b, KindMessage, 0, id) }

// AppendCloseSend appends a CLOSE_SEND frame (empty body).
func AppendCloseSend(b []byte, id uint64) []byte { return AppendHeader(b, KindCloseSend, 0, id) }

// ParseCloseSend checks a CLOSE_SEND body (empty).
func ParseCloseSend(body []byte) error {
	if len(body) != 0 {
		return malformed("close-send frame with a %d-byte body", len(body))
	}
	return nil
}

// Reset is a decoded RESET body.
type Reset struct {
	Code    uint32
	Message string
}

// AppendReset appends a RESET frame.
func AppendReset(b []byte, id uint64, code uint32, msg string) []byte {
	b = AppendHeader(b, KindReset, 0, id)
	b = appendUvarint(b, uint64(code))
	return appendString(b, msg)
}

// ParseReset decodes a RESET body.
func ParseReset(body []byte) (Reset, error) {
	g, err := ParseGoAway(body) // the same layout: code, message
	if err != nil {
		return Reset{}, malformed("reset: %v", err)
	}
	return Reset(g), nil
}

// MaxWindowIncrement is the largest WINDOW_UPDATE increment (2^31−1, as
// HTTP/2's).
const MaxWindowIncrement = 1<<31 - 1

// AppendWindow appends a WINDOW_UPDATE frame granting n more bytes.
func AppendWindow(b []byte, id uint64, n uint32) []byte {
	b = AppendHeader(b, KindWindow, 0, id)
	return appendUvarint(b, uint64(n))
}

// ParseWindow decodes a WINDOW_UPDATE body: an increment from 1 to
// MaxWindowIncrement.
func ParseWindow(body []byte) (uint32, error) {
	r := reader{b: body}
	n := r.uvarint("window increment")
	if r.err == nil && (n == 0 || n > MaxWindowIncrement) {
		r.fail("window increment %d out of range 1..%d", n, MaxWindowIncrement)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes after the window increment", len(r.b))
	}
	return uint32(n), r.err
}

// Settings are what a SETTINGS frame says. Zero fields were not sent: the
// receiver keeps what it had (docs/wire.md, "SETTINGS").
type Settings struct {
	// MaxConcurrentStreams is how many calls and streams the sender
	// (a server) runs or queues at once on the connection; the receiver
	// opens no more.
	MaxConcurrentStreams uint32
	// ConnectionWindow is the sender's receive window for the whole
	// connection (docs/wire.md, "Flow control"): the receiver's credit
	// starts at it instead of 65536. At least 65536.
	ConnectionWindow uint32
}

// The settings' identifiers. A receiver ignores identifiers it does not
// know, so that a setting can be added without a new version.
const (
	SettingMaxConcurrentStreams = 1
	SettingConnectionWindow     = 2
)

// MinConnectionWindow is the connection window both sides assume until
// the peer's SETTINGS says more, and the least it may say.
const MinConnectionWindow = 65536

// maxSettings bounds the entries of one SETTINGS frame, known or not.
const maxSettings = 64

// AppendSettings appends a SETTINGS frame: an entry (identifier, value) for
// each non-zero field.
func AppendSettings(b []byte, s Settings) []byte {
	b = AppendHeader(b, KindSettings, 0, 0)
	if s.MaxConcurrentStreams != 0 {
		b = appendUvarint(b, SettingMaxConcurrentStreams)
		b = appendUvarint(b, uint64(s.MaxConcurrentStreams))
	}
	if s.ConnectionWindow != 0 {
		b = appendUvarint(b, SettingConnectionWindow)
		b = appendUvarint(b, uint64(s.ConnectionWindow))
	}
	return b
}

// ParseSettings decodes a SETTINGS body: entries of two uvarints each, an
// identifier and a value (at most 2^32-1), to the end of the body, at most
// 64 of them. Unknown identifiers are skipped; a known one given twice
// keeps the last value; a MAX_CONCURRENT_STREAMS of 0, or a CONNECTION_WINDOW
// under 65536 or past 2^31-1, is malformed.
func ParseSettings(body []byte) (Settings, error) {
	var s Settings
	r := reader{b: body}
	for n := 0; r.err == nil && len(r.b) > 0; n++ {
		if n == maxSettings {
			r.fail("more than %d settings", maxSettings)
			break
		}
		id := r.uvarint("setting identifier")
		v := r.uvarint("setting value")
		if r.err != nil {
			break
		}
		if v > math.MaxUint32 {
			r.fail("setting %d: value %d out of range", id, v)
			break
		}
		switch id {
		case SettingMaxConcurrentStreams:
			if v == 0 {
				r.fail("MAX_CONCURRENT_STREAMS of 0")
				break
			}
			s.MaxConcurrentStreams = uint32(v)
		case SettingConnectionWindow:
			if v < MinConnectionWindow || v > MaxWindowIncrement {
				r.fail("CONNECTION_WINDOW of %d, not within [65536, 2^31-1]", v)
				break
			}
			s.ConnectionWindow = uint32(v)
		}
	}
	if r.err != nil {
		return Settings{}, r.err
	}
	return s, nil
}
