package main

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
)

func TestList(t *testing.T) {
	out, _, err := runCmd(t, newListCmd(), "", probeFlags...)
	if err != nil || out != "probe.v1.Probe\n" {
		t.Fatalf("list: %q, %v; want probe.v1.Probe", out, err)
	}
	out, _, err = runCmd(t, newListCmd(), "", args(probeFlags, "probe.v1.Probe")...)
	want := "probe.v1.Probe.Echo\nprobe.v1.Probe.Fail\nprobe.v1.Probe.Block\nprobe.v1.Probe.Watch\nprobe.v1.Probe.Collect\nprobe.v1.Probe.Chat\n"
	if err != nil || out != want {
		t.Fatalf("list probe.v1.Probe: %q, %v; want %q", out, err, want)
	}
	if _, _, err := runCmd(t, newListCmd(), "", args(probeFlags, "probe.v1.EchoRequest")...); err == nil || !strings.Contains(err.Error(), "not a service") {
		t.Fatalf("list of a message: %v; want not a service", err)
	}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		symbol string
		want   []string
	}{
		{"probe.v1.Probe", []string{
			"probe.v1.Probe is a service:",
			"  // Echo answers with the request's text and the request metadata.",
			"  rpc Echo ( .probe.v1.EchoRequest ) returns ( .probe.v1.EchoResponse );",
			"rpc Watch ( .probe.v1.EchoRequest ) returns ( stream .probe.v1.EchoResponse );",
		}},
		{"probe.v1.Probe/Fail", []string{"probe.v1.Probe.Fail is a method:", "// Fail answers with the code and message asked for, and a",
			"// google.rpc.ErrorInfo and a Note as details.", "rpc Fail ( .probe.v1.FailRequest ) returns ( .probe.v1.EchoResponse );"}},
		{"probe.v1.EchoResponse", []string{"  // The request metadata, \"key=value\" per entry, sorted.", "  repeated string metadata = 2;"}},
		{"probe.v1.EchoRequest", []string{"message EchoRequest {", "  string text = 1;", "  int32 count = 2;", "  .probe.v1.Color color = 3;"}},
		{"probe.v1.EchoResponse", []string{"  repeated string metadata = 2;"}},
		{"probe.v1.Color", []string{"enum Color {", "  COLOR_RED = 1;"}},
	} {
		out, _, err := runCmd(t, newDescribeCmd(), "", args(probeFlags, tc.symbol)...)
		if err != nil {
			t.Fatalf("describe %s: %v", tc.symbol, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("describe %s: no line %q in\n%s", tc.symbol, w, out)
			}
		}
	}
	out, _, err := runCmd(t, newDescribeCmd(), "", args(probeFlags, "probe.v1.Color", "probe.v1.Note")...)
	if err != nil || out != "probe.v1.Color is an enum:\nenum Color {\n  COLOR_UNSPECIFIED = 0;\n  COLOR_RED = 1;\n}\nprobe.v1.Note is a message:\nmessage Note {\n  string text = 1;\n}\n" {
		t.Fatalf("describe of two symbols: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, newDescribeCmd(), "", args(probeFlags, "probe.v1.Nope")...); err == nil || !strings.Contains(err.Error(), `"probe.v1.Nope" not found`) {
		t.Fatalf("describe of an unknown symbol: %v", err)
	}
}

func TestCall(t *testing.T) {
	target := startProbe(t)
	file := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(file, []byte(`{"text": "from a file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"metadata", "", []string{"-d", `{"text": "hi", "count": 3}`, "-H", "x-probe: one", "-H", "X-Probe:two", "-H", "token-bin: aGkh"},
			`{"text":"hi","metadata":["token-bin=hi!","x-probe=one","x-probe=two"],"count":3}`},
		{"no data: the empty request", "", nil, `{}`},
		{"emit defaults", "", []string{"--emit-defaults"}, `{"text":"","metadata":[],"count":0}`},
		{"stdin", `{"text": "piped"}`, []string{"-d", "@"}, `{"text":"piped"}`},
		{"file", "", []string{"-d", "@" + file}, `{"text":"from a file"}`},
		{"method with a dot", "", []string{"-d", `{"text":"x"}`, "--method-dot"}, `{"text":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "probe.v1.Probe/Echo"
			a := tc.args
			if i := indexOf(a, "--method-dot"); i >= 0 {
				method, a = "probe.v1.Probe.Echo", append(a[:i:i], a[i+1:]...)
			}
			out, stderr, err := runCmd(t, newCallCmd(), tc.stdin, args(probeFlags, a, target, method)...)
			if err != nil {
				t.Fatalf("call: %v; stderr %s", err, stderr)
			}
			if out != tc.want+"\n" {
				t.Fatalf("call printed %q; want %q", out, tc.want+"\n")
			}
		})
	}
}

func TestCallVerbose(t *testing.T) {
	target := startProbe(t)
	_, stderr, err := runCmd(t, newCallCmd(), "", args(probeFlags, "-v", target, "probe.v1.Probe/Echo")...)
	if err != nil {
		t.Fatal(err)
	}
	// content-type is the client's, as gRPC-go's (and grpcurl's -v) shows it.
	want := "Response headers received:\ncontent-type: application/grpc\nx-answer: header\nx-answer-bin: AP8=\n\n" +
		"Response trailers received:\nx-answer: trailer\nSent 1 request and received 1 response\n"
	if stderr != want {
		t.Fatalf("-v printed %q, want %q", stderr, want)
	}
}

