package passthrough_test

import (
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/resolver"
	_ "github.com/rdmarpc/rdmarpc/resolver/passthrough"
	"github.com/rdmarpc/rdmarpc/transport"
)

type fakeTCP struct{ transport.Transport }

// "tcp://h:1" is one address over tcp, but only with a transport registered
// for tcp; without one, the error says which package registers it.
func TestTransportTargetNeedsItsTransport(t *testing.T) {
	for scheme, pkg := range map[string]string{
		"tcp":  "github.com/rdmarpc/rdmarpc/transport/tcp",
		"rdma": "github.com/rdmarpc/rdmarpc/transport/rdma",
	} {
		_, _, err := resolver.ParseTarget(scheme + "://127.0.0.1:7070")
		if err == nil || !strings.Contains(err.Error(), pkg) || !strings.Contains(err.Error(), "registered transports: none") {
			t.Errorf("%s:// with no transport registered: %v, want an error naming %s", scheme, err, pkg)
		}
	}
	transport.Register("tcp", fakeTCP{})
	tg, b, err := resolver.ParseTarget("tcp://127.0.0.1:7070")
	if err != nil {
		t.Fatal(err)
	}
	if b.Scheme() != "passthrough" || tg.Transport != "tcp" || tg.Endpoint() != "127.0.0.1:7070" {
		t.Fatalf("tcp://127.0.0.1:7070 parsed as %+v by %s", tg, b.Scheme())
	}
}
