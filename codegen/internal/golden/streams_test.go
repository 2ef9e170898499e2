package golden_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rdmarpc/rdmarpc/codegen/internal/golden/common"
	editionspb "github.com/rdmarpc/rdmarpc/codegen/internal/golden/editions"
	streamspb "github.com/rdmarpc/rdmarpc/codegen/internal/golden/streams"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// What generated code for streaming methods promises: handlers and clients
// driven through fake streams, and a real server over TCP.

// fakeServerStream hands out queued requests, then io.EOF, and records what
// the handler sends.
type fakeServerStream struct {
	ctx  context.Context
	in   []proto.Message
	sent []proto.Message
}

func (s *fakeServerStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeServerStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeServerStream) SetTrailer(metadata.MD)       {}
func (s *fakeServerStream) Context() context.Context     { return s.ctx }
func (s *fakeServerStream) SendMsg(m any) error {
	s.sent = append(s.sent, m.(proto.Message))
	return nil
}

func (s *fakeServerStream) RecvMsg(m any) error {
	if len(s.in) == 0 {
		return io.EOF
	}
	proto.Merge(m.(proto.Message), s.in[0])
	s.in = s.in[1:]
	return nil
}

// feed implements Watch, Upload and Chat; Tail is left to the embedded
// UnimplementedFeedServer.
type feed struct {
	streamspb.UnimplementedFeedServer
}

func (feed) Watch(since *timestamppb.Timestamp, s streamspb.Feed_WatchServer) error {
	for i := range 3 {
		if err := s.Send(&streamspb.Item{Id: since.AsTime().Format("2006") + "/" + string(rune('a'+i))}); err != nil {
			return err
		}
	}
	return nil
}

func (feed) Upload(s streamspb.Feed_UploadServer) error {
	n := int32(0)
	for {
		_, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&common.Page{Size: n})
		}
		if err != nil {
			return err
		}
		n++
	}
}

func (feed) Chat(s streamspb.Feed_ChatServer) error {
	for {
		in, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&streamspb.Item{Id: "re: " + in.GetId()}); err != nil {
			return err
		}
	}
}

func (feed) Get(_ context.Context, in *streamspb.Item) (*streamspb.Item, error) { return in, nil }

func streamHandler(t *testing.T, desc *rpc.ServiceDesc, name string) rpc.StreamDesc {
	t.Helper()
	for _, s := range desc.Streams {
		if s.StreamName == name {
			return s
		}
	}
	t.Fatalf("%s has no stream %s", desc.ServiceName, name)
	return rpc.StreamDesc{}
}

func ids(t *testing.T, ms []proto.Message) []string {
	t.Helper()
	var out []string
	for _, m := range ms {
		out = append(out, m.(*streamspb.Item).GetId())
	}
	return out
}

func TestStreamServiceDesc(t *testing.T) {
	d := streamspb.Feed_ServiceDesc
	var methods []string
	for _, m := range d.Methods {
		methods = append(methods, m.MethodName)
	}
	if len(methods) != 2 || methods[0] != "Get" || methods[1] != "Count" {
		t.Errorf("Methods %q; want the unary ones, Get and Count", methods)
	}
	for _, want := range []rpc.StreamDesc{
		{StreamName: "Watch", ServerStreams: true},
		{StreamName: "Upload", ClientStreams: true},
		{StreamName: "Chat", ServerStreams: true, ClientStreams: true},
		{StreamName: "Tail", ServerStreams: true},
	} {
		got := streamHandler(t, &d, want.StreamName)
		if got.ServerStreams != want.ServerStreams || got.ClientStreams != want.ClientStreams || got.Handler == nil {
			t.Errorf("stream %s: server %v client %v handler %v; want server %v client %v and a handler",
				want.StreamName, got.ServerStreams, got.ClientStreams, got.Handler != nil, want.ServerStreams, want.ClientStreams)
		}
	}
	if len(d.Streams) != 4 {
		t.Errorf("%d streams; want 4", len(d.Streams))
	}
	// The edition 2023 file's service, in a nested proto package.
	e := editionspb.Ticker_ServiceDesc
	if e.ServiceName != "rdmarpc.test.editions.v1alpha.inner.Ticker" || len(e.Methods) != 1 || len(e.Streams) != 3 {
		t.Errorf("Ticker_ServiceDesc: %s, %d methods, %d streams; want 1 and 3", e.ServiceName, len(e.Methods), len(e.Streams))
	}
}

