package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/server"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store/storetest"
)

// TestFullDisk: what a kvctl user sees when kvserver's disk fills up: puts
// fail with "ResourceExhausted: disk full: …" and exit status 1, gets and
// scans go on, and puts work again once space is freed.
func TestFullDisk(t *testing.T) {
	mnt := storetest.TmpFS(t, 48<<20)
	ballast := filepath.Join(mnt, "ballast") // someone else's, deleted later
	if err := os.WriteFile(ballast, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Listen: []string{"tcp://127.0.0.1:0"},
		Store:  store.Options{Dir: filepath.Join(mnt, "data"), MinFreeBytes: 16 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	target := srv.Targets()[0]

	value := filepath.Join(t.TempDir(), "value") // off the small disk
	b := make([]byte, 512<<10)
	rand.Read(b) // incompressible
	if err := os.WriteFile(value, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var r result
	n := 0
	for ; n < 200; n++ { // 100 MB, on a 48 MB disk
		if r = kvctl(t, target, "", "put", fmt.Sprintf("k%03d", n), "--value-file", value); r.code != 0 {
			break
		}
	}
	if r.code != 1 || !strings.Contains(r.stderr, "kvctl: ResourceExhausted: disk full: ") || !strings.Contains(r.stderr, "bytes free") {
		t.Fatalf("put %d on a filling disk: exit %d, stderr %q; want 1 and \"kvctl: ResourceExhausted: disk full: N bytes free…\"", n, r.code, r.stderr)
	}
	if n == 0 {
		t.Fatal("the first put was refused")
	}
	if r := kvctl(t, target, "", "get", "k000"); r.code != 0 || r.stdout != string(b)+"\n" {
		t.Fatalf("get on the full disk: exit %d, %d bytes, stderr %q", r.code, len(r.stdout), r.stderr)
	}
	if r := kvctl(t, target, "", "scan", "--keys-only"); r.code != 0 || strings.Count(r.stdout, "\n") != n {
		t.Fatalf("scan on the full disk: exit %d, %d keys (want %d), stderr %q", r.code, strings.Count(r.stdout, "\n"), n, r.stderr)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute) // only against hanging for ever
	for {
		r := kvctl(t, target, "", "put", "after", "freed")
		if r.code == 0 {
			break
		}
		if !strings.Contains(r.stderr, "ResourceExhausted") || time.Now().After(deadline) {
			t.Fatalf("put after space was freed: exit %d, stderr %q", r.code, r.stderr)
		}
		time.Sleep(time.Millisecond)
	}
	if r := kvctl(t, target, "", "get", "after"); r.stdout != "freed\n" {
		t.Fatalf("get after: %+v", r)
	}
}
