package grpcwire

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"
)

// EncodeMessage percent-encodes a status message for grpc-message: every
// byte outside printable ASCII, and '%' itself, becomes %XX (so UTF-8 text
// travels as its bytes).
func EncodeMessage(msg string) string {
	i := 0
	for i < len(msg) && unreserved(msg[i]) {
		i++
	}
	if i == len(msg) {
		return msg
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(msg) + 2*(len(msg)-i))
	b.WriteString(msg[:i])
	for ; i < len(msg); i++ {
		if c := msg[i]; unreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

func unreserved(c byte) bool { return c >= 0x20 && c <= 0x7e && c != '%' }

// DecodeMessage undoes EncodeMessage, leniently as the spec asks: a '%' not
// followed by two hex digits stays as it is, and bytes that are not valid
// UTF-8 become U+FFFD, so what reaches the application is always text.
func DecodeMessage(s string) string {
	if !strings.Contains(s, "%") && utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// IsBinaryHeader reports whether a metadata key carries bytes (base64 on
// the wire): its name ends in "-bin".
func IsBinaryHeader(key string) bool { return strings.HasSuffix(key, "-bin") }

// EncodeBinary writes a binary header's value: base64 without padding, as
// the spec says implementations emit.
func EncodeBinary(v []byte) string { return base64.RawStdEncoding.EncodeToString(v) }

// DecodeBinary reads a binary header's value, padded or not (the spec asks
// receivers to accept both).
func DecodeBinary(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		if b, err := base64.StdEncoding.DecodeString(v); err == nil {
			return b, nil
		}
	}
	b, err := base64.RawStdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w: binary header value is not base64: %v", ErrMalformed, err)
	}
	return b, nil
}

// IsReserved reports whether a header belongs to the protocol rather than
// to the application's metadata: pseudo-headers, the grpc- headers the
// protocol defines, and the HTTP headers it sets itself. Such keys never
// reach the application's metadata and are not sent from it.
func IsReserved(key string) bool {
	if strings.HasPrefix(key, ":") {
		return true
	}
	switch key {
	case "content-type", "user-agent", "te", "grpc-message-type", "grpc-encoding",
		"grpc-accept-encoding", "grpc-message", "grpc-status", "grpc-timeout",
		"grpc-status-details-bin", "connection", "transfer-encoding", "keep-alive",
		"upgrade", "proxy-connection":
		return true
	}
	return false
}

// ContentSubtype parses a request's content-type: "application/grpc" (the
// subtype is empty: proto), "application/grpc+<subtype>" or
// "application/grpc;<params>". ok is false for anything else, which the
// server answers with HTTP 415.
func ContentSubtype(ct string) (subtype string, ok bool) {
	const base = "application/grpc"
	if len(ct) < len(base) || !strings.EqualFold(ct[:len(base)], base) {
		return "", false
	}
	rest := ct[len(base):]
	switch {
	case rest == "":
		return "", true
	case rest[0] == ';':
		return "", true
	case rest[0] == '+':
		sub := rest[1:]
		if i := strings.IndexByte(sub, ';'); i >= 0 {
			sub = sub[:i]
		}
		return strings.ToLower(strings.TrimSpace(sub)), true
	}
	return "", false
}

// ContentType is the content-type for a codec's subtype ("" gives
// "application/grpc").
func ContentType(subtype string) string {
	if subtype == "" {
		return "application/grpc"
	}
	return "application/grpc+" + subtype
}
