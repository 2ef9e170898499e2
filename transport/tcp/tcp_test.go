package tcp

import (
	"testing"

	"github.com/rdmarpc/rdmarpc/test/conformance"
	"github.com/rdmarpc/rdmarpc/transport/transporttest"
)

func TestConformance(t *testing.T) {
	o := Options{MaxMessageSize: 16<<20 + 64}
	transporttest.Run(t, transporttest.Config{
		Config:         conformance.Config{Transport: New(o), Addr: "127.0.0.1:0"},
		MaxMessageSize: o.MaxMessageSize,
		// Send queue + receive queue (4 MiB each) + socket buffers on
		// both sides (a few MiB on Linux loopback) + one message in flight.
		MaxBuffered: 32 << 20,
	})
}
