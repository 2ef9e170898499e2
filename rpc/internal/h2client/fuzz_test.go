package h2client

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// FuzzMessages cuts DATA payloads, split anywhere, into gRPC messages as
// the reader does, and checks the result against a plain walk over the
// same bytes: the same messages, each as a MESSAGE frame of the stream,
// and an error where the reader finds one.
func FuzzMessages(f *testing.F) {
	two := append(grpcwire.AppendPrefix(nil, false, 3), "abc"...)
	two = append(two, grpcwire.AppendPrefix(nil, false, 0)...)
	f.Add(two, uint8(2))
	f.Add([]byte{0, 0, 0, 0, 1, 'x', 1, 0, 0, 0, 0}, uint8(1))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		var want [][]byte
		var wantErr error
		for p := data; len(p) >= grpcwire.PrefixLen; { // what is cut short waits for more DATA
			compressed, n, err := grpcwire.ParsePrefix([grpcwire.PrefixLen]byte(p), MaxRecvMessage)
			if err == nil && compressed {
				err = errors.New("compressed")
			}
			if err != nil {
				wantErr = err
				break
			}
			if len(p)-grpcwire.PrefixLen < n {
				break
			}
			want = append(want, p[grpcwire.PrefixLen:grpcwire.PrefixLen+n])
			p = p[grpcwire.PrefixLen+n:]
		}
		c := &Conn{}
		s := &stream{rid: 7}
		var err error
		for p := data; len(p) > 0 && err == nil; {
			n := min(len(p), int(step)+1)
			err = c.messagesLocked(s, p[:n])
			p = p[n:]
		}
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, the reader's %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if len(s.pending) != len(want) {
			t.Fatalf("%d messages, the reader found %d", len(s.pending), len(want))
		}
		for i, fr := range s.pending {
			d, derr := wire.Decode(fr)
			if derr != nil || d.Header.Kind != wire.KindMessage || d.Header.CallID != 7 || !bytes.Equal(d.Message, want[i]) {
				t.Fatalf("message %d: %v %v, want %q", i, d.Header, derr, want[i])
			}
		}
	})
}
