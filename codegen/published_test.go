package codegen_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/rdmarpc/rdmarpc/codegen"
	"github.com/rdmarpc/rdmarpc/internal/compile"
)

// Published .proto files, used as published: the ones gRPC-go's modules
// (the library and its examples) and etcd's API module ship as source, and
// the ones gRPC-go ships compiled only (health, reflection v1, the interop
// test service), read back from its packages' descriptors. None is copied
// into this repository: the tests take them from the Go module cache (or the
// module proxy) at the versions pinned here, and skip when a module cannot
// be had.

const grpcModule, grpcModuleVersion = "google.golang.org/grpc", "v1.85.0"

// moduleDirs caches moduleDir's answers, by module@version.
var moduleDirs sync.Map

type moduleDirResult struct{ dir, err string }

// moduleDir returns the directory of a module's source, downloading it when
// it is not in the module cache; it skips the test when it cannot.
func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	v, ok := moduleDirs.Load(modVersion)
	if !ok {
		cmd := exec.Command("go", "mod", "download", "-json", modVersion)
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		out, err := cmd.Output()
		var info struct{ Dir, Error string }
		var r moduleDirResult
		if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Dir == "" {
			r.err = strings.TrimSpace(string(out) + " " + info.Error)
			if err != nil {
				r.err += " " + err.Error()
			}
		}
		r.dir = info.Dir
		v, _ = moduleDirs.LoadOrStore(modVersion, r)
	}
	r := v.(moduleDirResult)
	if r.dir == "" {
		t.Skipf("%s is neither in the module cache nor downloadable, so its .proto files are not tried: %s", modVersion, r.err)
	}
	return r.dir
}

func grpcModuleDir(t *testing.T) string { return moduleDir(t, grpcModule+"@"+grpcModuleVersion) }

// grpcExamples is gRPC-go's examples module, pinned: route_guide is the
// canonical streaming service.
const grpcExamples = "google.golang.org/grpc/examples@v0.0.0-20260825154716-030ee8becb20"

// publishedSources are .proto files that gRPC-go ships as source, with
// services, most with streaming methods, relative to their module's root.
var publishedSources = []struct{ module, file string }{
	{grpcModule + "@" + grpcModuleVersion, "reflection/grpc_testing/test.proto"},                 // bidi streaming
	{grpcModule + "@" + grpcModuleVersion, "interop/stress/grpc_testing/metrics.proto"},          // server streaming
	{grpcModule + "@" + grpcModuleVersion, "profiling/proto/service.proto"},                      // unary, long comments
	{grpcModule + "@" + grpcModuleVersion, "testdata/grpc_testing_not_regenerated/testv3.proto"}, // bidi, nested messages
	{grpcExamples, "route_guide/routeguide/route_guide.proto"},                                   // every kind
	{grpcExamples, "features/proto/echo/echo.proto"},                                             // every kind
	{grpcExamples, "helloworld/helloworld/helloworld.proto"},
}

// TestPublishedSources generates gRPC-go's shipped .proto files, unmodified,
// with rdmarpc gen's pipeline: the same bytes as protoc with the plugins (when
// protoc is installed), the same API as protoc-gen-go-grpc (when it can be
// had), and code that builds and vets.
func TestPublishedSources(t *testing.T) {
	mod := newTempModule(t)
	built := false
	for _, src := range publishedSources {
		file := src.file
		t.Run(file, func(t *testing.T) {
			dir := moduleDir(t, src.module)
			a := genArgs{
				importPaths: []string{dir},
				files:       []string{filepath.Join(dir, file)},
				outs: map[string]*compile.Output{
					"go":         {Plugin: compile.Go, Dir: mod.dir, Params: []string{"paths=source_relative"}},
					"go-rdmarpc": {Plugin: compile.Rdmarpc, Dir: mod.dir, Params: []string{"paths=source_relative"}},
				},
			}
			files := a.generate(t)
			if len(files) != 2 {
				t.Fatalf("generated %d files; want the messages and the stubs", len(files))
			}
			if err := compile.Write(files); err != nil {
				t.Fatal(err)
			}
			built = true
			t.Run("same as protoc", func(t *testing.T) {
				checkProtocRoute(t, newProtocRoute(t), a, files)
			})
			t.Run("same API as protoc-gen-go-grpc", func(t *testing.T) {
				grpcGen(t)
				checkSameAPI(t, requestFor(t, a))
			})
		})
	}
	if built {
		mod.build(t, "./...")
	}
}

