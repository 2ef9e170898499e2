package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/server"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
)

// lines is an io.Writer that tells a waiting test how many lines it holds.
type lines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLines() *lines { return &lines{changed: make(chan struct{}, 1)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitLines waits until l holds n lines, failing after a generous bound
// (a hang, not a slow machine).
func (l *lines) waitLines(t *testing.T, n int) {
	t.Helper()
	bound := time.NewTimer(time.Minute)
	defer bound.Stop()
	for strings.Count(l.String(), "\n") < n {
		select {
		case <-l.changed:
		case <-bound.C:
			t.Fatalf("waiting for %d lines; have:\n%s", n, l.String())
		}
	}
}

// serveDir serves the data directory dir on target until stop is called.
func serveDir(t *testing.T, target, dir string) (actual string, stop func()) {
	t.Helper()
	srv, err := server.New(server.Config{Listen: []string{target}, Store: store.Options{Dir: dir, NoFreeSpaceCheck: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return srv.Targets()[0], stop
}

// TestWatch: kvctl watch prints each event of its prefix from --from on,
// goes on across a server restart without a gap or a repeat (saying it
// reconnects), and exits 0 on interrupt.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	target, stop := serveDir(t, "tcp://127.0.0.1:0", dir)
	for _, args := range [][]string{{"put", "p/a", "1"}, {"put", "other", "x"}, {"batch", "put", "p/b", "2", "del", "p/a"}} {
		if r := kvctl(t, target, "", args...); r.code != 0 {
			t.Fatalf("kvctl %v: %+v", args, r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := newLines(), newLines()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--addr", target, "watch", "p/", "--from", "1"}, strings.NewReader(""), out, errOut)
	}()
	out.waitLines(t, 3)
	stop()
	_, stop = serveDir(t, target, dir)
	defer stop()
	if r := kvctl(t, target, "", "put", "p/c", "3"); r.code != 0 {
		t.Fatalf("put after the restart: %+v", r)
	}
	out.waitLines(t, 4)
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("kvctl watch exited %d; stderr:\n%s", c, errOut.String())
	}
	want := "1\tPUT\tp/a\t1\n3\tPUT\tp/b\t2\n3\tDELETE\tp/a\n4\tPUT\tp/c\t3\n"
	if got := out.String(); got != want {
		t.Fatalf("kvctl watch printed\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(errOut.String(), "reconnecting, from revision 4") {
		t.Fatalf("stderr does not tell of the reconnect:\n%s", errOut.String())
	}
}

func TestWatchJSON(t *testing.T) {
	target := startServer(t)
	kvctl(t, target, "", "put", "k", "\xff")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newLines()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--addr", target, "--json", "watch", "--from", "1"}, strings.NewReader(""), out, newLines())
	}()
	out.waitLines(t, 1)
	cancel()
	<-code
	if got, want := out.String(), `{"key":"k","revision":1,"type":"PUT","value_base64":"/w=="}`+"\n"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
