package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/metadata"
)

// recordingStream is a ClientStream and a ServerStream that records the
// calls made on it and fails the ones named in fail.
type recordingStream struct {
	ops  []string
	fail string
}

func (s *recordingStream) op(name string) error {
	s.ops = append(s.ops, name)
	if s.fail == name {
		return errors.New(name + " failed")
	}
	return nil
}

func (s *recordingStream) Header() (metadata.MD, error) { return nil, s.op("Header") }
func (s *recordingStream) Trailer() metadata.MD         { return nil }
func (s *recordingStream) CloseSend() error             { return s.op("CloseSend") }
func (s *recordingStream) Context() context.Context     { return context.Background() }
func (s *recordingStream) SendMsg(any) error            { return s.op("SendMsg") }
func (s *recordingStream) RecvMsg(any) error            { return s.op("RecvMsg") }
func (s *recordingStream) SetHeader(metadata.MD) error  { return s.op("SetHeader") }
func (s *recordingStream) SendHeader(metadata.MD) error { return s.op("SendHeader") }
func (s *recordingStream) SetTrailer(metadata.MD)       {}
func (s *recordingStream) String() string               { return strings.Join(s.ops, " ") }
func (s *recordingStream) reset(fail string) *recordingStream {
	s.ops, s.fail = nil, fail
	return s
}

func TestGenericStreams(t *testing.T) {
	s := &recordingStream{}
	c := &GenericClientStream[int, string]{ClientStream: s}
	if m, err := c.CloseAndRecv(); err != nil || m == nil || s.String() != "CloseSend RecvMsg" {
		t.Errorf("CloseAndRecv: %v, %v after %q; want CloseSend then RecvMsg", m, err, s)
	}
	if m, err := c.CloseAndRecv(); err != nil || m == nil {
		t.Errorf("CloseAndRecv: %v, %v", m, err)
	}
	s.reset("CloseSend")
	if m, err := c.CloseAndRecv(); err == nil || m != nil || s.String() != "CloseSend" {
		t.Errorf("CloseAndRecv after a failed CloseSend: %v, %v after %q; want the error and no RecvMsg", m, err, s)
	}
	s.reset("RecvMsg")
	if m, err := c.Recv(); err == nil || m != nil {
		t.Errorf("Recv: %v, %v; want RecvMsg's error and no message", m, err)
	}
	s.reset("")
	if err := c.Send(new(int)); err != nil || s.String() != "SendMsg" {
		t.Errorf("Send: %v after %q", err, s)
	}

	srv := &GenericServerStream[int, string]{ServerStream: s.reset("")}
	if err := srv.SendAndClose(new(string)); err != nil || s.String() != "SendMsg" {
		t.Errorf("SendAndClose: %v after %q; want one SendMsg", err, s)
	}
	s.reset("RecvMsg")
	if m, err := srv.Recv(); err == nil || m != nil {
		t.Errorf("Recv: %v, %v; want RecvMsg's error and no message", m, err)
	}
}

// TestStreamAPIIsGRPCs compares the declarations of the stream API with
// gRPC-go's, read from its module's source: every type, and every method of
// those types, must be declared alike, parameter names and comments aside,
// with grpc's metadata.MD as ours.
func TestStreamAPIIsGRPCs(t *testing.T) {
	const mod = "google.golang.org/grpc@v1.85.0"
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	var info struct{ Dir string }
	if err != nil || json.Unmarshal(out, &info) != nil || info.Dir == "" {
		t.Skipf("%s is neither in the module cache nor downloadable (%v): the stream API is not compared with it", mod, err)
	}
	grpcDecls := declarations(t, info.Dir, "grpc")
	ourDecls := declarations(t, ".", "rpc")
	for _, name := range []string{
		"StreamHandler", "StreamDesc", "ClientStream", "ServerStream",
		"ServerStreamingClient", "ServerStreamingServer", "ClientStreamingClient", "ClientStreamingServer",
		"BidiStreamingClient", "BidiStreamingServer", "GenericClientStream", "GenericServerStream",
		"StreamServerInterceptor", "StreamClientInterceptor", "StreamServerInfo", "Streamer",
		"ServiceDesc", "ClientConnInterface",
		"GenericClientStream.Send", "GenericClientStream.Recv", "GenericClientStream.CloseAndRecv",
		"GenericServerStream.Send", "GenericServerStream.SendAndClose", "GenericServerStream.Recv",
		"ClientConn.NewStream",
	} {
		want, ok := grpcDecls[name]
		if !ok {
			t.Errorf("gRPC-go declares no %s", name)
			continue
		}
		if got := ourDecls[name]; got != want {
			t.Errorf("%s:\n  ours:    %s\n  gRPC-go: %s", name, got, want)
		}
	}
}

// declarations parses package pkg in dir and returns its exported types and
// methods of exported types, each normalized to one line: no comments, no
// parameter or receiver names, interface methods sorted.
func declarations(t *testing.T, dir, pkg string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name == pkg {
			files = append(files, f)
		}
	}
	str := func(n any) string {
		var b bytes.Buffer
		if err := format.Node(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(strings.Join(strings.Fields(b.String()), " "), "interface{}", "any")
	}
	out := make(map[string]string)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ft, ok := n.(*ast.FuncType); ok {
				unname(ft.Params)
				unname(ft.Results)
			}
			return true
		})
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					if it, ok := ts.Type.(*ast.InterfaceType); ok {
						key := func(f *ast.Field) string {
							if len(f.Names) > 0 {
								return f.Names[0].Name
							}
							return str(f.Type)
						}
						slices.SortFunc(it.Methods.List, func(a, b *ast.Field) int { return strings.Compare(key(a), key(b)) })
					}
					out[ts.Name.Name] = "type " + str(ts)
				}
			case *ast.FuncDecl:
				if d.Recv == nil || !d.Name.IsExported() {
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if ix, ok := recv.(*ast.IndexListExpr); ok {
					recv = ix.X
				}
				id, ok := recv.(*ast.Ident)
				if !ok {
					continue
				}
				d.Recv.List[0].Names, d.Body, d.Doc = nil, nil, nil
				out[id.Name+"."+d.Name.Name] = str(d)
			}
		}
	}
	return out
}

// unname drops the names of a parameter list, keeping one entry per
// parameter.
func unname(fl *ast.FieldList) {
	if fl == nil {
		return
	}
	var list []*ast.Field
	for _, f := range fl.List {
		for range max(1, len(f.Names)) {
			list = append(list, &ast.Field{Type: f.Type})
		}
	}
	fl.List = list
}
