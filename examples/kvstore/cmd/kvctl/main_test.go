package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/server"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer serves an in-memory store until the test ends and returns
// its target.
func startServer(t *testing.T) string {
	t.Helper()
	srv, err := server.New(server.Config{Listen: []string{"tcp://127.0.0.1:0"}, Store: store.Options{InMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv.Targets()[0]
}

type result struct {
	code           int
	stdout, stderr string
}

func kvctl(t *testing.T, target, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"--addr", target}, args...), strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

func TestCommands(t *testing.T) {
	target := startServer(t)
	steps := []struct {
		args   []string
		stdin  string
		code   int
		stdout string // exact
		stderr string // contained
	}{
		{args: []string{"get", "greeting"}, code: 1, stderr: "kvctl: NotFound: key greeting does not exist"},
		{args: []string{"put", "greeting", "hello world"}, stdout: "OK\n"},
		{args: []string{"get", "greeting"}, stdout: "hello world\n"},
		{args: []string{"put", "from-stdin", "--value-file", "-"}, stdin: "piped", stdout: "OK\n"},
		{args: []string{"get", "from-stdin"}, stdout: "piped\n"},
		{args: []string{"batch", "put", "user/1", "alice", "put", "user/2", "bob", "put", "user/3", "carol", "del", "from-stdin"}, stdout: "OK\n"},
		{args: []string{"get", "from-stdin"}, code: 1, stderr: "NotFound"},
		{args: []string{"scan", "--prefix", "user/"}, stdout: "user/1\talice\nuser/2\tbob\nuser/3\tcarol\n"},
		{args: []string{"scan", "--prefix", "user/", "--keys-only", "--page-size", "1"}, stdout: "user/1\nuser/2\nuser/3\n"},
		{args: []string{"scan", "--start", "user/2", "--end", "user/3"}, stdout: "user/2\tbob\n"},
		{args: []string{"scan", "--prefix", "user/", "--limit", "2", "--page-size", "1"}, stdout: "user/1\talice\nuser/2\tbob\n", stderr: "(more: continue with --page-token "},
		{args: []string{"del", "user/1", "user/2"}, stdout: "OK\n"},
		{args: []string{"del", "user/3"}, stdout: "OK\n"},
		{args: []string{"scan"}, stdout: "greeting\thello world\n"},
		{args: []string{"cas", "lock", "me", "--expect-absent"}, stdout: "OK\n"},
		{args: []string{"cas", "lock", "you", "--expect-absent"}, code: 1, stderr: "kvctl: Aborted: compare-and-swap conflict: the key exists\ncurrent value: me\n"},
		{args: []string{"cas", "lock", "you", "--expect", "someone"}, code: 1, stderr: "Aborted"},
		{args: []string{"cas", "lock", "you", "--expect", "me"}, stdout: "OK\n"},
		{args: []string{"cas", "nokey", "x", "--expect", "y"}, code: 1, stderr: "the key does not exist"},
		{args: []string{"put", "", "x"}, code: 1, stderr: "kvctl: InvalidArgument: empty key"},
		{args: []string{"put", strings.Repeat("k", store.MaxKeySize+1), "x"}, code: 1, stderr: "InvalidArgument: key of 4097 bytes"},
		{args: []string{"put", "bin", "a\x00b"}, stdout: "OK\n"},
		{args: []string{"scan", "--prefix", "bin"}, stdout: "bin\t\"a\\x00b\"\n"},
		// usage errors: exit 2, nothing sent
		{args: []string{"get"}, code: 2, stderr: "accepts 1 arg"},
		{args: []string{"frobnicate"}, code: 2, stderr: "unknown command"},
		{args: []string{"get", "k", "--nope"}, code: 2, stderr: "unknown flag"},
		{args: []string{"cas", "k", "v"}, code: 2, stderr: "exactly one of --expect"},
		{args: []string{"cas", "k", "v", "--expect", "a", "--expect-absent"}, code: 2, stderr: "exactly one of --expect"},
		{args: []string{"batch", "put", "k"}, code: 2, stderr: "lacks its key or value"},
		{args: []string{"batch", "upsert", "k", "v"}, code: 2, stderr: `"upsert", want put or del`},
		{args: []string{"put", "k"}, code: 2, stderr: "give VALUE or --value-file"},
		{args: []string{"scan", "--prefix", "a", "--start", "b"}, code: 2, stderr: "not both"},
		{args: []string{"scan", "--page-token", "!!!"}, code: 2, stderr: "--page-token"},
	}
	for _, s := range steps {
		r := kvctl(t, target, s.stdin, s.args...)
		if r.code != s.code || s.code == 0 && r.stdout != s.stdout || !strings.Contains(r.stderr, s.stderr) {
			t.Fatalf("kvctl %q: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout %q, stderr containing %q",
				s.args, r.code, r.stdout, r.stderr, s.code, s.stdout, s.stderr)
		}
	}
}

func TestScanContinues(t *testing.T) {
	target := startServer(t)
	kvctl(t, target, "", "batch", "put", "a", "1", "put", "b", "2", "put", "c", "3")
	r := kvctl(t, target, "", "scan", "--limit", "2")
	_, tok, ok := strings.Cut(strings.TrimSpace(r.stderr), "--page-token ")
	if !ok {
		t.Fatalf("no token in %q", r.stderr)
	}
	tok = strings.TrimSuffix(tok, ")")
	if r := kvctl(t, target, "", "scan", "--page-token", tok); r.code != 0 || r.stdout != "c\t3\n" {
		t.Fatalf("continuing the scan: %+v, want c", r)
	}
	if r := kvctl(t, target, "", "scan", "--prefix", "x", "--page-token", tok); r.code != 1 || !strings.Contains(r.stderr, "InvalidArgument") {
		t.Fatalf("a token with another scan: %+v, want InvalidArgument", r)
	}
}

func TestJSON(t *testing.T) {
	target := startServer(t)
	decode := func(r result) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("stdout is not JSON: %q (%v)", r.stdout, err)
		}
		return m
	}
	if r := kvctl(t, target, "", "--json", "put", "k", "v"); r.code != 0 || decode(r)["ok"] != true {
		t.Fatalf("put: %+v", r)
	}
	r := kvctl(t, target, "", "--json", "get", "k")
	if m := decode(r); r.code != 0 || m["found"] != true || m["key"] != "k" || m["value"] != "v" {
		t.Fatalf("get: %+v", r)
	}
	r = kvctl(t, target, "", "--json", "get", "missing")
	if m := decode(r); r.code != 1 || m["found"] != false {
		t.Fatalf("get of a missing key: %+v, want found false and exit 1", r)
	}
	kvctl(t, target, "", "put", "bin", "\xff\xfe")
	r = kvctl(t, target, "", "--json", "scan", "--prefix", "bin")
	pairs, _ := decode(r)["pairs"].([]any)
	if len(pairs) != 1 || pairs[0].(map[string]any)["value_base64"] != "//4=" {
		t.Fatalf("scan of a binary value: %+v, want value_base64", r)
	}
	r = kvctl(t, target, "", "--json", "cas", "k", "w", "--expect", "nope")
	e, _ := decode(r)["error"].(map[string]any)
	if r.code != 1 || e["code"] != "Aborted" || e["code_number"] != 10.0 || e["current"].(map[string]any)["value"] != "v" {
		t.Fatalf("cas conflict: %+v", r)
	}
}

func TestUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nobody listens there now
	r := kvctl(t, "tcp://"+addr, "", "get", "k")
	if r.code != 1 || !strings.Contains(r.stderr, "kvctl: Unavailable: ") {
		t.Fatalf("%+v, want exit 1 and Unavailable", r)
	}
}

func TestBench(t *testing.T) {
	target := startServer(t)
	r := kvctl(t, target, "", "--json", "bench", "--duration", "300ms", "--concurrency", "3", "--keys", "20", "--value-size", "100", "--reads", "50", "--keep")
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	var rep struct {
		Ops    uint64            `json:"ops"`
		QPS    float64           `json:"qps"`
		Errors map[string]uint64 `json:"errors"`
		Get    latencyStats      `json:"get"`
		Put    latencyStats      `json:"put"`
		All    latencyStats      `json:"all"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, r.stdout)
	}
	if rep.Ops == 0 || rep.All.Ops != rep.Get.Ops+rep.Put.Ops || rep.Get.Ops == 0 || rep.Put.Ops == 0 || len(rep.Errors) != 0 {
		t.Fatalf("bench report: %+v", rep)
	}
	if !(rep.All.P50 > 0 && rep.All.P50 <= rep.All.P99 && rep.All.P99 <= rep.All.P999 && rep.All.P999 <= rep.All.Max) {
		t.Fatalf("percentiles out of order: %+v", rep.All)
	}
	// Reads of preloaded keys find them: a Get that missed would still be
	// OK, so check the keys are there (--keep left them).
	if r := kvctl(t, target, "", "get", "kvctl-bench/00000019"); r.code != 0 || len(r.stdout) != 101 {
		t.Fatalf("preloaded key: %+v", r)
	}
	// Human output, all reads, no preload.
	r = kvctl(t, target, "", "bench", "-d", "200ms", "-c", "2", "--reads", "100", "--preload=false", "--key-prefix", "other/")
	for _, want := range []string{"QPS", "p50", "p99", "p999", "get", "0 errors"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("bench output lacks %q: %+v", want, r)
		}
	}
	if r := kvctl(t, target, "", "bench", "--reads", "101"); r.code != 2 {
		t.Fatalf("bench --reads 101: %+v, want exit 2", r)
	}
}

// TestBenchCleansUp: bench says where it writes, and deletes what it wrote
// (without --keep), leaving the store's other keys alone.
func TestBenchCleansUp(t *testing.T) {
	target := startServer(t)
	if r := kvctl(t, target, "", "put", "kvctl-benchmark-notes", "mine"); r.code != 0 {
		t.Fatalf("put: %+v", r)
	}
	r := kvctl(t, target, "", "bench", "-d", "200ms", "-c", "2", "--keys", "1500", "--value-size", "10", "--progress=false")
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	for _, want := range []string{
		"bench: writing up to 1500 keys kvctl-bench/00000000 … kvctl-bench/00001499 (10-byte values) into the store at " + target + "; they are deleted at the end (--keep keeps them)\n",
		"bench: deleted the 1500 keys under kvctl-bench/\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	// More keys than one cleanup batch: every one is gone.
	if r := kvctl(t, target, "", "scan", "--prefix", "kvctl-bench/", "--keys-only"); r.code != 0 || r.stdout != "" {
		t.Fatalf("keys left under kvctl-bench/: %+v", r)
	}
	if r := kvctl(t, target, "", "get", "kvctl-benchmark-notes"); r.code != 0 || r.stdout != "mine\n" {
		t.Fatalf("another key: %+v", r)
	}
}