func TestStreamHandlers(t *testing.T) {
	d := &streamspb.Feed_ServiceDesc
	since := timestamppb.New(timestamppb.Now().AsTime().AddDate(-1, 0, 0))
	year := since.AsTime().Format("2006")

	t.Run("server streaming reads the one request", func(t *testing.T) {
		s := &fakeServerStream{ctx: t.Context(), in: []proto.Message{since}}
		if err := streamHandler(t, d, "Watch").Handler(feed{}, s); err != nil {
			t.Fatal(err)
		}
		got := ids(t, s.sent)
		if len(got) != 3 || got[0] != year+"/a" || got[2] != year+"/c" {
			t.Errorf("sent %q", got)
		}
	})

	t.Run("server streaming without a request", func(t *testing.T) {
		s := &fakeServerStream{ctx: t.Context()}
		err := streamHandler(t, d, "Watch").Handler(feed{}, s)
		if !errors.Is(err, io.EOF) || len(s.sent) != 0 {
			t.Errorf("err %v, sent %d; want the stream's io.EOF and nothing sent", err, len(s.sent))
		}
	})

	t.Run("client streaming", func(t *testing.T) {
		s := &fakeServerStream{ctx: t.Context(), in: []proto.Message{&streamspb.Item{}, &streamspb.Item{}, &streamspb.Item{}}}
		if err := streamHandler(t, d, "Upload").Handler(feed{}, s); err != nil {
			t.Fatal(err)
		}
		if len(s.sent) != 1 || s.sent[0].(*common.Page).GetSize() != 3 {
			t.Errorf("sent %v; want one Page of size 3", s.sent)
		}
	})

	t.Run("bidi", func(t *testing.T) {
		s := &fakeServerStream{ctx: t.Context(), in: []proto.Message{&streamspb.Item{Id: "x"}, &streamspb.Item{Id: "y"}}}
		if err := streamHandler(t, d, "Chat").Handler(feed{}, s); err != nil {
			t.Fatal(err)
		}
		if got := ids(t, s.sent); len(got) != 2 || got[0] != "re: x" || got[1] != "re: y" {
			t.Errorf("sent %q", got)
		}
	})

	t.Run("embedded Unimplemented", func(t *testing.T) {
		s := &fakeServerStream{ctx: t.Context(), in: []proto.Message{&emptypb.Empty{}}}
		err := streamHandler(t, d, "Tail").Handler(feed{}, s)
		if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != "method Tail not implemented" {
			t.Errorf("Tail: %v; want Unimplemented: method Tail not implemented", err)
		}
		err = streamHandler(t, &streamspb.Sink_ServiceDesc, "Drain").Handler(struct {
			streamspb.UnimplementedSinkServer
		}{}, s)
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("Drain: %v; want Unimplemented", err)
		}
	})
}

// fakeClientStream is a client stream whose server answers each message
// with its id reversed, and ends the stream after the client's CloseSend.
type fakeClientStream struct {
	ctx     context.Context
	pending []*streamspb.Item
	closed  bool
	ops     []string
}

func (s *fakeClientStream) Header() (metadata.MD, error) { return nil, nil }
func (s *fakeClientStream) Trailer() metadata.MD         { return nil }
func (s *fakeClientStream) Context() context.Context     { return s.ctx }
func (s *fakeClientStream) CloseSend() error {
	s.ops = append(s.ops, "close")
	s.closed = true
	return nil
}

