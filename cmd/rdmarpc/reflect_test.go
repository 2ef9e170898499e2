package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rdmarpc/rdmarpc/internal/loadgen"
	rpb "github.com/rdmarpc/rdmarpc/reflection/grpc_reflection_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// TestReflection runs list, describe, call and bench with no .proto file:
// the schema comes from the server's reflection service.
func TestReflection(t *testing.T) {
	target := startReflectingProbe(t)
	out, _, err := runCmd(t, newListCmd(), "", target)
	if want := "grpc.reflection.v1.ServerReflection\nprobe.v1.Probe\n"; err != nil || out != want {
		t.Fatalf("list %s: %q, %v; want %q", target, out, err, want)
	}
	out, _, err = runCmd(t, newListCmd(), "", target, "probe.v1.Probe")
	if want := "probe.v1.Probe.Echo\nprobe.v1.Probe.Fail\nprobe.v1.Probe.Block\nprobe.v1.Probe.Watch\nprobe.v1.Probe.Collect\nprobe.v1.Probe.Chat\n"; err != nil || out != want {
		t.Fatalf("list %s probe.v1.Probe: %q, %v; want %q", target, out, err, want)
	}
	out, _, err = runCmd(t, newDescribeCmd(), "", target, "probe.v1.Probe/Fail", "probe.v1.EchoRequest")
	// The probe's descriptors carry their .proto's comments (compiled in
	// process), so its reflection sends them, and describe prints them.
	for _, w := range []string{"// Fail answers with the code and message asked for, and a", "rpc Fail ( .probe.v1.FailRequest ) returns ( .probe.v1.EchoResponse );", "message EchoRequest {", "  .probe.v1.Color color = 3;"} {
		if err != nil || !strings.Contains(out, w+"\n") {
			t.Fatalf("describe: %v; no line %q in\n%s", err, w, out)
		}
	}
	if _, _, err := runCmd(t, newDescribeCmd(), "", target, "probe.v1.Nope"); err == nil || !strings.Contains(err.Error(), `"probe.v1.Nope" not found on the server`) {
		t.Fatalf("describe of an unknown symbol: %v", err)
	}

	out, stderr, err := runCmd(t, newCallCmd(), "", "-d", `{"text": "reflected", "count": 2}`, target, "probe.v1.Probe/Echo")
	if want := `{"text":"reflected","count":2}` + "\n"; err != nil || out != want {
		t.Fatalf("call: %q, %v (stderr %s); want %q", out, err, stderr, want)
	}
	// The details' types come from the reflected files too.
	_, stderr, err = runCmd(t, newCallCmd(), "", "-d", `{"code": 5, "message": "gone"}`, target, "probe.v1.Probe/Fail")
	if err == nil || !strings.Contains(stderr, `{"@type":"type.googleapis.com/probe.v1.Note","text":"a note"}`) {
		t.Fatalf("call of Fail: %v; stderr\n%s", err, stderr)
	}
	if _, _, err := runCmd(t, newCallCmd(), "", target, "probe.v1.Nope/Echo"); err == nil || !strings.Contains(err.Error(), `service "probe.v1.Nope" not found`) {
		t.Fatalf("call of an unknown service: %v", err)
	}

	out, stderr, err = runCmd(t, newBenchCmd(), "", "-n", "50", "-c", "2", "--connections", "2", "--json", "-d", `{"text": "x"}`, target, "probe.v1.Probe/Echo")
	if err != nil {
		t.Fatalf("bench: %v; stderr %s", err, stderr)
	}
	var s loadgen.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Calls != 50 || s.Codes["OK"] != 50 {
		t.Fatalf("bench: %+v; want 50 OK calls", s)
	}
}

func TestReflectionArgs(t *testing.T) {
	target := startReflectingProbe(t)
	for _, tc := range []struct {
		name    string
		args    []string
		errWant string
	}{
		{"no target", nil, "give the TARGET"},
		{"a service, no target", []string{"probe.v1.Probe"}, "give the TARGET"},
		{"a target with --proto", args(probeFlags, target), "drop the TARGET"},
		{"-I without --proto", []string{"-I", "testdata", target}, "none is given"},
		{"a server without reflection", []string{startProbe(t)}, "the server does not serve reflection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range []string{"list", "describe"} {
				c := newListCmd()
				if cmd == "describe" {
					c = newDescribeCmd()
				}
				if _, _, err := runCmd(t, c, "", tc.args...); err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Errorf("%s %v: %v; want %q in it", cmd, tc.args, err, tc.errWant)
				}
			}
		})
	}
}

// fakeReflection is a reflection stream that answers every request with
// its reply, and counts them.
type fakeReflection struct {
	rpc.ClientStream // nil: only SendMsg and RecvMsg are used
	reply            func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse
	last             *rpb.ServerReflectionRequest
	asked            int
}

// SendMsg and RecvMsg go through the wire form, as over a connection.
func (f *fakeReflection) SendMsg(m any) error {
	b, err := proto.Marshal(m.(proto.Message))
	if err != nil {
		return err
	}
	f.last = new(rpb.ServerReflectionRequest)
	f.asked++
	return proto.Unmarshal(b, f.last)
}

