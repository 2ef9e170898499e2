package rpc

import (
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/status"
)

// TestServerKeepaliveDefault: a server left at its defaults pings a quiet
// connection after gRPC-go's two hours, not on the client's 30 s clock (on
// which both ends' pings crossed every round: half of 1 000 idle rdma://
// connections' idle CPU); set explicitly, the server's Time is kept.
func TestServerKeepaliveDefault(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []ServerOption
		want time.Duration
	}{
		{"default", nil, DefaultServerKeepaliveTime},
		{"Keepalive", []ServerOption{KeepaliveParams(Keepalive{Time: time.Second})}, time.Second},
		{"ServerParameters", []ServerOption{KeepaliveParams(keepalive.ServerParameters{Time: time.Minute})}, time.Minute},
		{"off", []ServerOption{KeepaliveParams(Keepalive{Time: -1})}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			dialed, accepted := pipePairs(t, 1)
			l := NewServer(c.opts...).newServerLink(accepted[0])
			defer func() {
				l.Close(status.New(codes.Canceled, "test over"))
				l.Wait()
				dialed[0].Close()
			}()
			if ka := l.Keepalive(); ka.Time != c.want {
				t.Errorf("server keepalive Time %v, want %v", ka.Time, c.want)
			}
		})
	}
	// The client's default stays 30 s: it is what keeps both ends' liveness.
	if got := (Keepalive{}).withDefaults().Time; got != 30*time.Second {
		t.Errorf("client keepalive Time %v, want 30s", got)
	}
}
