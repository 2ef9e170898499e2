package wire

import "github.com/rdmarpc/rdmarpc/metadata"

// Frame is any decoded frame; which field is set depends on Header.Kind.
type Frame struct {
	Header   Header
	Request  Request  // KindRequest
	Response Response // KindResponse
	Ping     uint64   // KindPing, KindPong
	GoAway   GoAway   // KindGoAway
	Open     Request  // KindOpen (no payload)
	Headers  metadata.MD
	Trailers Response // KindTrailers (no payload)
	Message  []byte   // KindMessage, aliasing the frame
	Reset    Reset    // KindReset
	Window   uint32   // KindWindow
	Settings Settings // KindSettings
}

// Decode decodes a whole frame, with DefaultMaxMetadata as the metadata
// limit. The rpc layer decodes the header first and the body where it is
// needed; Decode is the same path in one call, for tests and fuzzing.
func Decode(frame []byte) (Frame, error) {
	h, body, err := ParseHeader(frame)
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Header: h}
	switch h.Kind {
	case KindRequest:
		f.Request, err = ParseRequest(body, DefaultMaxMetadata)
	case KindResponse:
		f.Response, err = ParseResponse(body, DefaultMaxMetadata)
	case KindCancel:
		err = ParseCancel(body)
	case KindPing, KindPong:
		f.Ping, err = ParsePing(body)
	case KindGoAway:
		f.GoAway, err = ParseGoAway(body)
	case KindOpen:
		f.Open, err = ParseOpen(body, DefaultMaxMetadata)
	case KindMessage:
		f.Message = body
	case KindCloseSend:
		err = ParseCloseSend(body)
	case KindHeaders:
		f.Headers, err = ParseHeaders(body, DefaultMaxMetadata)
	case KindTrailers:
		f.Trailers, err = ParseTrailers(body, DefaultMaxMetadata)
	case KindReset:
		f.Reset, err = ParseReset(body)
	case KindWindow:
		f.Window, err = ParseWindow(body)
	case KindSettings:
		f.Settings, err = ParseSettings(body)
	}
	return f, err
}
