package h2server

import (
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// FuzzDecodeRequest: whatever the header fields, decodeRequest gives a
// call whose metadata rdmarpc's wire accepts (no pseudo or reserved
// header, keys and text values valid) and a method path, or a refusal.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(":path\x00/a.B/C\x00:method\x00POST\x00content-type\x00application/grpc\x00grpc-timeout\x001S\x00x-bin\x00AAEC\x00user-agent\x00u")
	f.Add(":path\x00/a\x00:method\x00GET\x00content-type\x00text/html")
	f.Add("content-type\x00application/grpc+json\x00:method\x00POST\x00:path\x00/x")
	f.Add("content-type\x00application/grpc\x00:method\x00POST\x00:path\x00/x\x00X-Up\x00v\x00a-bin\x00!!\x00grpc-encoding\x00gzip")
	f.Fuzz(func(t *testing.T, in string) {
		parts := strings.Split(in, "\x00")
		var fields []hpack.HeaderField
		for i := 0; i+1 < len(parts); i += 2 {
			fields = append(fields, hpack.HeaderField{Name: parts[i], Value: parts[i+1]})
		}
		r, ref := decodeRequest(fields)
		if ref != nil {
			if ref.msg == "" {
				t.Fatal("a refusal without a message")
			}
			return
		}
		if !strings.HasPrefix(r.method, "/") || r.timeout < 0 {
			t.Fatalf("request %+v", r)
		}
		if _, ok := grpcwire.ContentSubtype(r.contentType); !ok {
			t.Fatalf("content type %q", r.contentType)
		}
		if err := wire.CheckMD(r.md); err != nil {
			t.Fatalf("metadata %v: %v", r.md, err)
		}
		for k := range r.md {
			if grpcwire.IsReserved(k) && k != "user-agent" {
				t.Fatalf("reserved header %q in the metadata", k)
			}
		}
		// What rdmarpc's wire carries decodes back to the same.
		b := wire.AppendOpen(nil, 1, 0, r.timeout, r.method, r.md)
		h, body, err := wire.ParseHeader(b)
		if err != nil || h.Kind != wire.KindOpen {
			t.Fatal(err)
		}
		if _, err := wire.ParseOpen(body, 1<<30); err != nil {
			t.Fatalf("OPEN of %+v: %v", r, err)
		}
	})
}
