package grpc_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// exported returns the exported top-level names declared in dir's non-test
// Go files.
func exported(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := make(map[string]bool)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return names
}

// TestEveryRPCName: whatever package rpc exports, package grpc exports
// under the same name, so a new rpc API reaches ported programs too. (Two
// names differ in kind on purpose: grpc.Dial has gRPC-go's signature, and
// grpc.Peer is gRPC-go's call option where rpc.Peer is peer.Peer.)
func TestEveryRPCName(t *testing.T) {
	ours := exported(t, ".")
	var missing []string
	for n := range exported(t, "../rpc") {
		if !ours[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("package grpc lacks rpc's %s: add them to grpc.go", strings.Join(missing, ", "))
	}
}

// TestNothingImportsGRPC: package grpc is the top of the library; a
// library package that imported it would pull every transport into rpc's
// users.
func TestNothingImportsGRPC(t *testing.T) {
	const self = `"github.com/rdmarpc/rdmarpc/grpc"`
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != ".." && (d.Name() == "grpc" && filepath.Dir(p) == ".." || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != ".." {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if imp.Path.Value == self {
				t.Errorf("%s imports package grpc", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
