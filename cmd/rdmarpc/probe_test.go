package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/reflection"
	rpb "github.com/rdmarpc/rdmarpc/reflection/grpc_reflection_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// probeFlags are the schema flags that find testdata/probe.proto.
var probeFlags = []string{"-I", "testdata", "--proto", "probe.proto"}

// blockStarted receives the number of the probe server (when there is
// room) each time its Block handler starts: a handler of an earlier test's
// server may start late, after that test returned, so a test counts its own
// server's only.
var blockStarted = make(chan int64, 16)

// probeServers numbers the probe servers: the latest is probeServers.Load().
var probeServers atomic.Int64

// startProbe serves probe.v1.Probe on tcp:// loopback, with handlers
// written against dynamic messages (the commands must not need generated
// code, and neither does their test server), and returns its target.
func startProbe(t *testing.T) string { return startProbeOn(t, "tcp://127.0.0.1:0") }

// startProbeOn serves probe.v1.Probe on listen ("rdma://10.9.9.1:0") and
// returns its target.
func startProbeOn(t *testing.T, listen string) string { return serveProbe(t, listen, false) }

// startReflectingProbe serves probe.v1.Probe and the reflection service,
// which describes probe.proto, on tcp:// loopback, and returns its target.
func startReflectingProbe(t *testing.T) string { return serveProbe(t, "tcp://127.0.0.1:0", true) }

func serveProbe(t *testing.T, listen string, reflect bool) string {
	t.Helper()
	gen := probeServers.Add(1)
	src, err := dynamic.LoadProtos(context.Background(), []string{"testdata"}, []string{"probe.proto"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := src.FindSymbol(context.Background(), "probe.v1.Probe")
	if err != nil {
		t.Fatal(err)
	}
	sd := d.(protoreflect.ServiceDescriptor)
	in := func(name string) *dynamicpb.Message {
		return dynamicpb.NewMessage(sd.Methods().ByName(protoreflect.Name(name)).Input())
	}
	resp := dynamicpb.NewMessage(sd.Methods().ByName("Echo").Output())
	field := func(m protoreflect.Message, name string) protoreflect.FieldDescriptor {
		return m.Descriptor().Fields().ByName(protoreflect.Name(name))
	}
	handler := func(name string, fn func(ctx context.Context, req *dynamicpb.Message) (any, error)) rpc.MethodDesc {
		return rpc.MethodDesc{MethodName: name, Handler: func(_ any, ctx context.Context, dec func(any) error, _ rpc.UnaryServerInterceptor) (any, error) {
			req := in(name)
			if err := dec(req); err != nil {
				return nil, err
			}
			return fn(ctx, req)
		}}
	}
	noteType, err := src.Types().FindMessageByName("probe.v1.Note")
	if err != nil {
		t.Fatal(err)
	}
	desc := &rpc.ServiceDesc{
		ServiceName: "probe.v1.Probe",
		Methods: []rpc.MethodDesc{
			handler("Echo", func(ctx context.Context, req *dynamicpb.Message) (any, error) {
				out := resp.New()
				out.Set(field(out, "text"), req.Get(field(req, "text")))
				out.Set(field(out, "count"), req.Get(field(req, "count")))
				md, _ := metadata.FromIncomingContext(ctx)
				var entries []string
				for k, vs := range md {
					if k == ":authority" || k == "content-type" || k == "user-agent" {
						continue // every call has them (rpc's metadata parity with gRPC-go)
					}
					for _, v := range vs {
						entries = append(entries, k+"="+v)
					}
				}
				slices.Sort(entries)
				if err := rpc.SetHeader(ctx, metadata.Pairs("x-answer", "header", "x-answer-bin", "\x00\xff")); err != nil {
					return nil, err
				}
				if err := rpc.SetTrailer(ctx, metadata.Pairs("x-answer", "trailer")); err != nil {
					return nil, err
				}
				list := out.Mutable(field(out, "metadata")).List()
				for _, e := range entries {
					list.Append(protoreflect.ValueOfString(e))
				}
				return out.Interface(), nil
			}),
			handler("Fail", func(_ context.Context, req *dynamicpb.Message) (any, error) {
				code := codes.Code(req.Get(field(req, "code")).Uint())
				msg := req.Get(field(req, "message")).String()
				info, _ := anypb.New(&errdetails.ErrorInfo{Reason: "PROBE", Domain: "probe.test"})
				note := noteType.New()
				note.Set(note.Descriptor().Fields().ByName("text"), protoreflect.ValueOfString("a note"))
				nb, err := proto.Marshal(note.Interface())
				if err != nil {
					return nil, err
				}
				return nil, status.FromParts(code, msg, []*anypb.Any{
					info,
					{TypeUrl: "type.googleapis.com/probe.v1.Note", Value: nb},
					{TypeUrl: "type.googleapis.com/elsewhere.Secret", Value: []byte{1, 2, 3}},
				}).Err()
			}),
			handler("Block", func(ctx context.Context, _ *dynamicpb.Message) (any, error) {
				select {
				case blockStarted <- gen:
				default:
				}
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			}),
		},
	}
	// Collect and Chat stream (Watch is left unserved): they run once
	// rdmarpc's streaming runtime has; until then the client's NewStream
	// answers Unimplemented.
	desc.Streams = []rpc.StreamDesc{
		{StreamName: "Collect", ClientStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			var texts []string
			for {
				req := in("Collect")
				if err := ss.RecvMsg(req); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					return err
				}
				texts = append(texts, req.Get(field(req, "text")).String())
			}
			out := resp.New()
			out.Set(field(out, "text"), protoreflect.ValueOfString(strings.Join(texts, ",")))
			out.Set(field(out, "count"), protoreflect.ValueOfInt32(int32(len(texts))))
			return ss.SendMsg(out.Interface())
		}},
		{StreamName: "Chat", ClientStreams: true, ServerStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			for {
				req := in("Chat")
				if err := ss.RecvMsg(req); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				text := req.Get(field(req, "text")).String()
				if text == "fail" {
					return status.Error(codes.FailedPrecondition, "asked to fail")
				}
				out := resp.New()
				out.Set(field(out, "text"), protoreflect.ValueOfString("re: "+text))
				if err := ss.SendMsg(out.Interface()); err != nil {
					return err
				}
			}
		}},
	}
	srv := rpc.NewServer()
	srv.RegisterService(desc, struct{}{})
	if reflect {
		files := new(protoregistry.Files)
		if err := files.RegisterFile(sd.ParentFile()); err != nil {
			t.Fatal(err)
		}
		rpb.RegisterServerReflectionServer(srv, reflection.NewServerV1(reflection.ServerOptions{Services: srv, DescriptorResolver: files}))
	}
	lis, err := rpc.Listen(listen)
	if err != nil {
		t.Fatal(err)
	}
	scheme, _, _ := strings.Cut(listen, "://")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && err != rpc.ErrServerStopped {
			t.Errorf("Serve: %v", err)
		}
	})
	return scheme + "://" + lis.Addr().String()
}

// runCmd runs a fresh command (flags do not carry over between runs), as
// main runs it, and returns its stdout, stderr and error.
func runCmd(t *testing.T, cmd *cobra.Command, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.SilenceUsage, cmd.SilenceErrors = rootCmd.SilenceUsage, rootCmd.SilenceErrors
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func args(a ...any) []string {
	var out []string
	for _, x := range a {
		switch x := x.(type) {
		case string:
			out = append(out, x)
		case []string:
			out = append(out, x...)
		default:
			panic(fmt.Sprintf("args: %T", x))
		}
	}
	return out
}
