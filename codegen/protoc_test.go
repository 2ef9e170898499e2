package codegen_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// protocRoute finds protoc and builds both plugins, protoc-gen-go at the
// protobuf version in go.mod. It skips the test when protoc is missing.
type protocRoute struct {
	protoc   string
	plugins  []string // --plugin flags
	editions bool     // protoc compiles edition files (protoc 27 and later)
}

var (
	protocOnce  sync.Once
	protocR     protocRoute
	protocErr   string
	protocSkips bool // protoc is not installed
)

func newProtocRoute(t *testing.T) protocRoute {
	t.Helper()
	protocOnce.Do(func() {
		protoc, err := exec.LookPath("protoc")
		if err != nil {
			protocSkips = true
			return
		}
		// Built once for the whole test binary; TestMain removes them.
		bin, err := os.MkdirTemp("", "codegen-plugins")
		if err != nil {
			protocErr = err.Error()
			return
		}
		tempDirs = append(tempDirs, bin)
		var plugins []string
		for _, pkg := range []string{
			"google.golang.org/protobuf/cmd/protoc-gen-go",
			"github.com/rdmarpc/rdmarpc/cmd/protoc-gen-go-rdmarpc",
		} {
			exe := filepath.Join(bin, filepath.Base(pkg))
			out, err := exec.Command("go", "build", "-o", exe, pkg).CombinedOutput()
			if err != nil {
				protocErr = fmt.Sprintf("go build %s: %v\n%s", pkg, err, out)
				return
			}
			plugins = append(plugins, "--plugin="+filepath.Base(pkg)+"="+exe)
		}
		out, err := exec.Command(protoc, "--version").Output()
		if err != nil {
			protocErr = fmt.Sprintf("protoc --version: %v", err)
			return
		}
		protocR = protocRoute{protoc: protoc, plugins: plugins, editions: protocMajor(string(out)) >= 27}
	})
	if protocSkips {
		t.Skip("protoc is not on PATH, so rdmarpc gen is not compared with the protoc route; " +
			"install protoc (Debian: apt-get install protobuf-compiler) to run this check")
	}
	if protocErr != "" {
		t.Fatal(protocErr)
	}
	return protocR
}

// protocMajor reads the major version from protoc --version's "libprotoc
// 3.21.12" or "libprotoc 29.3"; 0 when it cannot.
func protocMajor(version string) int {
	f := strings.Fields(version)
	if len(f) == 0 {
		return 0
	}
	major, _, _ := strings.Cut(f[len(f)-1], ".")
	n, _ := strconv.Atoi(major)
	return n
}

// usesEditions says whether any of files declares an edition.
func usesEditions(t *testing.T, files []string) bool {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if editionRE.Match(b) {
			return true
		}
	}
	return false
}

var editionRE = regexp.MustCompile(`(?m)^edition\s*=`)

func (r protocRoute) run(args ...string) (stderr string, err error) {
	cmd := exec.Command(r.protoc, append(append([]string(nil), r.plugins...), args...)...)
	var buf bytes.Buffer
	cmd.Stderr = &buf
	err = cmd.Run()
	return buf.String(), err
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSameAsProtoc runs protoc with protoc-gen-go and protoc-gen-go-rdmarpc
// on every go:generate line and checks that rdmarpc gen writes the same
// files, byte for byte, but for the header line naming protoc's version.
func TestSameAsProtoc(t *testing.T) {
	r := newProtocRoute(t)
	root := abs(t, "..")
	for _, c := range genCases(t) {
		t.Run(filepath.ToSlash(c.dir), func(t *testing.T) {
			a := c.parse(t)
			if !r.editions && usesEditions(t, a.files) {
				t.Skip("this protoc predates editions (protoc 27); rdmarpc gen's output is checked by TestGolden only")
			}
			want := a.generate(t)

			// protoc writes under tmp what rdmarpc gen writes under root.
			tmp := t.TempDir()
			rebase := func(p string) string {
				rel, err := filepath.Rel(root, abs(t, p))
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Fatalf("%s is outside the repository", p)
				}
				return filepath.Join(tmp, rel)
			}
			var args []string
			for _, ip := range a.importPaths {
				args = append(args, "-I", abs(t, ip))
			}
			for _, name := range []string{"go", "go-rdmarpc"} {
				o := a.outs[name]
				dir := rebase(o.Dir)
				if err := os.MkdirAll(dir, 0o777); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--"+name+"_out="+dir)
				for _, p := range o.Params {
					args = append(args, "--"+name+"_opt="+p)
				}
			}
			for _, f := range a.files {
				args = append(args, abs(t, f))
			}
			if stderr, err := r.run(args...); err != nil {
				t.Fatalf("protoc %s: %v\n%s", strings.Join(args, " "), err, stderr)
			}

			seen := make(map[string]bool)
			for _, f := range want {
				p := rebase(f.Path)
				seen[p] = true
				got, err := os.ReadFile(p)
				if err != nil {
					t.Errorf("protoc did not write %s, which rdmarpc gen writes: %v", f.Path, err)
					continue
				}
				if d := lineDiff("protoc", got, "rdmarpc gen", f.Content, sameButVersion); d != "" {
					t.Errorf("%s: protoc's and rdmarpc gen's outputs differ:\n%s", f.Path, d)
				}
			}
			err := filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && !seen[p] {
					t.Errorf("protoc wrote %s, which rdmarpc gen does not", p)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// versionLines start the header lines naming protoc's version, the only
// lines allowed to differ: protoc-gen-go's, then protoc-gen-go-rdmarpc's.
var versionLines = []string{"// \tprotoc        ", "// - protoc                "}

// sameButVersion allows the version lines to differ.
func sameButVersion(x, y string) bool {
	for _, prefix := range versionLines {
		if strings.HasPrefix(x, prefix) && strings.HasPrefix(y, prefix) {
			return true
		}
	}
	return false
}

// TestProtocRouteErrors checks what a protoc user sees when generation fails.
func TestProtocRouteErrors(t *testing.T) {
	r := newProtocRoute(t)
	out := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{
			name: "package suffix not an identifier",
			args: []string{"-I", "../examples/echo/echopb", "--go-rdmarpc_out=" + out, "--go-rdmarpc_opt=package_suffix=-x",
				"../examples/echo/echopb/echo.proto"},
			want: `echo.proto: package_suffix=-x makes the package name "echopb-x", which is not a Go identifier`,
		},
		{
			name: "unknown option",
			args: []string{"-I", "../examples/echo/echopb", "--go-rdmarpc_out=" + out, "--go-rdmarpc_opt=paths=source_relative,bogus=1",
				"../examples/echo/echopb/echo.proto"},
			want: `unknown option "bogus"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, err := r.run(tc.args...)
			if err == nil {
				t.Fatal("protoc succeeded; want a failure")
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("protoc said:\n%s\nwant it to contain:\n%s", stderr, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("failed runs wrote %d files; want none", len(entries))
	}
}