// checkProtocRoute runs protoc as a asks and compares what it writes with
// files, but for the line naming protoc's version.
func checkProtocRoute(t *testing.T, r protocRoute, a genArgs, files []compile.File) {
	t.Helper()
	if !r.editions && len(a.descSets) == 0 && usesEditions(t, a.files) {
		t.Skip("this protoc predates editions (protoc 27)")
	}
	out := t.TempDir()
	var args []string
	for _, ip := range a.importPaths {
		args = append(args, "-I", ip)
	}
	if len(a.descSets) > 0 {
		args = append(args, "--descriptor_set_in="+strings.Join(a.descSets, string(filepath.ListSeparator)))
	}
	for _, name := range []string{"go", "go-rdmarpc"} {
		args = append(args, "--"+name+"_out="+out)
		for _, p := range a.outs[name].Params {
			args = append(args, "--"+name+"_opt="+p)
		}
	}
	args = append(args, a.files...)
	if stderr, err := r.run(args...); err != nil {
		t.Fatalf("protoc %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	for _, f := range files {
		rel, err := filepath.Rel(a.outs["go"].Dir, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			t.Errorf("protoc did not write %s: %v", rel, err)
			continue
		}
		if d := lineDiff("protoc", got, "rdmarpc gen", f.Content, sameButVersion); d != "" {
			t.Errorf("%s: protoc's and rdmarpc gen's outputs differ:\n%s", rel, d)
		}
	}
}

// tempModule is a Go module outside the repository that requires rdmarpc
// (replaced by this checkout) and gRPC-go, to build generated code in.
type tempModule struct {
	dir string
	env []string
}

func newTempModule(t *testing.T) tempModule {
	t.Helper()
	root := abs(t, "..")
	dir := t.TempDir()
	gomod := "module example.com/published\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/rdmarpc/rdmarpc v0.0.0\n\t" + grpcModule + " " + grpcModuleVersion + "\n)\n\n" +
		"replace github.com/rdmarpc/rdmarpc => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o666); err != nil {
		t.Fatal(err)
	}
	if sum, err := os.ReadFile(filepath.Join(root, "go.sum")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	// -mod=mod completes go.mod and go.sum from the module cache or the
	// proxy; the checksum database is not reachable from every machine, and
	// this module is thrown away.
	// A second registration of a .proto file panics, whatever the
	// environment says.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOLANG_PROTOBUF_REGISTRATION_CONFLICT=panic")
	return tempModule{dir: dir, env: env}
}

// build runs go vet (which type-checks everything, tests included) and go
// build on pkgs.
func (m tempModule) build(t *testing.T, pkgs ...string) {
	t.Helper()
	for _, verb := range []string{"vet", "build"} {
		cmd := exec.Command("go", append([]string{verb}, pkgs...)...)
		cmd.Dir, cmd.Env = m.dir, m.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s %s in the generated module: %v\n%s", verb, strings.Join(pkgs, " "), err, out)
		}
	}
}

// run runs go run pkg in the module and returns its output.
func (m tempModule) run(t *testing.T, pkg string) []byte {
	t.Helper()
	out, stderr, err := m.tryRun(pkg)
	if err != nil {
		t.Fatalf("go run %s: %v\n%s%s", pkg, err, out, stderr)
	}
	return out
}

// tryRun runs go run pkg in the module.
func (m tempModule) tryRun(pkg string) (stdout []byte, stderr string, err error) {
	cmd := exec.Command("go", "run", pkg)
	cmd.Dir, cmd.Env = m.dir, m.env
	var e bytes.Buffer
	cmd.Stderr = &e
	out, err := cmd.Output()
	return out, e.String(), err
}

func (m tempModule) write(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(m.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
		t.Fatal(err)
	}
}

// The files gRPC-go ships compiled only, read back from its packages.
const (
	healthProto     = "grpc/health/v1/health.proto"
	reflectionProto = "grpc/reflection/v1/reflection.proto"
	interopProto    = "grpc/testing/test.proto"
)

