package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// fakeStreams opens streams served by handler in a goroutine, in place of
// rdmarpc's streaming runtime, which has not landed: callStream is tested
// against rpc.ClientStream's documented contract.
type fakeStreams struct {
	handler func(ctx context.Context, reqs <-chan *dynamicpb.Message, send func(text string) error) error
	wg      sync.WaitGroup
	desc    *rpc.StreamDesc
	method  string
}

type fakeStream struct {
	ctx       context.Context
	reqs      chan *dynamicpb.Message
	closeOnce sync.Once
	out       chan string
	ended     chan struct{}
	err       error // the handler's, once ended is closed
}

func (f *fakeStreams) NewStream(ctx context.Context, desc *rpc.StreamDesc, method string, _ ...rpc.CallOption) (rpc.ClientStream, error) {
	f.desc, f.method = desc, method
	s := &fakeStream{ctx: ctx, reqs: make(chan *dynamicpb.Message), out: make(chan string), ended: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		s.err = f.handler(ctx, s.reqs, func(text string) error {
			select {
			case s.out <- text:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		close(s.ended)
	}()
	return s, nil
}

func (s *fakeStream) Header() (metadata.MD, error) { return metadata.Pairs("x-fake", "header"), nil }
func (s *fakeStream) Trailer() metadata.MD {
	select {
	case <-s.ended:
		return metadata.Pairs("x-fake", "trailer")
	default:
		return nil
	}
}
func (s *fakeStream) Context() context.Context { return s.ctx }
func (s *fakeStream) CloseSend() error {
	s.closeOnce.Do(func() { close(s.reqs) })
	return nil
}

func (s *fakeStream) SendMsg(m any) error {
	select {
	case s.reqs <- m.(*dynamicpb.Message):
		return nil
	case <-s.ended:
		return io.EOF
	case <-s.ctx.Done():
		return io.EOF
	}
}

func (s *fakeStream) RecvMsg(m any) error {
	select {
	case text := <-s.out:
		dm := m.(*dynamicpb.Message)
		dm.Set(dm.Descriptor().Fields().ByName("text"), protoreflect.ValueOfString(text))
		return nil
	case <-s.ended:
		if s.err != nil {
			return status.Convert(s.err).Err()
		}
		return io.EOF
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
}

func textOf(m *dynamicpb.Message) string {
	return m.Get(m.Descriptor().Fields().ByName("text")).String()
}

// recvAll takes requests until the client half-closes, or fails when the
// stream is canceled first.
func recvAll(ctx context.Context, reqs <-chan *dynamicpb.Message) ([]*dynamicpb.Message, error) {
	var all []*dynamicpb.Message
	for {
		select {
		case r, ok := <-reqs:
			if !ok {
				return all, nil
			}
			all = append(all, r)
		case <-ctx.Done():
			return all, ctx.Err()
		}
	}
}

func TestCallStream(t *testing.T) {
	src, err := dynamic.LoadProtos(context.Background(), []string{"testdata"}, []string{"probe.proto"})
	if err != nil {
		t.Fatal(err)
	}
	var canceled bool
	for _, tc := range []struct {
		name, method, input string
		handler             func(ctx context.Context, reqs <-chan *dynamicpb.Message, send func(string) error) error
		want                string
		errWant             string
		code                codes.Code
		wantCanceled        bool
	}{
		{name: "server streaming", method: "Watch", input: `{"text": "hi", "count": 3}`,
			handler: func(ctx context.Context, reqs <-chan *dynamicpb.Message, send func(string) error) error {
				all, err := recvAll(ctx, reqs)
				if err != nil || len(all) != 1 {
					return status.Errorf(codes.Internal, "got %d requests, %v", len(all), err)
				}
				n := all[0].Get(all[0].Descriptor().Fields().ByName("count")).Int()
				for i := range n {
					if err := send(textOf(all[0]) + strings.Repeat("!", int(i))); err != nil {
						return err
					}
				}
				return nil
			},
			want: `{"text":"hi"}` + "\n" + `{"text":"hi!"}` + "\n" + `{"text":"hi!!"}` + "\n"},
		{name: "client streaming", method: "Collect", input: "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"}\n",
			handler: func(ctx context.Context, reqs <-chan *dynamicpb.Message, send func(string) error) error {
				all, err := recvAll(ctx, reqs)
				if err != nil {
					return err
				}
				var texts []string
				for _, r := range all {
					texts = append(texts, textOf(r))
				}
				return send(strings.Join(texts, ","))
			},
			want: `{"text":"a,b,c"}` + "\n"},
		{name: "bidi", method: "Chat", input: `{"text": "x"} {"text": "y"}`,
			handler: func(ctx context.Context, reqs <-chan *dynamicpb.Message, send func(string) error) error {
				for r := range reqs {
					if err := send("re: " + textOf(r)); err != nil {
						return err
					}
				}
				return nil
			},
			want: `{"text":"re: x"}` + "\n" + `{"text":"re: y"}` + "\n"},
		{name: "status after a response", method: "Chat", input: `{"text": "x"} {"text": "y"}`,
			handler: func(ctx context.Context, reqs <-chan *dynamicpb.Message, send func(string) error) error {
				r := <-reqs
				if err := send("re: " + textOf(r)); err != nil {
					return err
				}
				return status.Error(codes.NotFound, "gone")
			},
			want: `{"text":"re: x"}` + "\n", code: codes.NotFound},
		{name: "malformed JSON cancels the stream", method: "Collect", input: `{"text": "a"} {"text": `,
			handler: func(ctx context.Context, reqs <-chan *dynamicpb.Message, send func(string) error) error {
				_, err := recvAll(ctx, reqs)
				canceled = errors.Is(err, context.Canceled)
				return err
			},
			errWant: "request 2: not JSON", wantCanceled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canceled = false
			m, err := dynamic.FindMethod(context.Background(), src, "probe.v1.Probe/"+tc.method)
			if err != nil {
				t.Fatal(err)
			}
			fs := &fakeStreams{handler: tc.handler}
			var out bytes.Buffer
			dec := dynamic.NewDecoder(strings.NewReader(tc.input), m.Desc.Input(), src.Types())
			x, err := callStream(context.Background(), fs, m, dec.Next, dynamic.NewEncoder(&out, src.Types(), false))
			fs.wg.Wait()
			if fs.method != m.FullMethod || fs.desc.ServerStreams != m.Desc.IsStreamingServer() || fs.desc.ClientStreams != m.Desc.IsStreamingClient() {
				t.Errorf("stream opened as %s %+v", fs.method, fs.desc)
			}
			if out.String() != tc.want {
				t.Errorf("printed %q, want %q", out.String(), tc.want)
			}
			var se *statusErr
			switch {
			case tc.errWant != "":
				if err == nil || !strings.Contains(err.Error(), tc.errWant) || errors.As(err, &se) {
					t.Errorf("error %v; want the input error %q", err, tc.errWant)
				}
			case tc.code != codes.OK:
				if !errors.As(err, &se) || status.Code(se.err) != tc.code {
					t.Errorf("error %v; want a status %v", err, tc.code)
				}
			case err != nil:
				t.Errorf("error %v", err)
			}
			if canceled != tc.wantCanceled {
				t.Errorf("server saw the stream canceled: %v, want %v", canceled, tc.wantCanceled)
			}
			if tc.errWant == "" && (x.header.Get("x-fake")[0] != "header" || len(x.trailer.Get("x-fake")) != 1) {
				t.Errorf("header %v, trailer %v", x.header, x.trailer)
			}
			if got := strings.Count(out.String(), "\n"); tc.errWant == "" && x.received != got {
				t.Errorf("counted %d responses received, printed %d", x.received, got)
			}
		})
	}
}

// TestCallStreamsServed runs the streaming methods the probe serves through
// the command, over tcp://. It skips while rdmarpc's streaming runtime has
// not landed (the client's NewStream answers Unimplemented: "not supported
// by this version"), and runs as soon as it has.
func TestCallStreamsServed(t *testing.T) {
	target := startProbe(t)
	out, stderr, err := runCmd(t, newCallCmd(), "{\"text\": \"a\"}\n{\"text\": \"b\"}\n", args(probeFlags, "-d", "@", target, "probe.v1.Probe/Chat")...)
	if err != nil && strings.Contains(stderr, "not supported by this version") {
		t.Skip("rdmarpc's streaming runtime has not landed: " + strings.TrimSpace(stderr))
	}
	if err != nil || out != `{"text":"re: a"}`+"\n"+`{"text":"re: b"}`+"\n" {
		t.Fatalf("bidi: %q, %v; stderr %s", out, err, stderr)
	}
	out, stderr, err = runCmd(t, newCallCmd(), "", args(probeFlags, "-d", `{"text": "x"} {"text": "y"} {"text": "z"}`, target, "probe.v1.Probe/Collect")...)
	if err != nil || out != `{"text":"x,y,z","count":3}`+"\n" {
		t.Fatalf("client streaming: %q, %v; stderr %s", out, err, stderr)
	}
	out, stderr, err = runCmd(t, newCallCmd(), "", args(probeFlags, "-d", `{"text": "one"} {"text": "fail"} {"text": "never"}`, target, "probe.v1.Probe/Chat")...)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 64+int(codes.FailedPrecondition) || out != `{"text":"re: one"}`+"\n" ||
		!strings.Contains(stderr, "  Code: FailedPrecondition\n  Message: asked to fail\n") {
		t.Fatalf("failing stream: %q, %v; stderr %s", out, err, stderr)
	}
}
