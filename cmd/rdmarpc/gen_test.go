package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rdmarpc/rdmarpc/codegen"
	"github.com/rdmarpc/rdmarpc/internal/compile"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// rdmarpcBinary builds the command once, so that tests see its real exit
// codes and output.
func rdmarpcBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rdmarpc-gen-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "rdmarpc")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building rdmarpc: %v", buildErr)
	}
	return binPath
}

// writeFiles creates files (path -> content) under a new directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runGenIn runs rdmarpc gen in dir and returns its stderr and exit code.
func runGenIn(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(rdmarpcBinary(t), append([]string{"gen"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stderr.String(), 0
	case errors.As(err, &exit):
		return stderr.String(), exit.ExitCode()
	}
	t.Fatal(err)
	return "", 0
}

// pbFiles lists the generated files under dir.
func pbFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".pb.go") {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

const okProto = `syntax = "proto3";
package demo.v1;
import "google/protobuf/timestamp.proto";
option go_package = "example.com/demo/demopb";
service Clock {
  rpc Now(NowRequest) returns (google.protobuf.Timestamp);
  rpc Ticks(NowRequest) returns (stream google.protobuf.Timestamp);
  rpc Sync(stream google.protobuf.Timestamp) returns (stream google.protobuf.Timestamp);
}
message NowRequest {}
`

func TestGenWritesMessagesAndStubs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{
			name: "out and opt",
			args: []string{"-I", "proto", "--out", "gen", "--opt", "paths=source_relative", "proto/demo/v1/demo.proto"},
			want: []string{"gen/demo/v1/demo.pb.go", "gen/demo/v1/demo_rdmarpc.pb.go"},
		},
		{
			name: "protoc spelling, import paths",
			args: []string{"--proto_path=proto", "--go_out=gen", "--go-rdmarpc_out=gen", "proto/demo/v1/demo.proto"},
			want: []string{"gen/example.com/demo/demopb/demo.pb.go", "gen/example.com/demo/demopb/demo_rdmarpc.pb.go"},
		},
		{
			name: "options in out, module, name relative to the import path",
			args: []string{"-I", "proto", "--go_out=module=example.com/demo:gen", "--go-rdmarpc_out=gen",
				"--go-rdmarpc_opt=module=example.com/demo", "demo/v1/demo.proto"},
			want: []string{"gen/demopb/demo.pb.go", "gen/demopb/demo_rdmarpc.pb.go"},
		},
		{
			name: "stubs only",
			args: []string{"-I", "proto", "--go-rdmarpc_out=gen", "--go-rdmarpc_opt=paths=source_relative", "proto/demo/v1/demo.proto"},
			want: []string{"gen/demo/v1/demo_rdmarpc.pb.go"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"proto/demo/v1/demo.proto": okProto})
			stderr, code := runGenIn(t, dir, tc.args...)
			if code != 0 {
				t.Fatalf("exit code %d:\n%s", code, stderr)
			}
			got := pbFiles(t, dir)
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("wrote %q; want %q", got, tc.want)
			}
		})
	}
}

func TestGenBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		args  []string
		want  []string // lines or parts of lines of stderr
	}{
		{
			name: "syntax error",
			files: map[string]string{"protos/bad.proto": `syntax = "proto3";
package x;
option go_package = "example.com/x";
message A {
  string a = 1
}
`},
			args: []string{"-I", "protos", "--out", ".", "protos/bad.proto"},
			want: []string{"\nprotos/bad.proto:6:1: syntax error: expecting ';'\n"},
		},
		{
			name: "every error at once",
			files: map[string]string{
				"a.proto": "syntax = \"proto3\";\nmessage A { Nope n = 1; }\n",
				"b.proto": "syntax = \"proto3\";\nmessage B { int32 b = 1; int32 c = 1; }\n",
			},
			args: []string{"--out", ".", "a.proto", "b.proto"},
			want: []string{"\na.proto:2:13: field A.n: unknown type Nope\nb.proto:2:36: message B: fields b and c both have the same tag 1\n"},
		},
		{
			name: "missing import",
			files: map[string]string{"protos/imp.proto": `syntax = "proto3";
package x;
import "other/missing.proto";
option go_package = "example.com/x";
`},
			args: []string{"-I", "protos", "-I", "vendor", "--out", ".", "protos/imp.proto"},
			want: []string{`protos/imp.proto:3:8: import "other/missing.proto" not found in the import paths (-I) "protos", "vendor"`},
		},
		{
			name:  "input missing",
			files: map[string]string{},
			args:  []string{"--out", ".", "nothere.proto"},
			want:  []string{`nothere.proto: no such file, and not found in the import paths (-I) "."`},
		},
		{
			name:  "input outside the import paths",
			files: map[string]string{"a/x.proto": "syntax = \"proto3\";\n"},
			args:  []string{"-I", "b", "--out", ".", "a/x.proto"},
			want:  []string{`a/x.proto: not inside any import path (-I) "b"`, "-I a"},
		},
		{
			name: "no go_package",
			files: map[string]string{"api/v1/nopkg.proto": `syntax = "proto3";
package api.v1;
message A {}
`},
			args: []string{"--out", ".", "api/v1/nopkg.proto"},
			want: []string{
				"api/v1/nopkg.proto: no go_package option",
				"\toption go_package = \"example.com/yourmodule/api/v1\";\n",
				"Mapi/v1/nopkg.proto=IMPORT_PATH",
			},
		},
		{
			name:  "unknown stub option",
			files: map[string]string{"p.proto": okProto},
			args:  []string{"--out", ".", "--go-rdmarpc_opt=fast=yes", "p.proto"},
			want:  []string{`--go-rdmarpc_out: unknown option "fast"`},
		},
		{
			name:  "no output",
			files: map[string]string{"p.proto": okProto},
			args:  []string{"p.proto"},
			want:  []string{"nothing to generate; give --out DIR"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			stderr, code := runGenIn(t, dir, tc.args...)
			if code == 0 {
				t.Fatalf("exit code 0; want non-zero. stderr:\n%s", stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr:\n%s\nwant it to contain:\n%s", stderr, w)
				}
			}
			// All or nothing, as with protoc: no half-generated package.
			if files := pbFiles(t, dir); len(files) != 0 {
				t.Errorf("a failed run wrote %q", files)
			}
		})
	}
}