func (s *fakeClientStream) SendMsg(m any) error {
	s.ops = append(s.ops, "send")
	switch m := m.(type) {
	case *streamspb.Item:
		s.pending = append(s.pending, m)
	case *timestamppb.Timestamp:
		s.pending = append(s.pending, &streamspb.Item{Id: "since"}, &streamspb.Item{Id: "then"})
	}
	return nil
}

func (s *fakeClientStream) RecvMsg(m any) error {
	s.ops = append(s.ops, "recv")
	if len(s.pending) == 0 {
		if s.closed {
			return io.EOF
		}
		return errors.New("fake: nothing to receive before CloseSend")
	}
	switch m := m.(type) {
	case *streamspb.Item:
		m.Id = s.pending[0].GetId()
	case *common.Page:
		m.Size = int32(len(s.pending))
		s.pending = nil
		return nil
	}
	s.pending = s.pending[1:]
	return nil
}

// streamConn opens fake streams and records what was asked for.
type streamConn struct {
	stream *fakeClientStream
	desc   *rpc.StreamDesc
	method string
}

func (c *streamConn) Invoke(context.Context, string, any, any, ...rpc.CallOption) error {
	return errors.New("streamConn makes no unary calls")
}

func (c *streamConn) NewStream(ctx context.Context, desc *rpc.StreamDesc, method string, _ ...rpc.CallOption) (rpc.ClientStream, error) {
	c.desc, c.method = desc, method
	c.stream = &fakeClientStream{ctx: ctx}
	return c.stream, nil
}

func TestStreamClients(t *testing.T) {
	ctx := t.Context()

	t.Run("server streaming sends the request and half-closes", func(t *testing.T) {
		cc := &streamConn{}
		s, err := streamspb.NewFeedClient(cc).Watch(ctx, timestamppb.Now())
		if err != nil {
			t.Fatal(err)
		}
		if cc.desc != &streamspb.Feed_ServiceDesc.Streams[0] || cc.method != streamspb.Feed_Watch_FullMethodName {
			t.Errorf("NewStream(%v, %q); want Streams[0] and %s", cc.desc, cc.method, streamspb.Feed_Watch_FullMethodName)
		}
		var got []string
		for {
			it, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, it.GetId())
		}
		if len(got) != 2 || got[0] != "since" || got[1] != "then" {
			t.Errorf("received %q", got)
		}
		if want := "send close recv recv recv"; strings.Join(cc.stream.ops, " ") != want {
			t.Errorf("stream operations %q; want %q", strings.Join(cc.stream.ops, " "), want)
		}
	})

	t.Run("client streaming", func(t *testing.T) {
		cc := &streamConn{}
		s, err := streamspb.NewFeedClient(cc).Upload(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cc.desc != &streamspb.Feed_ServiceDesc.Streams[1] || cc.method != streamspb.Feed_Upload_FullMethodName {
			t.Errorf("NewStream(%v, %q); want Streams[1]", cc.desc, cc.method)
		}
		for range 4 {
			if err := s.Send(&streamspb.Item{}); err != nil {
				t.Fatal(err)
			}
		}
		page, err := s.CloseAndRecv()
		if err != nil || page.GetSize() != 4 {
			t.Errorf("CloseAndRecv: %v, %v; want a page of 4", page, err)
		}
	})

	t.Run("bidi", func(t *testing.T) {
		cc := &streamConn{}
		var s streamspb.Feed_ChatClient
		s, err := streamspb.NewFeedClient(cc).Chat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cc.desc != &streamspb.Feed_ServiceDesc.Streams[2] || !cc.desc.ClientStreams || !cc.desc.ServerStreams {
			t.Errorf("NewStream(%+v); want Streams[2], streaming both ways", cc.desc)
		}
		if err := s.Send(&streamspb.Item{Id: "p"}); err != nil {
			t.Fatal(err)
		}
		if it, err := s.Recv(); err != nil || it.GetId() != "p" {
			t.Errorf("Recv: %v, %v", it, err)
		}
		if s.Context() != ctx {
			t.Error("the stream's context is not the one it was opened with")
		}
	})

	t.Run("NewStream's error is the method's", func(t *testing.T) {
		_, err := streamspb.NewSinkClient(failingConn{}).Drain(ctx)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Drain: %v; want the Unavailable from NewStream", err)
		}
	})
}

