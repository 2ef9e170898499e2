package codegen_test

import (
	"bytes"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/rdmarpc/rdmarpc/codegen"
	"github.com/rdmarpc/rdmarpc/internal/compile"
)

// grpcGenVersion is the protoc-gen-go-grpc whose output rdmarpc's stubs must
// match, API for API: the newest, generics and all.
const grpcGenVersion = "v1.6.2"

var (
	grpcGenOnce sync.Once
	grpcGenPath string
	grpcGenErr  string
	// grpcGenInstalled is grpcGenPath when the tests installed it.
	grpcGenInstalled string
)

// grpcGen finds protoc-gen-go-grpc at grpcGenVersion: on PATH, else
// installed from the module cache or proxy into a temporary directory.
// It skips the test when neither works.
func grpcGen(t *testing.T) string {
	t.Helper()
	grpcGenOnce.Do(func() {
		// Another version on PATH would make other stubs: take it only
		// when it is the pinned one.
		if p, err := exec.LookPath("protoc-gen-go-grpc"); err == nil {
			if out, err := exec.Command(p, "--version").Output(); err == nil &&
				strings.TrimSpace(string(out)) == "protoc-gen-go-grpc "+strings.TrimPrefix(grpcGenVersion, "v") {
				grpcGenPath = p
				return
			}
		}
		dir, err := os.MkdirTemp("", "protoc-gen-go-grpc")
		if err != nil {
			grpcGenErr = err.Error()
			return
		}
		cmd := exec.Command("go", "install", "google.golang.org/grpc/cmd/protoc-gen-go-grpc@"+grpcGenVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			grpcGenErr = err.Error() + "\n" + string(out)
			os.RemoveAll(dir)
			return
		}
		grpcGenPath = filepath.Join(dir, "protoc-gen-go-grpc")
		grpcGenInstalled = grpcGenPath
	})
	if grpcGenPath == "" {
		t.Skipf("protoc-gen-go-grpc is not on PATH and go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@%s failed, "+
			"so the stubs' API is not compared with gRPC-go's:\n%s", grpcGenVersion, grpcGenErr)
	}
	return grpcGenPath
}

// runGRPCGen runs protoc-gen-go-grpc on req and returns its files by name.
func runGRPCGen(t *testing.T, req *pluginpb.CodeGeneratorRequest) map[string]string {
	t.Helper()
	in, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(grpcGen(t))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("protoc-gen-go-grpc: %v\n%s", err, stderr.String())
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Error != nil {
		t.Fatalf("protoc-gen-go-grpc: %s", resp.GetError())
	}
	files := make(map[string]string)
	for _, f := range resp.File {
		files[f.GetName()] = f.GetContent()
	}
	return files
}

// checkSameAPI generates stubs for req with protoc-gen-go-grpc and with
// codegen, and fails unless every file of one has a counterpart in the
// other with the same API once the package grpc is read as rpc.
func checkSameAPI(t *testing.T, req *pluginpb.CodeGeneratorRequest) {
	t.Helper()
	want := runGRPCGen(t, req)
	resp := codegen.Run(req)
	if resp.Error != nil {
		t.Fatalf("%s: %s", codegen.PluginName, resp.GetError())
	}
	got := make(map[string]string)
	for _, f := range resp.File {
		got[strings.TrimSuffix(f.GetName(), codegen.FileSuffix)] = f.GetContent()
	}
	if len(want) == 0 {
		t.Fatal("protoc-gen-go-grpc generated nothing: the request has no services")
	}
	for name, grpcSrc := range want {
		base := strings.TrimSuffix(name, "_grpc.pb.go")
		ourSrc, ok := got[base]
		if !ok {
			t.Errorf("protoc-gen-go-grpc wrote %s; %s wrote no %s%s", name, codegen.PluginName, base, codegen.FileSuffix)
			continue
		}
		delete(got, base)
		wantAPI, gotAPI := exportedAPI(t, name, grpcSrc, "grpc"), exportedAPI(t, base+codegen.FileSuffix, ourSrc, "rpc")
		for _, d := range wantAPI {
			if !slices.Contains(gotAPI, d) {
				t.Errorf("%s: gRPC-go's stubs declare\n\t%s\nwhich ours lack", base+codegen.FileSuffix, d)
			}
		}
		for _, d := range gotAPI {
			if !slices.Contains(wantAPI, d) {
				t.Errorf("%s: our stubs declare\n\t%s\nwhich gRPC-go's lack", base+codegen.FileSuffix, d)
			}
		}
	}
	for base := range got {
		t.Errorf("%s wrote %s%s; protoc-gen-go-grpc wrote no %s_grpc.pb.go", codegen.PluginName, base, codegen.FileSuffix, base)
	}
}