// dumpProgram prints the descriptors of gRPC-go's health, reflection and
// interop test packages, with everything they import, as a
// FileDescriptorSet, imports first.
const dumpProgram = `package main

import (
	"os"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(healthpb.File_grpc_health_v1_health_proto)
	add(reflectionpb.File_grpc_reflection_v1_reflection_proto)
	add(testpb.File_grpc_testing_test_proto)
	b, err := proto.Marshal(set)
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(b)
}
`

// publishedDescriptors returns gRPC-go's compiled-only files as a
// FileDescriptorSet, by running dumpProgram in mod.
func publishedDescriptors(t *testing.T, mod tempModule) *descriptorpb.FileDescriptorSet {
	t.Helper()
	grpcModuleDir(t) // skips when gRPC-go cannot be had
	mod.write(t, "dump/main.go", dumpProgram)
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(mod.run(t, "./dump"), &set); err != nil {
		t.Fatal(err)
	}
	return &set
}

// descriptorRequest is what protoc --descriptor_set_in sends a plugin for
// file: no source, so no comments.
func descriptorRequest(set *descriptorpb.FileDescriptorSet, param string, files ...string) *pluginpb.CodeGeneratorRequest {
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: files, ProtoFile: set.File}
	if param != "" {
		req.Parameter = proto.String(param)
	}
	return req
}

// TestPublishedDescriptors generates stubs for health, reflection v1 and the
// interop test service from the descriptors gRPC-go compiled them to: the
// same API as protoc-gen-go-grpc's (when it can be had), and code that builds
// next to freshly generated messages.
func TestPublishedDescriptors(t *testing.T) {
	mod := newTempModule(t)
	set := publishedDescriptors(t, mod)
	// grpc/testing/*.proto have no go_package: gRPC-go maps them, as its
	// users must.
	interopMap := "Mgrpc/testing/test.proto=google.golang.org/grpc/interop/grpc_testing," +
		"Mgrpc/testing/messages.proto=google.golang.org/grpc/interop/grpc_testing," +
		"Mgrpc/testing/empty.proto=google.golang.org/grpc/interop/grpc_testing"
	for _, file := range []string{healthProto, reflectionProto, interopProto} {
		t.Run(file, func(t *testing.T) {
			t.Run("same API as protoc-gen-go-grpc", func(t *testing.T) {
				grpcGen(t)
				checkSameAPI(t, descriptorRequest(set, interopMap, file))
			})
		})
	}
	// Messages and stubs, regenerated under this module's own import paths
	// (the interop file imports its messages by their Go import path), by
	// rdmarpc gen --descriptor_set_in and by protoc alike.
	setFile := filepath.Join(t.TempDir(), "grpc.binpb")
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(setFile, b, 0o666); err != nil {
		t.Fatal(err)
	}
	var params []string
	for _, f := range set.File {
		if !strings.HasPrefix(f.GetName(), "google/protobuf/") {
			dir := filepath.ToSlash(filepath.Dir(f.GetName()))
			params = append(params, "M"+f.GetName()+"=example.com/published/"+dir)
		}
	}
	params = append(params, "paths=source_relative")
	a := genArgs{
		descSets: []string{setFile},
		files:    []string{healthProto, reflectionProto, interopProto, "grpc/testing/messages.proto", "grpc/testing/empty.proto"},
		outs: map[string]*compile.Output{
			"go":         {Plugin: compile.Go, Dir: mod.dir, Params: params},
			"go-rdmarpc": {Plugin: compile.Rdmarpc, Dir: mod.dir, Params: params},
		},
	}
	files := a.generate(t)
	if err := compile.Write(files); err != nil {
		t.Fatal(err)
	}
	t.Run("same as protoc", func(t *testing.T) {
		checkProtocRoute(t, newProtocRoute(t), a, files)
	})
	mod.build(t, "./grpc/...")
}