// TestVerboseWithoutMetadata: -v prints its sections when the server sent
// no metadata, as grpcurl does, instead of nothing.
func TestVerboseWithoutMetadata(t *testing.T) {
	for _, tc := range []struct {
		x    exchange
		want string
	}{
		{exchange{sent: 1, received: 1}, "Response headers received:\n(empty)\n\nResponse trailers received:\n(empty)\nSent 1 request and received 1 response\n"},
		{exchange{sent: 3}, "Response headers received:\n(empty)\n\nResponse trailers received:\n(empty)\nSent 3 requests and received 0 responses\n"},
	} {
		var b strings.Builder
		tc.x.print(&b)
		if b.String() != tc.want {
			t.Errorf("%+v printed %q, want %q", tc.x, b.String(), tc.want)
		}
	}
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

func TestCallFails(t *testing.T) {
	target := startProbe(t)
	lis, err := rpc.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "tcp://" + lis.Addr().String()
	lis.Close()

	for _, tc := range []struct {
		name     string
		args     []string
		exit     int      // 0: not an RPC failure, main exits 1
		errWant  string   // in the error
		stderrIs []string // lines of stderr
		reflect  bool     // no --proto: the schema from the server
	}{
		{name: "status with details", args: []string{"-d", `{"code": 5, "message": "no such thing"}`, target, "probe.v1.Probe/Fail"}, exit: 64 + 5,
			stderrIs: []string{
				"ERROR:",
				"  Code: NotFound",
				"  Message: no such thing",
				"  Details:",
				`  1) {"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"PROBE","domain":"probe.test"}`,
				`  2) {"@type":"type.googleapis.com/probe.v1.Note","text":"a note"}`,
				"  3) type.googleapis.com/elsewhere.Secret (unknown type; value AQID)",
			}},
		{name: "deadline", args: []string{"--timeout", "50ms", target, "probe.v1.Probe/Block"}, exit: 64 + 4,
			stderrIs: []string{"ERROR:", "  Code: DeadlineExceeded"}},
		{name: "unavailable", args: []string{closed, "probe.v1.Probe/Echo"}, exit: 64 + 14,
			stderrIs: []string{"ERROR:", "  Code: Unavailable"}},
		{name: "unimplemented on the server", args: []string{"-I", "../../rpc/rpctest/testpb", "--proto", "test.proto", target, "rdmarpc.test.v1.Test/Echo"}, exit: 64 + 12,
			stderrIs: []string{"ERROR:", "  Code: Unimplemented"}},
		{name: "malformed JSON", args: []string{"-d", `{"text": `, target, "probe.v1.Probe/Echo"}, errWant: "request 1: not JSON"},
		{name: "JSON of another message", args: []string{"-d", `{"nosuch": 1}`, target, "probe.v1.Probe/Echo"}, errWant: "request 1: not a probe.v1.EchoRequest"},
		{name: "two requests to a unary method", args: []string{"-d", `{} {}`, target, "probe.v1.Probe/Echo"}, errWant: "takes one request"},
		{name: "bad header", args: []string{"-H", "nocolon", target, "probe.v1.Probe/Echo"}, exit: exitUsage, errWant: "want key: value"},
		{name: "bad -bin header", args: []string{"-H", "k-bin: !!", target, "probe.v1.Probe/Echo"}, exit: exitUsage, errWant: "base64"},
		{name: "no such file", args: []string{"-d", "@/nonexistent/req.json", target, "probe.v1.Probe/Echo"}, errWant: "no such file"},
		{name: "unknown method", args: []string{target, "probe.v1.Probe/Nope"}, errWant: `has no method "Nope" (it has: Echo, Fail, Block, Watch, Collect, Chat)`},
		{name: "unknown service", args: []string{target, "probe.v1.Nope/Echo"}, errWant: `service "probe.v1.Nope" not found`},
		{name: "not a method name", args: []string{target, "Echo"}, errWant: "want package.Service/Method"},
		// Today the client's NewStream answers Unimplemented; once streams
		// run, the server does: the probe does not serve Watch.
		{name: "streaming method not served", args: []string{target, "probe.v1.Probe/Watch"}, exit: 64 + 12,
			stderrIs: []string{"ERROR:", "  Code: Unimplemented"}},
		{name: "no reflection on the server", reflect: true, args: []string{target, "probe.v1.Probe/Echo"}, errWant: "the server does not serve reflection"},
		{name: "-I without --proto", reflect: true, args: []string{"-I", "testdata", target, "probe.v1.Probe/Echo"}, errWant: "none is given"},
		{name: "reflection from a server that is not there", reflect: true, args: []string{closed, "probe.v1.Probe/Echo"}, exit: 64 + 14,
			stderrIs: []string{"ERROR:", "  Code: Unavailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.args
			if indexOf(a, "--proto") < 0 && !tc.reflect {
				a = args(probeFlags, a)
			}
			cmd := newCallCmd()
			_, stderr, err := runCmd(t, cmd, "", a...)
			if err == nil {
				t.Fatal("call succeeded")
			}
			var rep strings.Builder
			code := report(&rep, cmd, err)
			stderr += rep.String()
			if want := cmp.Or(tc.exit, exitFailure); code != want {
				t.Fatalf("call: %v, exit %d; want exit %d\n%s", err, code, want, stderr)
			}
			if tc.errWant != "" && !strings.Contains(err.Error(), tc.errWant) {
				t.Fatalf("call: %v; want %q in it", err, tc.errWant)
			}
			lines := strings.Split(stderr, "\n")
			for i, w := range tc.stderrIs {
				if i >= len(lines) || lines[i] != w {
					t.Fatalf("stderr:\n%s\nline %d: want %q", stderr, i+1, w)
				}
			}
		})
	}
}
