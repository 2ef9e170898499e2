package rpc

import (
	"context"
	"reflect"
	"testing"

	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
)

type otherKey struct{}

// TestCallContext: one callContext answers what the three WithValue
// layers it replaces answered (the metadata completed with what the server
// adds, the same map every time it is asked for), lets a layer above it
// win, passes other keys on, and ends its children when the call's context
// ends.
func TestCallContext(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), otherKey{}, "other"))
	sc := &serverCall{method: "/t.S/M"}
	md := metadata.Pairs("k", "v")
	p := &Peer{}
	l := &serverLink{authority: "kv.test"}
	var ctx context.Context = &callContext{Context: parent, sc: sc, peer: p, l: l, raw: md, ua: "probe/1"}

	if got, err := callFromContext(ctx); err != nil || got != sc {
		t.Errorf("callFromContext: %v, %v", got, err)
	}
	got, ok := metadata.FromIncomingContext(ctx)
	want := metadata.Pairs("k", "v", ":authority", "kv.test", "content-type", "application/grpc", "user-agent", "probe/1")
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("FromIncomingContext: %v, %v; want %v", got, ok, want)
	}
	got.Set("k", "changed")
	if again, _ := metadata.FromIncomingContext(ctx); again.Get("k")[0] != "changed" {
		t.Errorf("FromIncomingContext the second time: %v, want the same map", again)
	}
	if got, ok := peer.FromContext(ctx); !ok || got != p {
		t.Errorf("peer.FromContext: %v, %v", got, ok)
	}
	if got := ctx.Value(otherKey{}); got != "other" {
		t.Errorf("a key of the parent's: %v", got)
	}
	over := metadata.NewIncomingContext(ctx, metadata.Pairs("k", "w"))
	if got, _ := metadata.FromIncomingContext(over); got.Get("k")[0] != "w" {
		t.Errorf("an interceptor's NewIncomingContext above: %v", got)
	}

	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done() // blocks, and the test times out, unless the end reaches it
	if child.Err() != context.Canceled {
		t.Errorf("child: %v", child.Err())
	}
}
