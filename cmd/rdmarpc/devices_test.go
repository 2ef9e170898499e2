package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
)

var fakeDevs = []rdmadev.Device{{
	Name: "rxe0", NodeGUID: "7c18:ccff:fe57:4592", NodeType: "CA", Netdevs: []string{"dummy0"},
	Ports: []rdmadev.Port{{
		Num: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", ActiveMTU: 1024, NetdevMTU: 1500,
		Netdevs: []string{"dummy0"},
		GIDs: []rdmadev.GIDEntry{
			{Index: 0, GID: net.ParseIP("fe80::7c18:ccff:fe57:4592"), Type: "RoCE v2", Netdev: "dummy0"},
			{Index: 1, GID: net.ParseIP("10.9.9.1"), Type: "RoCE v2", Netdev: "dummy0"},
		},
	}},
}, {
	Name: "ibp0", NodeType: "CA", Netdevs: []string{},
	Ports: []rdmadev.Port{{Num: 1, State: "DOWN", PhysState: "Polling", LinkLayer: "InfiniBand", LID: 0x1a, GIDs: []rdmadev.GIDEntry{}}},
}}

func fakeSource(devs []rdmadev.Device) deviceSource {
	return deviceSource{
		list: func() ([]rdmadev.Device, error) { return devs, nil },
		counters: func(dev string, port uint8) (map[string]uint64, error) {
			if dev == "rxe0" {
				return map[string]uint64{"sent_pkts": 12, "rcvd_rnr_err": 1, "send_rnr_err": 0}, nil
			}
			return map[string]uint64{"port_xmit_data": 7}, nil
		},
		pinning: func() rdmadev.Pinning { return rdmadev.Pinning{RAM: 16 << 30, Memlock: 8 << 20} },
	}
}

func run(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.Execute()
	return out.String(), err
}

func TestDevicesNoDevices(t *testing.T) {
	for _, args := range [][]string{nil, {"--json"}} {
		out, err := run(t, newDevicesCmd(fakeSource(nil)), args...)
		if !errors.Is(err, errNoDevices) || !strings.Contains(err.Error(), "no RDMA devices found (is rdma_rxe loaded?") || out != "" {
			t.Errorf("devices %v with no devices: %q, %v", args, out, err)
		}
		out, err = run(t, newStatsCmd(fakeSource(nil)), args...)
		if !errors.Is(err, errNoDevices) || out != "" {
			t.Errorf("stats %v with no devices: %q, %v", args, out, err)
		}
	}
}

func TestDevicesText(t *testing.T) {
	out, err := run(t, newDevicesCmd(fakeSource(fakeDevs)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{
		"rxe0", "node_guid 7c18:ccff:fe57:4592", "netdevs dummy0",
		"port 1", "ACTIVE (LinkUp)", "Ethernet", "active_mtu 1024 (netdev mtu 1500)",
		"gid 1", "::ffff:10.9.9.1", "fe80::7c18:ccff:fe57:4592", "RoCE v2",
		"ibp0", "DOWN (Polling)", "InfiniBand", "lid 0x1a", "no GIDs",
		"registered-memory budget: 8 MiB, from RLIMIT_MEMLOCK (8 MiB), without CAP_IPC_LOCK", "ulimit -l unlimited",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestDevicesJSON(t *testing.T) {
	out, err := run(t, newDevicesCmd(fakeSource(fakeDevs)), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got []rdmadev.Device
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got) != 2 || got[0].Name != "rxe0" || got[0].Ports[0].ActiveMTU != 1024 ||
		!got[0].Ports[0].GIDs[1].GID.Equal(net.ParseIP("10.9.9.1")) || got[0].Ports[0].GIDs[1].Type != "RoCE v2" {
		t.Errorf("JSON round trip = %+v", got)
	}
}

func TestStats(t *testing.T) {
	out, err := run(t, newStatsCmd(fakeSource(fakeDevs)), "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out)
	if !strings.Contains(out, "rxe0 port 1") || strings.Contains(out, "ibp0") ||
		!strings.Contains(out, "sent_pkts") || strings.Count(out, "<- should be 0") != 1 {
		t.Errorf("stats rxe0 output:\n%s", out)
	}
	if i, j := strings.Index(out, "rcvd_rnr_err"), strings.Index(out, "sent_pkts"); i > j {
		t.Error("counters are not sorted")
	}

	out, err = run(t, newStatsCmd(fakeSource(fakeDevs)), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got []portCounters
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got) != 2 || got[0].Device != "rxe0" || got[0].Counters["sent_pkts"] != 12 || got[1].Counters["port_xmit_data"] != 7 {
		t.Errorf("stats --json = %+v", got)
	}

	if _, err := run(t, newStatsCmd(fakeSource(fakeDevs)), "mlx5_9"); err == nil ||
		!strings.Contains(err.Error(), `no RDMA device "mlx5_9" (devices: [rxe0 ibp0])`) {
		t.Errorf("stats of an unknown device: %v", err)
	}
	failing := fakeSource(fakeDevs)
	failing.counters = func(string, uint8) (map[string]uint64, error) { return nil, fmt.Errorf("boom") }
	if _, err := run(t, newStatsCmd(failing)); err == nil || err.Error() != "boom" {
		t.Errorf("stats with a failing counter read: %v", err)
	}
}

// TestDevicesLive runs both commands against the real device in the
// Soft-RoCE guest of testbed/.
func TestDevicesLive(t *testing.T) {
	dev := os.Getenv("RDMARPC_TEST_DEV")
	if dev == "" {
		t.Skip("RDMARPC_TEST_DEV not set: this test needs a real RDMA device (it runs in the Soft-RoCE guest of testbed/)")
	}
	out, err := run(t, newDevicesCmd(hostDevices))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rdmarpc devices:\n%s", out)
	if ip := os.Getenv("RDMARPC_TEST_IP"); !strings.Contains(out, dev) || !strings.Contains(out, "::ffff:"+ip) ||
		!strings.Contains(out, "ACTIVE") {
		t.Errorf("devices output lacks %s, ACTIVE or the GID of %s", dev, ip)
	}
	out, err = run(t, newDevicesCmd(hostDevices), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var devs []rdmadev.Device
	if err := json.Unmarshal([]byte(out), &devs); err != nil || len(devs) == 0 || devs[0].Ports[0].ActiveMTU == 0 {
		t.Errorf("devices --json = %s (%v)", out, err)
	}
	out, err = run(t, newStatsCmd(hostDevices), dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rdmarpc stats %s:\n%s", dev, out)
	if !strings.Contains(out, dev+" port 1") || !strings.Contains(out, "rcvd_pkts") {
		t.Errorf("stats output lacks %s port 1 counters", dev)
	}
}
