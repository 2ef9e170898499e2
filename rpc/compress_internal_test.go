package rpc

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/encoding"
	_ "github.com/rdmarpc/rdmarpc/encoding/gzip"
	"github.com/rdmarpc/rdmarpc/status"
)

// FuzzDecompress: whatever bytes a peer sends as a gzip message,
// decompress returns at most max bytes, or a status error saying why not
// (ResourceExhausted beyond max, Internal for bytes that are not gzip).
func FuzzDecompress(f *testing.F) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	f.Add(gz(nil), 16)
	f.Add(gz([]byte("hello, rdmarpc")), 16)
	f.Add(gz(make([]byte, 4096)), 1024)
	f.Add(append(gz([]byte("one")), gz([]byte("two"))...), 16)
	f.Add([]byte("not gzip"), 16)
	f.Add(gz(make([]byte, 100))[:20], 1000)
	c := encoding.GetCompressor("gzip")
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 0 || max > 1<<20 {
			return
		}
		out, err := decompress(c, data, max)
		if err != nil {
			if code := status.Code(err); code != codes.ResourceExhausted && code != codes.Internal {
				t.Fatalf("error %v, want ResourceExhausted or Internal", err)
			}
			return
		}
		if len(out) > max {
			t.Fatalf("%d bytes out, limit %d", len(out), max)
		}
	})
}
