package name_resolving

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNameResolving(t *testing.T) {
	server := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0")[0]
	host := strings.TrimPrefix(server, "tcp://")
	var out bytes.Buffer
	if err := Client(context.Background(), []string{"--addr", server, "--n", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	answer := fmt.Sprintf("this is examples/name_resolving (from %s)\n", host)
	want := fmt.Sprintf("--- calling Echo.Say to %q ---\n", "tcp+passthrough:///"+host) + answer + answer +
		fmt.Sprintf("--- calling Echo.Say to %q ---\n", "tcp+example:///resolver.example.grpc.io") + answer + answer
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