// exportedAPI lists what a generated file declares for its users, one line
// per declaration, without comments, with the package rpcPkg written as
// "rpc": exported constants and their values, types (an interface with all
// its methods, the unexported one that forces embedding included), aliases,
// functions (the _X_Y_Handler ones too) and exported methods of exported
// types, and the ServiceDesc variables with their whole value.
func exportedAPI(t *testing.T, name, src, rpcPkg string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// Read the rpc package's name as "rpc" wherever it qualifies a name.
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == rpcPkg {
				id.Name = "rpc"
			}
		}
		return true
	})
	str := func(n any) string {
		var b bytes.Buffer
		if err := format.Node(&b, fset, n); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// One line per declaration; interface{} and any are one type.
		s := strings.Join(strings.Fields(b.String()), " ")
		return strings.ReplaceAll(s, "interface{}", "any")
	}
	var api []string
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			// The handlers are unexported, but the service descriptor
			// names them, and their signatures are part of the contract
			// with the rpc package.
			if !d.Name.IsExported() && !(d.Recv == nil && strings.HasPrefix(d.Name.Name, "_")) {
				continue
			}
			if d.Recv != nil {
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); !ok || !id.IsExported() {
					continue
				}
				// Receiver names differ and mean nothing to callers.
				d.Recv.List[0].Names = nil
			}
			d.Body, d.Doc = nil, nil
			// Parameter names of exported functions are not API either
			// but the generators agree on them; keep them.
			api = append(api, str(d))
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						if st, ok := s.Type.(*ast.StructType); ok {
							// Only exported fields; generated structs have none.
							st.Fields.List = slices.DeleteFunc(st.Fields.List, func(f *ast.Field) bool {
								return len(f.Names) == 0 || !f.Names[0].IsExported()
							})
						}
						api = append(api, "type "+str(s))
					}
				case *ast.ValueSpec:
					for i, n := range s.Names {
						if !n.IsExported() {
							continue
						}
						line := d.Tok.String() + " " + n.Name
						if s.Type != nil {
							line += " " + str(s.Type)
						}
						if i < len(s.Values) {
							line += " = " + str(s.Values[i])
						}
						api = append(api, line)
					}
				}
			}
		}
	}
	slices.Sort(api)
	return api
}

// TestSameAPIAsGRPC compares our stubs with protoc-gen-go-grpc's for every
// golden .proto file and the echo example.
func TestSameAPIAsGRPC(t *testing.T) {
	grpcGen(t)
	for _, c := range genCases(t) {
		t.Run(filepath.ToSlash(c.dir), func(t *testing.T) {
			a := c.parse(t)
			req := requestFor(t, a)
			if len(runGRPCGen(t, req)) == 0 {
				t.Skip("no services")
			}
			checkSameAPI(t, req)
		})
	}
}

// requestFor is the request a go:generate line makes, with the stub
// generator's parameters.
func requestFor(t *testing.T, a genArgs) *pluginpb.CodeGeneratorRequest {
	t.Helper()
	req, err := compile.Request(t.Context(), compile.Config{ImportPaths: a.importPaths, DescriptorSets: a.descSets, Files: a.files})
	if err != nil {
		t.Fatal(err)
	}
	if p := a.outs["go-rdmarpc"].Params; len(p) > 0 {
		req.Parameter = proto.String(strings.Join(p, ","))
	}
	return req
}
