package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPprof: --pprof-addr serves the profile index and the heap profile,
// and stop leaves no goroutine behind (goleak in TestMain).
func TestPprof(t *testing.T) {
	addr, stop, err := startPprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for path, want := range map[string]string{"/debug/pprof/": "allocs", "/debug/pprof/heap?debug=1": "heap profile"} {
		resp, err := cl.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("%s: %s, body lacks %q", path, resp.Status, want)
		}
	}
}
