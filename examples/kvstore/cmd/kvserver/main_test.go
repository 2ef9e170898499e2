package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// The tests run kvserver as a child process: this test binary, re-executed
// with KVSERVER_TEST_MAIN=1, is kvserver (run is its main). So the crash
// test needs no Go toolchain and runs in the test bed as well.
func TestMain(m *testing.M) {
	if os.Getenv("KVSERVER_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

const timeout = 60 * time.Second // bounds waits that should end promptly

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// proc is a kvserver child process.
type proc struct {
	cmd       *exec.Cmd
	targets   []string      // from the "kvserver ready" log line
	logs      *syncBuffer   // everything it wrote on stderr
	stdout    *syncBuffer   // everything it wrote on stdout
	stderrEOF chan struct{} // closed when stderr is read to its end
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer starts kvserver with args (plus JSON logs) and waits until it
// is ready. It is killed, if still running, when the test ends.
func startServer(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append(args, "--log-format", "json")...)
	cmd.Env = append(os.Environ(), "KVSERVER_TEST_MAIN=1")
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logs: &syncBuffer{}, stdout: out, stderrEOF: make(chan struct{})}
	ready := make(chan []string, 1)
	// Reads stderr until the process closes it (exits).
	go func() {
		defer close(p.stderrEOF)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.logs.Write(append(sc.Bytes(), '\n'))
			var e struct {
				Msg     string   `json:"msg"`
				Targets []string `json:"targets"`
			}
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "kvserver ready" {
				ready <- e.Targets
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			p.wait(t)
		}
	})
	select {
	case p.targets = <-ready:
	case <-p.stderrEOF:
		t.Fatalf("kvserver exited before it was ready:\n%s", p.logs)
	case <-time.After(timeout):
		t.Fatalf("kvserver not ready after %v:\n%s", timeout, p.logs)
	}
	return p
}

// wait waits for the process to exit and returns its exit status (-1 when
// killed by a signal).
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.stderrEOF:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		t.Fatalf("kvserver did not exit within %v:\n%s", timeout, p.logs)
	}
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func dial(t *testing.T, target string) kvpb.KVClient {
	t.Helper()
	cc, err := rpc.Dial(testCtx(t), target)
	if err != nil {
		t.Fatalf("Dial(%s): %v", target, err)
	}
	t.Cleanup(func() { cc.Close() })
	return kvpb.NewKVClient(cc)
}

// TestSignals: SIGTERM and SIGINT shut kvserver down cleanly (exit 0, the
// store closed), and what it acknowledged is there after a restart.
func TestSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--data-dir", "data", "--listen", "tcp://127.0.0.1:0"}
			p := startServer(t, dir, args...)
			kv := dial(t, p.targets[0])
			if _, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
			p.signal(t, sig)
			if code := p.wait(t); code != 0 {
				t.Fatalf("exit status %d after %v, want 0:\n%s", code, sig, p.logs)
			}
			for _, want := range []string{`"shutting down: draining calls"`, `"store closed"`, `"stopped cleanly"`} {
				if !strings.Contains(p.logs.String(), want) {
					t.Errorf("the logs lack %s:\n%s", want, p.logs)
				}
			}
			p = startServer(t, dir, args...)
			kv = dial(t, p.targets[0])
			if resp, err := kv.Get(testCtx(t), &kvpb.GetRequest{Key: []byte("k")}); err != nil || string(resp.GetValue()) != "v" {
				t.Fatalf("after a restart: %v, %v", resp, err)
			}
		})
	}
}

// TestMem: --mem keeps nothing on disk and nothing across restarts.
func TestMem(t *testing.T) {
	dir := t.TempDir()
	p := startServer(t, dir, "--mem", "--listen", "tcp://127.0.0.1:0")
	kv := dial(t, p.targets[0])
	if _, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d:\n%s", code, p.logs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("--mem wrote to the working directory: %v", entries)
	}
	p = startServer(t, dir, "--mem", "--listen", "tcp://127.0.0.1:0")
	kv = dial(t, p.targets[0])
	if resp, err := kv.Get(testCtx(t), &kvpb.GetRequest{Key: []byte("k")}); err != nil || resp.GetFound() {
		t.Fatalf("--mem kept a key across restarts: %v, %v", resp, err)
	}
}

