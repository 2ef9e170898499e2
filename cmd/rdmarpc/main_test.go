package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExitCodes: every command reports a failure the same way: the same
// Unavailable is "ERROR: Code: Unavailable" and exit 78 from call, bench,
// list and describe; a target that does not parse, a wrong argument count
// or an unknown flag is a usage error (exit 2, with the usage line).
func TestExitCodes(t *testing.T) {
	lis, err := rpc.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "tcp://" + lis.Addr().String()
	lis.Close()

	commands := map[string]func() *cobra.Command{
		"call": newCallCmd, "bench": newBenchCmd, "list": newListCmd, "describe": newDescribeCmd,
	}
	for _, tc := range []struct {
		cmd    string
		args   []string
		code   int
		stderr []string // its first lines
	}{
		{"call", []string{closed, "probe.v1.Probe/Echo"}, 78, []string{"ERROR:", "  Code: Unavailable"}},
		{"bench", []string{"-n", "1", closed, "probe.v1.Probe/Echo"}, 78, []string{"ERROR:", "  Code: Unavailable"}},
		{"list", []string{closed}, 78, []string{"ERROR:", "  Code: Unavailable"}},
		{"describe", []string{closed, "probe.v1.Probe"}, 78, []string{"ERROR:", "  Code: Unavailable"}},
		{"call", []string{"foo://127.0.0.1:1", "probe.v1.Probe/Echo"}, 2, []string{`rdmarpc: resolver: unknown scheme "foo" in target "foo://127.0.0.1:1"; registered resolvers: dns, ipv4, ipv6, passthrough, unix, unix-abstract; registered transports: tcp, rdma, unix`, "Usage: call [flags] TARGET METHOD"}},
		{"bench", []string{"foo://127.0.0.1:1", "probe.v1.Probe/Echo"}, 2, []string{`rdmarpc: resolver: unknown scheme "foo" in target "foo://127.0.0.1:1"; registered resolvers: dns, ipv4, ipv6, passthrough, unix, unix-abstract; registered transports: tcp, rdma, unix`}},
		{"list", []string{"foo://127.0.0.1:1"}, 2, []string{`rdmarpc: resolver: unknown scheme "foo" in target "foo://127.0.0.1:1"; registered resolvers: dns, ipv4, ipv6, passthrough, unix, unix-abstract; registered transports: tcp, rdma, unix`}},
		{"call", nil, 2, []string{"rdmarpc: call takes TARGET (tcp://host:port, rdma://host:port) and METHOD (package.Service/Method); got 0 argument(s)", "Usage: call [flags] TARGET METHOD", "Run 'call --help' for the flags and examples."}},
		{"bench", []string{closed}, 2, []string{"rdmarpc: bench takes TARGET (tcp://host:port, rdma://host:port) and METHOD (package.Service/Method); got 1 argument(s)"}},
		{"list", []string{closed, "a", "b"}, 2, []string{"rdmarpc: list takes [TARGET] and [SERVICE]; got 3 argument(s)"}},
		{"describe", nil, 2, []string{"rdmarpc: give the TARGET (tcp://host:port, rdma://host:port) whose reflection service to ask, or the services' .proto files with --proto"}},
		{"call", []string{"--nosuch", closed, "probe.v1.Probe/Echo"}, 2, []string{"rdmarpc: unknown flag: --nosuch"}},
	} {
		t.Run(tc.cmd+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := commands[tc.cmd]()
			if tc.cmd == "call" || tc.cmd == "bench" {
				tc.args = append(append([]string{}, probeFlags...), tc.args...)
			}
			cmd.SetFlagErrorFunc(rootCmd.FlagErrorFunc()) // as a child of rootCmd
			_, stderr, err := runCmd(t, cmd, "", tc.args...)
			var rep strings.Builder
			code := report(&rep, cmd, err)
			stderr += rep.String()
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			lines := strings.Split(stderr, "\n")
			for i, w := range tc.stderr {
				if i >= len(lines) || lines[i] != w {
					t.Fatalf("stderr:\n%s\nline %d: want %q", stderr, i+1, w)
				}
			}
		})
	}
}

// TestHelpSaysTheExitCodes: the "N for Name(c)" pairs of the help texts are
// 64 + c, and Name is code c.
func TestHelpSaysTheExitCodes(t *testing.T) {
	pair := regexp.MustCompile(`(\d+) for (\w+)\((\d+)\)`)
	n := 0
	for _, c := range []*cobra.Command{rootCmd, newCallCmd(), newBenchCmd()} {
		for _, m := range pair.FindAllStringSubmatch(c.Long, -1) {
			n++
			exit, _ := strconv.Atoi(m[1])
			code, _ := strconv.Atoi(m[3])
			if exit != exitStatus+code || codes.Code(code).String() != m[2] {
				t.Errorf("%s's help says %q: %s is %d, and its exit is %d", c.Name(), m[0], m[2], code, exitStatus+code)
			}
		}
	}
	if n == 0 {
		t.Fatal("no help text names an exit code")
	}
}