func (f *fakeReflection) RecvMsg(m any) error {
	b, err := proto.Marshal(f.reply(f.last))
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, m.(proto.Message))
}

func fakeReflectionSource(t testing.TB, reply func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse) (*reflectionSource, *fakeReflection) {
	f := &fakeReflection{reply: reply}
	fd, err := reflectionSchema()
	if err != nil {
		t.Fatal(err)
	}
	return newSourceOver(newReflectionStream(f, fd), func() {}), f
}

func filesResponse(fds ...*descriptorpb.FileDescriptorProto) *rpb.ServerReflectionResponse {
	var bs [][]byte
	for _, fd := range fds {
		b, _ := proto.Marshal(fd)
		bs = append(bs, b)
	}
	return &rpb.ServerReflectionResponse{MessageResponse: &rpb.ServerReflectionResponse_FileDescriptorResponse{
		FileDescriptorResponse: &rpb.FileDescriptorResponse{FileDescriptorProto: bs}}}
}

// TestReflectionHostileServer: a server that sends what does not link, or
// keeps answering with files that do not help, gets an error, not a loop
// or a crash.
func TestReflectionHostileServer(t *testing.T) {
	a := &descriptorpb.FileDescriptorProto{Name: proto.String("a.proto"), Package: proto.String("a"), Dependency: []string{"b.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M")}}}
	for _, tc := range []struct {
		name    string
		reply   func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse
		errWant string
	}{
		{"an import never sent", func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse { return filesResponse(a) }, "did not send the file asked for"},
		{"an import not found", func(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			if req.GetFileByFilename() != "" {
				return &rpb.ServerReflectionResponse{MessageResponse: &rpb.ServerReflectionResponse_ErrorResponse{ErrorResponse: &rpb.ErrorResponse{ErrorCode: 5, ErrorMessage: "no"}}}
			}
			return filesResponse(a)
		}, `file "b.proto" (imported): NotFound`},
		{"no file", func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			return &rpb.ServerReflectionResponse{}
		}, "answered with no file"},
		{"not a descriptor", func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			return &rpb.ServerReflectionResponse{MessageResponse: &rpb.ServerReflectionResponse_FileDescriptorResponse{
				FileDescriptorResponse: &rpb.FileDescriptorResponse{FileDescriptorProto: [][]byte{{0xff, 0xff}}}}}
		}, "does not decode"},
		{"a file that does not link", func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			return filesResponse(&descriptorpb.FileDescriptorProto{Name: proto.String("c.proto"), Package: proto.String("c"),
				MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M"), Field: []*descriptorpb.FieldDescriptorProto{{
					Name: proto.String("f"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(".nope.X"),
				}}}}})
		}, "do not form a valid set"},
		{"a relative reference", func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			return filesResponse(withField("M"))
		}, `refers to "M", which is not fully qualified`},
		// protodesc would resolve this name quadratically: seconds.
		{"a 1 MiB type name", func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			return filesResponse(withField("." + strings.Repeat("a.", 1<<19) + "X"))
		}, "the most taken is"},
		{"more bytes than taken", func() func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			n := 0
			return func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
				n++
				next := func(i int) string { return fmt.Sprintf("f%d.proto", i) }
				return filesResponse(&descriptorpb.FileDescriptorProto{Name: proto.String(next(n)), Dependency: []string{next(n + 1)},
					Options: &descriptorpb.FileOptions{GoPackage: proto.String(strings.Repeat("x", 1<<20))}})
			}
		}(), "more than 64 MiB of files"},
		{"a new file each time", func() func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			n := 0
			return func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
				n++
				next := func(i int) string { return fmt.Sprintf("f%d.proto", i) }
				return filesResponse(&descriptorpb.FileDescriptorProto{Name: proto.String(next(n)), Dependency: []string{next(n + 1)}})
			}
		}(), "more than 10000 files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, f := fakeReflectionSource(t, tc.reply)
			_, err := src.FindSymbol(t.Context(), "a.M")
			if err == nil || !strings.Contains(err.Error(), tc.errWant) {
				t.Fatalf("FindSymbol: %v; want %q in it", err, tc.errWant)
			}
			if f.asked > maxReflectedFiles+1 {
				t.Fatalf("asked %d times", f.asked)
			}
		})
	}
}

// withField is a file declaring c.M with a message field of typeName.
func withField(typeName string) *descriptorpb.FileDescriptorProto {
	return &descriptorpb.FileDescriptorProto{Name: proto.String("c.proto"), Package: proto.String("c"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M"), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("f"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(typeName),
		}}}}}
}