// TestOTel: --otel writes the spans and metrics of the calls to stdout,
// all of them by the time a clean shutdown ends.
func TestOTel(t *testing.T) {
	p := startServer(t, t.TempDir(), "--mem", "--otel", "--listen", "tcp://127.0.0.1:0")
	kv := dial(t, p.targets[0])
	if _, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d:\n%s", code, p.logs)
	}
	out := p.stdout.String()
	for _, want := range []string{
		`"Name":"rdmarpc.kvstore.v1.KV/Put"`,
		`"Key":"rpc.system","Value":{"Type":"STRING","Value":"rdmarpc"}`,
		`"Key":"network.transport","Value":{"Type":"STRING","Value":"tcp"}`,
		`"Name":"rpc.server.duration"`,
	} {
		if !strings.Contains(strings.ReplaceAll(strings.ReplaceAll(out, " ", ""), "\n", ""), want) {
			t.Errorf("stdout lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", out)
	}
}

func TestMinFreeSpaceFlag(t *testing.T) {
	tests := []struct {
		in   string
		want store.Options
	}{
		{"64MiB", store.Options{MinFreeBytes: 64 << 20}},
		{"2GB", store.Options{MinFreeBytes: 2e9}},
		{"1.5GiB", store.Options{MinFreeBytes: 3 << 29}},
		{"4096", store.Options{MinFreeBytes: 4096}},
		{"1%", store.Options{MinFreePercent: 1}},
		{"0", store.Options{NoFreeSpaceCheck: true}},
		{"0B", store.Options{NoFreeSpaceCheck: true}},
	}
	for _, tc := range tests {
		var o store.Options
		err := setMinFree(&o, tc.in)
		if err != nil || o.MinFreeBytes != tc.want.MinFreeBytes || o.MinFreePercent != tc.want.MinFreePercent || o.NoFreeSpaceCheck != tc.want.NoFreeSpaceCheck {
			t.Errorf("--min-free-space %s: %+v, %v; want %+v", tc.in, o, err, tc.want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--sync", "sometimes"}, "--sync"},
		{[]string{"--no-such-flag"}, "unknown flag"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"stray-argument"}, "unknown command"},
		{[]string{"--min-free-space", "lots"}, "--min-free-space"},
		{[]string{"--min-free-space", "150%"}, "--min-free-space"},
		{[]string{"--min-free-space", "-1MiB"}, "--min-free-space"},
		{[]string{"--watch-history", "0"}, "--watch-history"},
		{[]string{"--watch-history-bytes", "0"}, "--watch-history-bytes"},
		{[]string{"--watch-history-bytes", "many"}, "--watch-history-bytes"},
		{[]string{"--rdma-gid-index", "-1"}, "--rdma-gid-index"},
	}
	for _, tc := range tests {
		var stderr bytes.Buffer
		if code := run(append(tc.args, "--data-dir", t.TempDir()), &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("kvserver %v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestRDMAFlags: the --rdma-* flags reach the RDMA transport's Options,
// and without them the registered default serves.
func TestRDMAFlags(t *testing.T) {
	var f flags
	cmd := newCommand(&f, func() {})
	cmd.SetArgs([]string{"--rdma-device", "mlx5_0", "--rdma-device", "mlx5_1:1", "--rdma-netdev", "net1", "--rdma-gid-index", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	o, set, err := rdmaOptions(f)
	if err != nil || !set || !slices.Equal(o.Devices, []string{"mlx5_0", "mlx5_1:1"}) || !slices.Equal(o.Netdevs, []string{"net1"}) || o.GIDIndex != 3 {
		t.Errorf("rdma.Options from the flags: %+v (set %v, %v); want devices mlx5_0 and mlx5_1:1, netdev net1, GID index 3", o, set, err)
	}
	var none flags
	if err := newCommand(&none, func() {}).Execute(); err != nil {
		t.Fatal(err)
	}
	if _, set, err := rdmaOptions(none); set || err != nil {
		t.Errorf("no --rdma-* flag: set %v, %v; want the default transport", set, err)
	}
}
