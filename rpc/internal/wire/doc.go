// Package wire encodes and decodes rdmarpc's RPC frames, exactly as
// docs/wire.md specifies them: one frame per transport message, a fixed
// 12-byte header, then a body that depends on the frame's kind.
//
// Decoders never trust the bytes: every length is checked against what is
// left, and every error says what was wrong. The package knows metadata and
// status codes, and nothing about connections, calls or transports.
package wire
