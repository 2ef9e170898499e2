package gzip

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/rdmarpc/rdmarpc/encoding"
)

func roundTrip(t *testing.T, c encoding.Compressor, msg []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := c.Compress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := c.Decompress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestRegisteredAndRoundTrips(t *testing.T) {
	c := encoding.GetCompressor("gzip")
	if c == nil || c.Name() != "gzip" {
		t.Fatalf("GetCompressor(gzip) = %v", c)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := []byte(strings.Repeat("message ", 100*i+1))
			for range 20 {
				if got := roundTrip(t, c, msg); !bytes.Equal(got, msg) {
					t.Errorf("round trip changed %d bytes into %d", len(msg), len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestSetLevel(t *testing.T) {
	defer func() {
		if err := SetLevel(gzip.DefaultCompression); err != nil {
			t.Fatal(err)
		}
	}()
	msg := bytes.Repeat([]byte("abcdefgh"), 4096)
	size := func() int {
		var buf bytes.Buffer
		w, _ := encoding.GetCompressor(Name).Compress(&buf)
		w.Write(msg)
		w.Close()
		return buf.Len()
	}
	if err := SetLevel(gzip.NoCompression); err != nil {
		t.Fatal(err)
	}
	stored := size()
	if err := SetLevel(gzip.BestCompression); err != nil {
		t.Fatal(err)
	}
	best := size()
	if stored <= len(msg) || best >= len(msg)/10 {
		t.Errorf("%d bytes: NoCompression gave %d, BestCompression %d", len(msg), stored, best)
	}
	if err := SetLevel(42); err == nil {
		t.Error("SetLevel(42) did not fail")
	}
}

func TestDecompressGarbage(t *testing.T) {
	if _, err := encoding.GetCompressor(Name).Decompress(strings.NewReader("not gzip at all")); err == nil {
		t.Error("Decompress of garbage did not fail")
	}
}
