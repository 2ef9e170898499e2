package passthrough_test

import (
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/resolver"
	_ "github.com/rdmarpc/rdmarpc/resolver/passthrough"
	"github.com/rdmarpc/rdmarpc/transport"
)

type fakeTCP struct{ transport.Transport }

// "rdma://h:1" is one address over rdma, but only with a transport
// registered for rdma (this test binary has none): without one, the error
// says which package registers it.
func TestTransportTargetNeedsItsTransport(t *testing.T) {
	_, _, err := resolver.ParseTarget("rdma://127.0.0.1:7070")
	if err == nil || !strings.Contains(err.Error(), "github.com/rdmarpc/rdmarpc/transport/rdma") {
		t.Fatalf("rdma:// with no rdma transport registered: %v, want an error naming transport/rdma", err)
	}
}

// With a transport registered for tcp, "tcp://h:1" is passthrough over it.
func TestTransportTargetIsPassthrough(t *testing.T) {
	transport.Register("tcp", fakeTCP{})
	tg, b, err := resolver.ParseTarget("tcp://127.0.0.1:7070")
	if err != nil {
		t.Fatal(err)
	}
	if b.Scheme() != "passthrough" || tg.Transport != "tcp" || tg.Endpoint() != "127.0.0.1:7070" {
		t.Fatalf("tcp://127.0.0.1:7070 parsed as %+v by %s", tg, b.Scheme())
	}
}
