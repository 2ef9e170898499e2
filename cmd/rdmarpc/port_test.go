package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// portDir copies testdata/port/greeter/main.go.txt into a new directory as
// main.go and returns the directory.
func portDir(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o666); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "port", "greeter", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPortDiff(t *testing.T) {
	src := readTestdata(t, "main.go.txt")
	dir := portDir(t, src)
	var out bytes.Buffer
	err := runPort(&out, []string{dir + "/..."}, true)
	if err == nil || !strings.Contains(err.Error(), "2 use(s)") {
		t.Errorf("port -diff: %v; want 2 uses lacking", err)
	}
	if code := report(&bytes.Buffer{}, newPortCmd(), err); code != exitFailure {
		t.Errorf("exit %d, want %d", code, exitFailure)
	}
	main := filepath.Join(dir, "main.go")
	for _, want := range []string{
		main + ":15:2: google.golang.org/grpc/xds: rdmarpc has no package github.com/rdmarpc/rdmarpc/xds\n",
		main + ":21:3: grpc.WithAuthority: not in github.com/rdmarpc/rdmarpc/grpc\n",
		"--- " + main + "\n+++ " + main + "\n",
		"-\t\"google.golang.org/grpc\"\n",
		"+\t\"github.com/rdmarpc/rdmarpc/grpc\"\n",
		"-\thealthpb \"google.golang.org/grpc/health/grpc_health_v1\"\n",
		"+\thealthpb \"github.com/rdmarpc/rdmarpc/health/grpc_health_v1\"\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The shadowing variable's Check, and the names rdmarpc has, are not listed.
	if n := strings.Count(out.String(), ": not in "); n != 1 {
		t.Errorf("%d identifiers listed, want 1:\n%s", n, out.String())
	}
	if got, _ := os.ReadFile(main); string(got) != src {
		t.Error("-diff changed the file")
	}
}

func TestPortWrites(t *testing.T) {
	dir := portDir(t, readTestdata(t, "main.go.txt"))
	var out bytes.Buffer
	if err := runPort(&out, []string{dir}, false); err == nil {
		t.Error("port: nil error despite what rdmarpc lacks")
	}
	got, err := os.ReadFile(filepath.Join(dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if want := readTestdata(t, "main.go.golden"); string(got) != want {
		t.Errorf("ported:\n%s\nwant:\n%s", got, want)
	}
	// Ported once, there is nothing more to rewrite.
	out.Reset()
	runPort(&out, []string{dir}, true)
	if strings.Contains(out.String(), "---") {
		t.Errorf("a second port changes more:\n%s", out.String())
	}
}

// TestPortClean: a program that uses only what rdmarpc has ports with no
// complaint and exit 0.
func TestPortClean(t *testing.T) {
	src := strings.NewReplacer(
		"\t_ \"google.golang.org/grpc/xds\" // xDS name resolution\n", "",
		",\n\t\tgrpc.WithAuthority(\"greeter.example\"))", ")",
	).Replace(readTestdata(t, "main.go.txt"))
	dir := portDir(t, src)
	var out bytes.Buffer
	if err := runPort(&out, []string{dir}, false); err != nil {
		t.Fatalf("port: %v\n%s", err, out.String())
	}
	if out.Len() != 0 {
		t.Errorf("output: %s", out.String())
	}
	got, _ := os.ReadFile(filepath.Join(dir, "main.go"))
	if strings.Contains(string(got), "google.golang.org/grpc") || !strings.Contains(string(got), `"github.com/rdmarpc/rdmarpc/grpc"`) {
		t.Errorf("not ported:\n%s", got)
	}
}

func TestPortBadPath(t *testing.T) {
	err := runPort(&bytes.Buffer{}, []string{filepath.Join(t.TempDir(), "nope")}, true)
	var ue *usageError
	if !errors.As(err, &ue) {
		t.Errorf("port on a missing path: %v, want a usage error", err)
	}
}

// TestPortFlag: -diff takes one dash, as gofmt's flags, or two.
func TestPortFlag(t *testing.T) {
	for _, flag := range []string{"-diff", "--diff"} {
		src := readTestdata(t, "main.go.txt")
		dir := portDir(t, src)
		cmd := newPortCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard) // main's report prints the error
		cmd.SetArgs([]string{flag, dir})
		cmd.Execute()
		if !strings.Contains(out.String(), "+++ ") {
			t.Errorf("%s printed no diff:\n%s", flag, out.String())
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "main.go")); string(got) != src {
			t.Errorf("%s changed the file", flag)
		}
	}
}

// TestPortOwnModule: a program whose module is under gRPC-go's path (its
// examples, ported as they are) keeps the imports of its own packages.
func TestPortOwnModule(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module google.golang.org/grpc/examples\n\ngo 1.26\n",
		"client/main.go": `package main

import (
	"google.golang.org/grpc"
	pb "google.golang.org/grpc/examples/helloworld/helloworld"
)

var _ = grpc.NewClient
var _ = pb.NewGreeterClient
`,
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o777)
		if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := runPort(&out, []string{dir + "/..."}, false); err != nil {
		t.Fatalf("port: %v\n%s", err, out.String())
	}
	got, _ := os.ReadFile(filepath.Join(dir, "client", "main.go"))
	for _, want := range []string{`"github.com/rdmarpc/rdmarpc/grpc"`, `pb "google.golang.org/grpc/examples/helloworld/helloworld"`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("ported file lacks %s:\n%s", want, got)
		}
	}
}
