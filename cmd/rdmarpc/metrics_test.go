package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// promText is what kvserver's /metrics serves of an rdma:// listener
// (contrib/prometheus), among other series.
const promText = `# HELP rdmarpc_transport_conns_opened_total Transport counter conns_opened.
# TYPE rdmarpc_transport_conns_opened_total counter
rdmarpc_transport_conns_opened_total{scheme="rdma"} 4
rdmarpc_transport_conns_opened_rxe0_total{scheme="rdma"} 2
rdmarpc_transport_conns_opened_rxe1_total{scheme="rdma"} 2
rdmarpc_transport_registered_bytes{scheme="rdma"} 1.048576e+06
rdmarpc_server_calls_total{method="/x"} 9
go_goroutines 12
`

// TestStatsMetrics: stats --metrics prints a running process's transport
// counters, per device ones included, after the device counters; as JSON
// in an object beside the ports.
func TestStatsMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(promText)) }))
	defer srv.Close()
	out, err := run(t, newStatsCmd(fakeSource(fakeDevs)), "--metrics", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{"rxe0 port 1", "transport counters of " + srv.URL, "conns_opened_rxe0  2", "conns_opened_rxe1  2", "registered_bytes   1048576"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats --metrics output lacks %q", want)
		}
	}
	if strings.Contains(out, "calls_total") || strings.Contains(out, "goroutines") {
		t.Error("stats --metrics printed series other than the transport's")
	}

	out, err = run(t, newStatsCmd(fakeSource(fakeDevs)), "--metrics", srv.URL, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Ports     []portCounters
		Transport []transportCounter
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got.Ports) != 2 || len(got.Transport) != 4 || got.Transport[1] != (transportCounter{"rdma", "conns_opened_rxe0", 2}) {
		t.Errorf("stats --metrics --json = %+v", got)
	}

	if _, err := run(t, newStatsCmd(fakeSource(fakeDevs)), "--metrics", srv.URL+"/missing\x7f"); err == nil {
		t.Error("stats --metrics with a bad URL: no error")
	}
}

// FuzzParseTransportCounters: whatever an endpoint serves, the parser
// returns without panicking, and only samples it read.
func FuzzParseTransportCounters(f *testing.F) {
	f.Add(promText)
	f.Add("rdmarpc_transport_x{scheme=\"rdma\" 3\nrdmarpc_transport_{} 1\nrdmarpc_transport_y NaN\n")
	f.Add("rdmarpc_transport_z{a=\"b\",scheme=\"tcp\"} 1e3 1700000000\n")
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := parseTransportCounters(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, c := range cs {
			if c.Name == "" {
				t.Fatalf("a counter without a name from %q", s)
			}
		}
	})
}