func TestGenWarnsAndSucceeds(t *testing.T) {
	dir := writeFiles(t, map[string]string{"w.proto": `syntax = "proto3";
package w;
import "google/protobuf/empty.proto";
option go_package = "example.com/w";
message A {}
`})
	stderr, code := runGenIn(t, dir, "--out", ".", "--opt", "paths=source_relative", "w.proto")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, stderr)
	}
	if want := `w.proto:3:1: warning: import "google/protobuf/empty.proto" not used` + "\n"; stderr != want {
		t.Errorf("stderr %q; want %q", stderr, want)
	}
	if files := pbFiles(t, dir); len(files) != 1 || files[0] != "w.pb.go" {
		t.Errorf("wrote %q; want w.pb.go only (no services, no stubs)", files)
	}
}

// TestGenOptRoutesOptions checks that --opt gives each generator only the
// options it takes: protoc-gen-go would refuse the stubs' own.
func TestGenOptRoutesOptions(t *testing.T) {
	dir := writeFiles(t, map[string]string{"proto/demo/v1/demo.proto": okProto})
	stderr, code := runGenIn(t, dir, "-I", "proto", "--out", "gen", "--opt", "paths=source_relative",
		"--opt", "require_unimplemented_servers=false", "--opt", "package_suffix=rdmarpc", "proto/demo/v1/demo.proto")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, stderr)
	}
	want := []string{"gen/demo/v1/demo.pb.go", "gen/demo/v1/demopbrdmarpc/demo_rdmarpc.pb.go"}
	if got := pbFiles(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("wrote %q; want %q", got, want)
	}
	stubs, err := os.ReadFile(filepath.Join(dir, "gen/demo/v1/demopbrdmarpc/demo_rdmarpc.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(stubs); !strings.Contains(s, "package demopbrdmarpc\n") || strings.Contains(s, "mustEmbedUnimplemented") {
		t.Errorf("the stubs ignored an --opt option: package_suffix or require_unimplemented_servers=false")
	}

	stderr, code = runGenIn(t, dir, "--out", "gen2", "--opt", "fast=yes", "proto/demo/v1/demo.proto")
	if want := `--opt fast=yes: neither protoc-gen-go nor protoc-gen-go-rdmarpc takes the option "fast"`; code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("exit code %d, stderr:\n%s\nwant a failure saying %s", code, stderr, want)
	}
}

func TestVersion(t *testing.T) {
	cmd := exec.Command(rdmarpcBinary(t), "--version")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "rdmarpc ") ||
		lines[1] != codegen.PluginName+" "+codegen.Version || !strings.HasPrefix(lines[2], "protoc-gen-go v1.") {
		t.Errorf("rdmarpc --version printed:\n%s", out)
	}
}

// TestGenEdition2024 says plainly what rdmarpc gen cannot compile yet.
func TestGenEdition2024(t *testing.T) {
	dir := writeFiles(t, map[string]string{"e.proto": `edition = "2024";
package e;
option go_package = "example.com/e";
message R { string a = 1; }
`})
	stderr, code := runGenIn(t, dir, "--out", ".", "e.proto")
	if want := "stops at edition 2023: generate newer editions with protoc 30 or later and protoc-gen-go-rdmarpc"; code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("exit code %d, stderr:\n%s\nwant a failure saying %s", code, stderr, want)
	}
}