// healthProgram serves grpc.health.v1.Health through stubs generated with
// package_suffix into their own package, with the messages of gRPC-go's
// grpc_health_v1, which the binary links (and registers) too.
const healthProgram = `package main

import (
	"context"
	"fmt"
	"os"

	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"

	"example.com/published/grpc/health/v1/grpc_health_v1rdmarpc"
)

type health struct {
	grpc_health_v1rdmarpc.UnimplementedHealthServer
}

func (health) Check(_ context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if in.GetService() != "" {
		return nil, status.Error(codes.NotFound, "unknown service")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func main() {
	_ = grpchealth.NewServer() // gRPC-go's own health server links too
	lis, err := transport.Listen("tcp://127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s := rpc.NewServer()
	grpc_health_v1rdmarpc.RegisterHealthServer(s, health{})
	go s.Serve(lis)
	defer s.Stop()
	cc, err := rpc.Dial(context.Background(), "tcp://"+lis.Addr().String())
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	c := grpc_health_v1rdmarpc.NewHealthClient(cc)
	resp, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, err = c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"})
	var w grpc_health_v1rdmarpc.Health_WatchClient
	w, werr := c.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if werr == nil {
		_, werr = w.Recv() // the embedded UnimplementedHealthServer answers
	}
	fmt.Println(resp.GetStatus(), status.Code(err), status.Code(werr))
}
`

