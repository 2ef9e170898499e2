package dns_test

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/rdmarpc/rdmarpc/resolver"
	_ "github.com/rdmarpc/rdmarpc/resolver/dns"
	"github.com/rdmarpc/rdmarpc/resolver/dns/dnstest"
)

type printer struct{ done chan struct{} }

func (p printer) UpdateState(s resolver.State) error {
	lines := make([]string, 0, len(s.Addresses))
	for _, a := range s.Addresses {
		lines = append(lines, fmt.Sprint(a.Transport, " ", a.Addr))
	}
	sort.Strings(lines) // the resolver keeps the answer's order, which may vary
	fmt.Println(strings.Join(lines, "\n"))
	close(p.done)
	return nil
}

func (p printer) ReportError(err error) { fmt.Println(err); close(p.done) }

// A test's DNS server on loopback holds kv.test; a target names that server
// as its authority and asks for RDMA with fallback to TCP.
func Example() {
	srv, err := dnstest.NewServer()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.Set("kv.test", netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"))

	target, builder, err := resolver.ParseTarget("auto+dns://" + srv.Addr() + "/kv.test:7070")
	if err != nil {
		panic(err)
	}
	p := printer{done: make(chan struct{})}
	r, err := builder.Build(target, p, resolver.BuildOptions{})
	if err != nil {
		panic(err)
	}
	<-p.done
	r.Close()
	// Output:
	// auto 10.0.0.1:7070
	// auto 10.0.0.2:7070
}