// TestGenDescriptorSetIn generates from a FileDescriptorSet, as protoc
// --descriptor_set_in does, and says what is missing from an incomplete one.
func TestGenDescriptorSetIn(t *testing.T) {
	dir := writeFiles(t, map[string]string{"proto/demo/v1/demo.proto": okProto})
	req, err := compile.Request(t.Context(), compile.Config{
		ImportPaths: []string{filepath.Join(dir, "proto")},
		Files:       []string{filepath.Join(dir, "proto/demo/v1/demo.proto")},
	})
	if err != nil {
		t.Fatal(err)
	}
	writeSet := func(name string, files []*descriptorpb.FileDescriptorProto) {
		b, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: files})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	writeSet("full.binpb", req.ProtoFile)
	writeSet("partial.binpb", req.ProtoFile[len(req.ProtoFile)-1:]) // demo.proto without its import

	stderr, code := runGenIn(t, dir, "--descriptor_set_in=full.binpb", "--out", "gen", "--opt", "paths=source_relative", "demo/v1/demo.proto")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, stderr)
	}
	want := []string{"gen/demo/v1/demo.pb.go", "gen/demo/v1/demo_rdmarpc.pb.go"}
	if got := pbFiles(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("wrote %q; want %q", got, want)
	}

	for _, tc := range []struct{ set, file, want string }{
		{"partial.binpb", "demo/v1/demo.proto", `demo/v1/demo.proto: import "google/protobuf/timestamp.proto" is not in the descriptor sets (--descriptor_set_in) "partial.binpb"; build them with --include_imports`},
		{"full.binpb", "demo/v1/other.proto", `demo/v1/other.proto: not in the descriptor sets (--descriptor_set_in) "full.binpb"`},
		{"proto/demo/v1/demo.proto", "demo/v1/demo.proto", "proto/demo/v1/demo.proto: not a FileDescriptorSet"},
		{"full.binpb -I proto", "demo/v1/demo.proto", "--descriptor_set_in takes every file from the sets; -I would not be searched"},
	} {
		set, rest, _ := strings.Cut(tc.set, " ")
		args := append([]string{"--descriptor_set_in=" + set}, strings.Fields(rest)...)
		stderr, code := runGenIn(t, dir, append(args, "--out", "gen2", tc.file)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("--descriptor_set_in=%s %s: exit code %d, stderr:\n%s\nwant a failure saying %s", tc.set, tc.file, code, stderr, tc.want)
		}
	}
}

// TestGenDescriptorSetIn2024 generates an edition 2024 file that protoc 30 or
// buf compiled: rdmarpc gen cannot compile 2024 sources, but generates from
// their descriptors, as protoc-gen-go does.
func TestGenDescriptorSetIn2024(t *testing.T) {
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("e/v1/e.proto"),
		Package: proto.String("e.v1"),
		Syntax:  proto.String("editions"),
		Edition: descriptorpb.Edition_EDITION_2024.Enum(),
		Options: &descriptorpb.FileOptions{GoPackage: proto.String("example.com/e/v1;epb")},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("R"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("a"), JsonName: proto.String("a"), Number: proto.Int32(1),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
				Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
			}},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("S"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("M"), InputType: proto.String(".e.v1.R"), OutputType: proto.String(".e.v1.R"),
				ClientStreaming: proto.Bool(true), ServerStreaming: proto.Bool(true),
			}},
		}},
	}
	dir := t.TempDir()
	b, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{file}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "e.binpb"), b, 0o666); err != nil {
		t.Fatal(err)
	}
	stderr, code := runGenIn(t, dir, "--descriptor_set_in=e.binpb", "--out", ".", "--opt", "paths=source_relative", "e/v1/e.proto")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, stderr)
	}
	want := []string{"e/v1/e.pb.go", "e/v1/e_rdmarpc.pb.go"}
	if got := pbFiles(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("wrote %q; want %q", got, want)
	}
}

// TestModuleVersion: a build without a module version says which commit it
// was built from, as its VCS stamp records, instead of a bare "(devel)".
func TestModuleVersion(t *testing.T) {
	stamp := []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "8d61a1d31d92d20b045ae30c6dda54c3759768d0"},
		{Key: "vcs.time", Value: "2026-12-02T13:37:48Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	for _, tc := range []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"v0.3.0", stamp, "v0.3.0"},
		{"v0.0.0-20261202133748-8d61a1d31d92+dirty", stamp, "v0.0.0-20261202133748-8d61a1d31d92+dirty"},
		{"(devel)", stamp, "(devel) 8d61a1d31d92+dirty 2026-12-02T13:37:48Z"},
		{"v0.0.0-00010101000000-000000000000", stamp[:3], "(devel) 8d61a1d31d92 2026-12-02T13:37:48Z"},
		{"(devel)", nil, "(devel, no version or VCS stamp)"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/rdmarpc/rdmarpc", Version: tc.version}, Settings: tc.settings}
		if got := moduleVersion(bi); got != tc.want {
			t.Errorf("version %q with %d settings: %q, want %q", tc.version, len(tc.settings), got, tc.want)
		}
	}
}