// TestPackageSuffixReusesPublishedMessages generates stubs for health.proto
// into a package of their own against gRPC-go's grpc_health_v1, and runs a
// binary that links both and calls the service: a regenerated copy of the
// messages would panic at startup, "already registered".
func TestPackageSuffixReusesPublishedMessages(t *testing.T) {
	mod := newTempModule(t)
	set := publishedDescriptors(t, mod)
	resp := codegen.Run(descriptorRequest(set, "paths=source_relative,package_suffix=rdmarpc", healthProto))
	if resp.Error != nil {
		t.Fatal(resp.GetError())
	}
	if len(resp.File) != 1 || resp.File[0].GetName() != "grpc/health/v1/grpc_health_v1rdmarpc/health_rdmarpc.pb.go" {
		t.Fatalf("generated %v; want grpc/health/v1/grpc_health_v1rdmarpc/health_rdmarpc.pb.go", resp.File)
	}
	content := resp.File[0].GetContent()
	for _, want := range []string{
		"package grpc_health_v1rdmarpc\n",
		`grpc_health_v1 "google.golang.org/grpc/health/grpc_health_v1"`,
		"Check(ctx context.Context, in *grpc_health_v1.HealthCheckRequest, opts ...rpc.CallOption) (*grpc_health_v1.HealthCheckResponse, error)",
		"type Health_WatchClient = rpc.ServerStreamingClient[grpc_health_v1.HealthCheckResponse]",
		"(struct{ grpc_health_v1rdmarpc.UnimplementedHealthServer; ... })",
	} {
		if !strings.Contains(content, want) {
			t.Errorf("the stubs lack %q", want)
		}
	}
	mod.write(t, resp.File[0].GetName(), content)
	mod.write(t, "healthcheck/main.go", healthProgram)
	mod.build(t, "./grpc/...", "./healthcheck")
	if got, want := strings.TrimSpace(string(mod.run(t, "./healthcheck"))), "SERVING NotFound Unimplemented"; got != want {
		t.Errorf("the health check printed %q; want %q", got, want)
	}

	// The control: messages regenerated next to the stubs, in a binary that
	// also links grpc_health_v1, panic at startup.
	setFile := filepath.Join(t.TempDir(), "grpc.binpb")
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(setFile, b, 0o666); err != nil {
		t.Fatal(err)
	}
	req, err := compile.Request(t.Context(), compile.Config{DescriptorSets: []string{setFile}, Files: []string{healthProto}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := compile.Generate(req, []compile.Output{{
		Plugin: compile.Go, Dir: mod.dir,
		Params: []string{"paths=source_relative", "M" + healthProto + "=example.com/published/regen/grpc/health/v1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(mod.dir, f.Path)
		mod.write(t, filepath.ToSlash(filepath.Join("regen", rel)), string(f.Content))
	}
	mod.write(t, "conflict/main.go", `package main

import (
	_ "example.com/published/regen/grpc/health/v1"
	_ "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {}
`)
	_, stderr, err := mod.tryRun("./conflict")
	if err == nil || !strings.Contains(stderr, "already registered") {
		t.Errorf("a binary with two copies of %s ran: %v\n%s\nwant a registration panic", healthProto, err, stderr)
	}
}

// TestGRPCExampleCodeCompiles ports gRPC-go's route_guide server and client
// to rdmarpc as a user would, changing imports and nothing else, against
// stubs generated from its route_guide.proto: the code that implements and
// calls every kind of streaming method compiles and vets. Their main
// functions are left out: they set up gRPC-go's TLS credentials, which
// rdmarpc configures otherwise.
func TestGRPCExampleCodeCompiles(t *testing.T) {
	dir := moduleDir(t, grpcExamples)
	mod := newTempModule(t)
	a := genArgs{
		importPaths: []string{dir},
		files:       []string{filepath.Join(dir, "route_guide/routeguide/route_guide.proto")},
		outs: map[string]*compile.Output{
			"go":         {Plugin: compile.Go, Dir: mod.dir, Params: []string{"paths=source_relative"}},
			"go-rdmarpc": {Plugin: compile.Rdmarpc, Dir: mod.dir, Params: []string{"paths=source_relative"}},
		},
	}
	if err := compile.Write(a.generate(t)); err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{
		"google.golang.org/grpc":                                 "github.com/rdmarpc/rdmarpc/rpc",
		"google.golang.org/grpc/codes":                           "github.com/rdmarpc/rdmarpc/codes",
		"google.golang.org/grpc/status":                          "github.com/rdmarpc/rdmarpc/status",
		"google.golang.org/grpc/metadata":                        "github.com/rdmarpc/rdmarpc/metadata",
		"google.golang.org/grpc/examples/route_guide/routeguide": "example.com/published/route_guide/routeguide",
	}
	for _, prog := range []string{"server", "client"} {
		src, err := os.ReadFile(filepath.Join(dir, "route_guide", prog, prog+".go"))
		if err != nil {
			t.Fatal(err)
		}
		mod.write(t, "route_guide/"+prog+"/"+prog+".go", portGRPCCode(t, src, prog, imports))
	}
	mod.build(t, "./route_guide/...")
}

// portGRPCCode rewrites the imports of a gRPC-go program by imports (keeping
// the names the code uses them by), drops its main function and the imports
// only main used, and renames its package to pkg.
func portGRPCCode(t *testing.T, src []byte, pkg string, imports map[string]string) string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "prog.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Name.Name = pkg
	f.Decls = slices.DeleteFunc(f.Decls, func(d ast.Decl) bool {
		fd, ok := d.(*ast.FuncDecl)
		return ok && fd.Recv == nil && fd.Name.Name == "main"
	})
	used := make(map[string]bool)
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.IMPORT {
			continue
		}
		gd.Specs = slices.DeleteFunc(gd.Specs, func(s ast.Spec) bool {
			is := s.(*ast.ImportSpec)
			p, _ := strconv.Unquote(is.Path.Value)
			name := path.Base(p)
			if is.Name != nil {
				name = is.Name.Name
			}
			if !used[name] {
				return true
			}
			if to, ok := imports[p]; ok {
				is.Path.Value = strconv.Quote(to)
				if is.Name == nil && path.Base(to) != name {
					is.Name = ast.NewIdent(name)
				}
			} else if strings.HasPrefix(p, "google.golang.org/grpc") {
				t.Fatalf("the program uses %s, which has no rdmarpc counterpart here", p)
			}
			return false
		})
	}
	var b bytes.Buffer
	if err := format.Node(&b, fset, f); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// etcd's API, and the modules that ship what its rpc.proto imports: google/api
// (in grpc-gateway v1's third_party) and the OpenAPI options (grpc-gateway v2).
const (
	etcdAPI      = "go.etcd.io/etcd/api/v3@v3.7.3"
	gatewayV1    = "github.com/grpc-ecosystem/grpc-gateway@v1.16.0"
	gatewayV2    = "github.com/grpc-ecosystem/grpc-gateway/v2@v2.29.0"
	etcdRPCProto = "etcd/api/etcdserverpb/rpc.proto"
)

// TestEtcdRPC generates etcd's rpc.proto (KV, Watch, Lease with
// LeaseKeepAlive, Maintenance with Snapshot, ...) unmodified, with what it
// imports, laid out as etcd's own build lays it out: both routes write the
// same bytes, the stubs have protoc-gen-go-grpc's API, and everything builds.
func TestEtcdRPC(t *testing.T) {
	etcd, v1, v2 := moduleDir(t, etcdAPI), moduleDir(t, gatewayV1), moduleDir(t, gatewayV2)
	// etcd imports its files as etcd/api/...: a directory holding etcd/api.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etcd"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(etcd, filepath.Join(root, "etcd", "api")); err != nil {
		t.Fatal(err)
	}
	mod := newTempModule(t)
	files := []string{
		etcdRPCProto, "etcd/api/mvccpb/kv.proto", "etcd/api/authpb/auth.proto", "etcd/api/versionpb/version.proto",
	}
	deps := []string{
		"google/api/annotations.proto", "google/api/http.proto",
		"protoc-gen-openapiv2/options/annotations.proto", "protoc-gen-openapiv2/options/openapiv2.proto",
	}
	// Every file's messages regenerated under this module's import paths.
	params := []string{"paths=source_relative"}
	for _, f := range append(files, deps...) {
		params = append(params, "M"+f+"=example.com/published/"+path.Dir(f))
	}
	a := genArgs{
		importPaths: []string{root, filepath.Join(v1, "third_party", "googleapis"), v2},
		outs: map[string]*compile.Output{
			"go":         {Plugin: compile.Go, Dir: mod.dir, Params: params},
			"go-rdmarpc": {Plugin: compile.Rdmarpc, Dir: mod.dir, Params: params},
		},
	}
	a.files = append(append(a.files, files...), deps...) // names inside the import paths
	generated := a.generate(t)
	var stubs []string
	for _, f := range generated {
		if strings.HasSuffix(f.Path, codegen.FileSuffix) {
			stubs = append(stubs, filepath.ToSlash(strings.TrimPrefix(f.Path, mod.dir)))
		}
	}
	if want := "/etcd/api/etcdserverpb/rpc" + codegen.FileSuffix; len(stubs) != 1 || stubs[0] != want {
		t.Fatalf("stub files %q; want %s alone", stubs, want)
	}
	if err := compile.Write(generated); err != nil {
		t.Fatal(err)
	}
	t.Run("same as protoc", func(t *testing.T) {
		r := newProtocRoute(t)
		// protoc takes input files by their path on disk.
		b := a
		b.files = nil
		for _, f := range a.files {
			for _, ip := range a.importPaths {
				if _, err := os.Stat(filepath.Join(ip, f)); err == nil {
					b.files = append(b.files, filepath.Join(ip, f))
					break
				}
			}
		}
		checkProtocRoute(t, r, b, generated)
	})
	t.Run("same API as protoc-gen-go-grpc", func(t *testing.T) {
		grpcGen(t)
		req := requestFor(t, a)
		req.FileToGenerate = []string{etcdRPCProto}
		checkSameAPI(t, req)
	})
	mod.write(t, "etcdcheck/main.go", etcdProgram)
	mod.build(t, "./...")
}

// etcdProgram uses the stubs as etcd's clientv3 uses etcdserverpb's, every
// streaming kind through the names code written for gRPC-go uses. It is
// built, not run.
const etcdProgram = `package main

import (
	"context"

	"github.com/rdmarpc/rdmarpc/rpc"

	pb "example.com/published/etcd/api/etcdserverpb"
)

type watch struct{ pb.UnimplementedWatchServer }

func (watch) Watch(s pb.Watch_WatchServer) error {
	req, err := s.Recv()
	if err != nil {
		return err
	}
	return s.Send(&pb.WatchResponse{WatchId: req.GetCreateRequest().GetStartRevision()})
}

func clients(ctx context.Context, cc rpc.ClientConnInterface) (pb.Watch_WatchClient, pb.Lease_LeaseKeepAliveClient, pb.Maintenance_SnapshotClient, error) {
	w, err := pb.NewWatchClient(cc).Watch(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	keep, err := pb.NewLeaseClient(cc).LeaseKeepAlive(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	snap, err := pb.NewMaintenanceClient(cc).Snapshot(ctx, &pb.SnapshotRequest{})
	return w, keep, snap, err
}

func main() {
	s := rpc.NewServer()
	pb.RegisterWatchServer(s, watch{})
	pb.RegisterKVServer(s, pb.UnimplementedKVServer{})
	_ = clients
}
`