type failingConn struct{}

func (failingConn) Invoke(context.Context, string, any, any, ...rpc.CallOption) error {
	return status.Error(codes.Unavailable, "down")
}

func (failingConn) NewStream(context.Context, *rpc.StreamDesc, string, ...rpc.CallOption) (rpc.ClientStream, error) {
	return nil, status.Error(codes.Unavailable, "down")
}

// TestStreamsOverTCP registers a service with streaming methods on a real
// server: its unary and streaming methods of every kind work through the
// generated stubs.
func TestStreamsOverTCP(t *testing.T) {
	lis, err := transport.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer()
	streamspb.RegisterFeedServer(s, feed{})
	streamspb.RegisterSinkServer(s, struct {
		streamspb.UnimplementedSinkServer
	}{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	cc, err := rpc.Dial(t.Context(), "tcp://"+lis.Addr().String())
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	defer func() {
		cc.Close()
		s.Stop()
		if err := <-done; err != nil && !errors.Is(err, rpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	}()
	ctx := t.Context()
	c := streamspb.NewFeedClient(cc)

	if it, err := c.Get(ctx, &streamspb.Item{Id: "u"}); err != nil || it.GetId() != "u" {
		t.Errorf("Get: %v, %v; want the unary method of a service with streams to work", it, err)
	}
	// Server streaming.
	w, err := c.Watch(ctx, timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	var got []string
	for {
		it, err := w.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Watch: Recv: %v", err)
		}
		got = append(got, it.GetId())
	}
	if strings.Join(got, " ") != "2026/a 2026/b 2026/c" {
		t.Errorf("Watch sent %q, want 2026/a 2026/b 2026/c", got)
	}
	// Client streaming.
	u, err := c.Upload(ctx)
	if err != nil {
		t.Fatalf("Upload: %v", err)
	}
	for range 5 {
		if err := u.Send(&streamspb.Item{Id: "x"}); err != nil {
			t.Fatalf("Upload: Send: %v", err)
		}
	}
	if p, err := u.CloseAndRecv(); err != nil || p.GetSize() != 5 {
		t.Errorf("Upload: CloseAndRecv: %v, %v; want size 5", p, err)
	}
	// Bidirectional.
	ch, err := c.Chat(ctx)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	for _, id := range []string{"a", "b"} {
		if err := ch.Send(&streamspb.Item{Id: id}); err != nil {
			t.Fatalf("Chat: Send: %v", err)
		}
		if it, err := ch.Recv(); err != nil || it.GetId() != "re: "+id {
			t.Fatalf("Chat: Recv: %v, %v; want re: %s", it, err, id)
		}
	}
	if err := ch.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Recv(); err != io.EOF {
		t.Errorf("Chat: Recv after CloseSend: %v, want io.EOF", err)
	}
	// The embedded Unimplemented server answers over the wire.
	tail, err := c.Tail(ctx, &emptypb.Empty{}) //lint:ignore SA1019 the deprecated method is the golden file's point: it must still work
	if err != nil {
		t.Fatalf("Tail: %v", err)
	}
	if _, err := tail.Recv(); status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != "method Tail not implemented" {
		t.Errorf("Tail: Recv: %v; want Unimplemented: method Tail not implemented", err)
	}
	// A peer that sends a streaming method's name as a unary call is
	// answered Unimplemented by the server.
	err = cc.Invoke(ctx, streamspb.Feed_Chat_FullMethodName, &streamspb.Item{}, &streamspb.Item{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Chat as a unary call: %v; want Unimplemented", err)
	}
	err = cc.Invoke(ctx, streamspb.Sink_Drain_FullMethodName, &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Drain as a unary call: %v; want Unimplemented", err)
	}
}