// TestReflectionLongSymbol: a symbol no server holds, such as a 1 MiB
// "a.a.a…" a hostile server lists as a service for describe to ask about,
// is refused before any lookup (one would cost quadratic time) and before
// asking the server.
func TestReflectionLongSymbol(t *testing.T) {
	src, f := fakeReflectionSource(t, func(*rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
		return &rpb.ServerReflectionResponse{MessageResponse: &rpb.ServerReflectionResponse_ErrorResponse{ErrorResponse: &rpb.ErrorResponse{ErrorCode: 5}}}
	})
	_, err := src.FindSymbol(t.Context(), strings.Repeat("a.", 1<<19)+"S")
	if err == nil || !strings.Contains(err.Error(), "the most taken is") || len(err.Error()) > 512 {
		t.Fatalf("FindSymbol of 1 MiB: %.512v; want the bounds named, briefly", err)
	}
	if f.asked != 0 {
		t.Fatalf("asked the server %d times", f.asked)
	}
}

// TestReflectionBuildsEachFileOnce: describing many services, each in a
// file of its own, builds each file once, not every file received so far
// for each service (quadratic in the files a server sends).
func TestReflectionBuildsEachFileOnce(t *testing.T) {
	const services = 300
	common := &descriptorpb.FileDescriptorProto{Name: proto.String("common.proto"), Package: proto.String("s"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M")}}}
	src, _ := fakeReflectionSource(t, func(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
		if req.GetFileByFilename() == "common.proto" {
			return filesResponse(common)
		}
		svc := strings.TrimPrefix(req.GetFileContainingSymbol(), "s.")
		return filesResponse(&descriptorpb.FileDescriptorProto{Name: proto.String(svc + ".proto"), Package: proto.String("s"), Dependency: []string{"common.proto"},
			Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String(svc), Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("Do"), InputType: proto.String(".s.M"), OutputType: proto.String(".s.M")}}}}})
	})
	for i := range services {
		name := fmt.Sprintf("s.S%d", i)
		if d, err := src.FindSymbol(t.Context(), name); err != nil || string(d.FullName()) != name {
			t.Fatalf("FindSymbol(%s): %v, %v", name, d, err)
		}
	}
	if src.built != services+1 {
		t.Fatalf("built %d files for %d services and one import: want each file built once", src.built, services)
	}
}

// FuzzReflectedFiles feeds a file descriptor as a server could send it to
// the reflection client: whatever the bytes, FindSymbol returns (an error
// or a descriptor), asking for at most the imports the files name.
func FuzzReflectedFiles(f *testing.F) {
	for _, fd := range []*descriptorpb.FileDescriptorProto{
		{Name: proto.String("a.proto"), Package: proto.String("a"), MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M")}}},
		{Name: proto.String("a.proto"), Package: proto.String("a"), Dependency: []string{"a.proto"}},
		{Name: proto.String("a.proto"), Package: proto.String("a"), Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("S"),
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("M"), InputType: proto.String(".a.M"), OutputType: proto.String(".a.M")}}}}},
	} {
		b, _ := proto.Marshal(fd)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		src, fr := fakeReflectionSource(t, func(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
			if req.GetFileByFilename() != "" {
				return &rpb.ServerReflectionResponse{MessageResponse: &rpb.ServerReflectionResponse_ErrorResponse{ErrorResponse: &rpb.ErrorResponse{ErrorCode: 5}}}
			}
			return &rpb.ServerReflectionResponse{MessageResponse: &rpb.ServerReflectionResponse_FileDescriptorResponse{
				FileDescriptorResponse: &rpb.FileDescriptorResponse{FileDescriptorProto: [][]byte{b}}}}
		})
		d, err := src.FindSymbol(t.Context(), "a.M")
		if err == nil && d.FullName() != "a.M" {
			t.Fatalf("FindSymbol(a.M) = %v", d.FullName())
		}
		if fr.asked > 2 {
			t.Fatalf("asked %d times for one symbol and one answer", fr.asked)
		}
	})
}

// TestReflectionProtoIsTheServices: the copy of reflection.proto the
// command speaks is the one the reflection service is generated from.
func TestReflectionProtoIsTheServices(t *testing.T) {
	want, err := os.ReadFile("../../reflection/grpc_reflection_v1/" + reflectionProtoPath)
	if err != nil {
		t.Fatal(err)
	}
	if reflectionProto != string(want) {
		t.Fatal("cmd/rdmarpc/reflection.proto differs from reflection/grpc_reflection_v1's: copy it over")
	}
	fd, err := reflectionSchema()
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(protodesc.ToFileDescriptorProto(fd), protodesc.ToFileDescriptorProto(rpb.File_grpc_reflection_v1_reflection_proto)) {
		t.Fatal("the built-in reflection.proto compiles to another descriptor than the generated package's")
	}
}

// TestNoGeneratedCode: the command links no package of this module that
// holds generated code (*.pb.go), so that it builds, and regenerates them,
// however broken they are.
func TestNoGeneratedCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .GoFiles}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		pkg, files, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(pkg, "github.com/rdmarpc/rdmarpc/") {
			continue
		}
		for _, f := range strings.Fields(files) {
			if strings.HasSuffix(f, ".pb.go") {
				t.Errorf("rdmarpc links %s, generated code (%s)", pkg, f)
			}
		}
	}
}
