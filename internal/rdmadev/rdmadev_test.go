package rdmadev

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testdata/sys/class/infiniband holds three devices:
//   - rxe0: Soft-RoCE on dummy0 (RoCE v2 GIDs only, like kernel 6.1's rxe),
//     GIDs fe80::…, ::ffff:10.9.9.1 (index 1), 2001:db8::1 (index 2)
//   - mlx5_0: port 1 on eth1 with v1 and v2 GIDs for 192.168.1.5 (v2 at
//     index 3), port 2 on eth2 DOWN; both counters and hw_counters
//   - ibp0: an InfiniBand port (no netdev), LID 0x1a
var testInterfaces = []netIface{
	{Name: "lo", MTU: 65536, Up: true, Addrs: ips("127.0.0.1", "::1")},
	{Name: "dummy0", MTU: 1500, Up: true, Addrs: ips("10.9.9.1", "2001:db8::1", "fe80::7c18:ccff:fe57:4592")},
	{Name: "eth1", MTU: 9000, Up: true, Addrs: ips("192.168.1.5")},
	{Name: "eth2", MTU: 1500, Up: true, Addrs: ips("192.168.2.5")},
	{Name: "eth3", MTU: 1500, Up: true, Addrs: ips("172.16.0.1")},
}

func ips(ss ...string) []net.IP {
	var out []net.IP
	for _, s := range ss {
		out = append(out, net.ParseIP(s))
	}
	return out
}

// fakeSystem reads the tree under root; the rdmamap hooks are replaced by
// the same directory walks rdmamap does on /sys.
func fakeSystem(root string, ifs []netIface) *system {
	s := &system{root: root, interfaces: func() ([]netIface, error) { return ifs, nil }}
	s.deviceNames = func() []string { return dirNames(s.classDir()) }
	s.ports = func(dev string) []string { return dirNames(filepath.Join(s.classDir(), dev, "ports")) }
	s.deviceForNetdev = func(netdev string) (string, error) {
		for _, dev := range s.deviceNames() {
			for _, port := range s.ports(dev) {
				dir := filepath.Join(s.classDir(), dev, "ports", port, "gid_attrs/ndevs")
				for _, idx := range dirNames(dir) {
					if v, _ := readAttr(filepath.Join(dir, idx)); v == netdev {
						return dev, nil
					}
				}
			}
		}
		return "", fmt.Errorf("rdma device not found for netdev %v", netdev)
	}
	return s
}

func dirNames(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func gid(s string) (g [16]byte) {
	copy(g[:], net.ParseIP(s).To16())
	return g
}

func TestForIP(t *testing.T) {
	s := fakeSystem("testdata", testInterfaces)
	for _, tc := range []struct {
		ip      string
		want    Endpoint
		errWith string // non-empty: an ErrNoDevice error containing this
	}{
		{ip: "10.9.9.1", want: Endpoint{Device: "rxe0", Port: 1, GIDIndex: 1, GID: gid("10.9.9.1"), Netdev: "dummy0"}},
		{ip: "2001:db8::1", want: Endpoint{Device: "rxe0", Port: 1, GIDIndex: 2, GID: gid("2001:db8::1"), Netdev: "dummy0"}},
		// The RoCE v2 entry, not the v1 entry for the same address.
		{ip: "192.168.1.5", want: Endpoint{Device: "mlx5_0", Port: 1, GIDIndex: 3, GID: gid("192.168.1.5"), Netdev: "eth1"}},
		// "Any": ibp0 has no RoCE v2 GID; mlx5_0 port 1 has two, the IPv4 one wins.
		{ip: "0.0.0.0", want: Endpoint{Device: "mlx5_0", Port: 1, GIDIndex: 3, GID: gid("192.168.1.5"), Netdev: "eth1"}},
		{ip: "::", want: Endpoint{Device: "mlx5_0", Port: 1, GIDIndex: 3, GID: gid("192.168.1.5"), Netdev: "eth1"}},
		{ip: "192.168.2.5", errWith: "mlx5_0 port 2, which is DOWN"},
		{ip: "172.16.0.1", errWith: "172.16.0.1 is on eth3, which no RDMA device serves"},
		{ip: "127.0.0.1", errWith: "127.0.0.1 is on lo, which no RDMA device serves"},
		{ip: "10.1.1.1", errWith: "10.1.1.1 is not an address of this host (interfaces: lo, dummy0, eth1, eth2, eth3)"},
		{ip: "fe80::1", errWith: "not an address of this host"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			ep, err := s.forIP(net.ParseIP(tc.ip))
			if tc.errWith != "" {
				if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), tc.errWith) {
					t.Fatalf("ForIP(%s) = %+v, %v; want an ErrNoDevice error containing %q", tc.ip, ep, err, tc.errWith)
				}
				return
			}
			if err != nil || ep != tc.want {
				t.Fatalf("ForIP(%s) = %+v, %v; want %+v", tc.ip, ep, err, tc.want)
			}
		})
	}
	if _, err := s.forIP(nil); err == nil {
		t.Error("ForIP(nil) succeeded")
	}
}

// TestForIPNoRoCEv2GID: the address is on a device's netdev, but only as a
// RoCE v1 GID.
func TestForIPNoRoCEv2GID(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "sys/class/infiniband/mlx4_0/ports/1")
	writeFiles(t, p, map[string]string{
		"state":                "4: ACTIVE",
		"gids/0":               "0000:0000:0000:0000:0000:ffff:0a00:0001",
		"gid_attrs/types/0":    "IB/RoCE v1",
		"gid_attrs/ndevs/0":    "eth0",
		"hw_counters/bad":      "12x",
		"hw_counters/rnr_errs": "0",
	})
	s := fakeSystem(root, []netIface{{Name: "eth0", Addrs: ips("10.0.0.1")}})
	_, err := s.forIP(net.ParseIP("10.0.0.1"))
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "no port of mlx4_0 has a RoCE v2 GID") ||
		!strings.Contains(err.Error(), "[0] 10.0.0.1 IB/RoCE v1 eth0") {
		t.Fatalf("ForIP with only a v1 GID = %v", err)
	}
	if _, err := s.forIP(net.IPv4zero); !errors.Is(err, ErrNoDevice) ||
		!strings.Contains(err.Error(), "looked at: mlx4_0 port 1 ACTIVE") {
		t.Fatalf("ForIP(0.0.0.0) with only a v1 GID = %v", err)
	}
	// A counter that does not parse is an error, not a zero.
	if _, err := s.countersOf("mlx4_0", 1); err == nil || !strings.Contains(err.Error(), `hw_counters/bad of mlx4_0 port 1: "12x" is not a number`) {
		t.Fatalf("Counters with a garbled counter = %v", err)
	}
}

func TestNoDevices(t *testing.T) {
	s := fakeSystem(t.TempDir(), testInterfaces)
	devs, err := s.list()
	if err != nil || devs == nil || len(devs) != 0 {
		t.Fatalf("List() with no devices = %#v, %v; want an empty list", devs, err)
	}
	_, err = s.forIP(net.ParseIP("10.9.9.1"))
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "RDMA devices: none (is rdma_rxe loaded") {
		t.Fatalf("ForIP with no devices = %v", err)
	}
	if _, err := s.forIP(net.IPv4zero); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "looked at: none") {
		t.Fatalf("ForIP(any) with no devices = %v", err)
	}
	if _, err := s.countersOf("rxe0", 1); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Counters with no devices = %v", err)
	}
}

func TestList(t *testing.T) {
	s := fakeSystem("testdata", testInterfaces)
	devs, err := s.list()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"ibp0", "mlx5_0", "rxe0"}) {
		t.Fatalf("devices %v", names)
	}
	ib, mlx, rxe := devs[0], devs[1], devs[2]

	if rxe.NodeGUID != "7c18:ccff:fe57:4592" || rxe.NodeType != "CA" || !slices.Equal(rxe.Netdevs, []string{"dummy0"}) || len(rxe.Ports) != 1 {
		t.Errorf("rxe0 = %+v", rxe)
	}
	p := rxe.Ports[0]
	want := Port{Num: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Rate: "10 Gb/sec (1X QDR)",
		ActiveMTU: 1024, NetdevMTU: 1500, Netdevs: []string{"dummy0"}}
	if p.Num != want.Num || p.State != want.State || p.PhysState != want.PhysState || p.LinkLayer != want.LinkLayer ||
		p.Rate != want.Rate || p.ActiveMTU != want.ActiveMTU || p.NetdevMTU != want.NetdevMTU || !slices.Equal(p.Netdevs, want.Netdevs) {
		t.Errorf("rxe0 port = %+v\nwant %+v", p, want)
	}
	wantGIDs := []GIDEntry{
		{0, net.ParseIP("fe80::7c18:ccff:fe57:4592"), "RoCE v2", "dummy0"},
		{1, net.ParseIP("10.9.9.1"), "RoCE v2", "dummy0"},
		{2, net.ParseIP("2001:db8::1"), "RoCE v2", "dummy0"},
	}
	if !slices.EqualFunc(p.GIDs, wantGIDs, func(a, b GIDEntry) bool {
		return a.Index == b.Index && a.GID.Equal(b.GID) && a.Type == b.Type && a.Netdev == b.Netdev
	}) {
		t.Errorf("rxe0 GIDs = %v\nwant %v", p.GIDs, wantGIDs)
	}

	if len(mlx.Ports) != 2 || !slices.Equal(mlx.Netdevs, []string{"eth1", "eth2"}) {
		t.Fatalf("mlx5_0 = %+v", mlx)
	}
	if p1, p2 := mlx.Ports[0], mlx.Ports[1]; p1.ActiveMTU != 4096 || len(p1.GIDs) != 4 || p1.GIDs[2].Type != "IB/RoCE v1" ||
		p2.State != "DOWN" || p2.PhysState != "Disabled" || !slices.Equal(p2.Netdevs, []string{"eth2"}) {
		t.Errorf("mlx5_0 ports = %+v", mlx.Ports)
	}

	if len(ib.Ports) != 1 || ib.Ports[0].LinkLayer != "InfiniBand" || ib.Ports[0].LID != 0x1a ||
		ib.Ports[0].ActiveMTU != 0 || len(ib.Netdevs) != 0 || ib.Netdevs == nil || ib.Ports[0].GIDs[0].Netdev != "" {
		t.Errorf("ibp0 = %+v", ib)
	}
}

func TestCounters(t *testing.T) {
	s := fakeSystem("testdata", testInterfaces)
	c, err := s.countersOf("rxe0", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"rcvd_rnr_err": 0, "send_rnr_err": 0, "retry_exceeded_err": 0,
		"retry_rnr_exceeded_err": 0, "sent_pkts": 1234, "rcvd_pkts": 1200}
	if fmt.Sprint(c) != fmt.Sprint(want) { // lifespan is a setting: left out
		t.Errorf("rxe0 counters = %v\nwant %v", c, want)
	}
	c, err = s.countersOf("mlx5_0", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c["port_xmit_data"] != 100 || c["out_of_sequence"] != 2 || len(c) != 5 {
		t.Errorf("mlx5_0 counters (both directories) = %v", c)
	}
	if _, err := s.countersOf("mlx5_0", 2); err == nil || !strings.Contains(err.Error(), "no counters or hw_counters") {
		t.Errorf("port without counters = %v", err)
	}
	if _, err := s.countersOf("mlx5_0", 3); err == nil || !strings.Contains(err.Error(), "has no port 3 (ports: [1 2])") {
		t.Errorf("missing port = %v", err)
	}
	if _, err := s.countersOf("rxe9", 1); !errors.Is(err, ErrNoDevice) ||
		!strings.Contains(err.Error(), `no RDMA device "rxe9" (devices: ibp0, mlx5_0, rxe0)`) {
		t.Errorf("unknown device = %v", err)
	}
}

func TestRoCEMTU(t *testing.T) {
	for _, tc := range []struct{ netdev, want int }{
		{0, 0}, {200, 256}, {1100, 512}, {1500, 1024}, {2200, 2048}, {4000, 2048}, {4200, 4096}, {9000, 4096},
	} {
		if got := roceMTU(tc.netdev); got != tc.want {
			t.Errorf("roceMTU(%d) = %d, want %d", tc.netdev, got, tc.want)
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEndpoints: every ACTIVE port once, with its IPv4 RoCE v2 GID (or GID
// 0 on InfiniBand), narrowed by devices, netdevs and a GID index.
func TestEndpoints(t *testing.T) {
	s := fakeSystem("testdata", testInterfaces)
	names := func(eps []Endpoint) string {
		var l []string
		for _, ep := range eps {
			l = append(l, fmt.Sprintf("%s:%d[%d]%v/%s/ib=%v", ep.Device, ep.Port, ep.GIDIndex, net.IP(ep.GID[:]), ep.Netdev, ep.InfiniBand))
		}
		return strings.Join(l, " ")
	}
	for _, tc := range []struct {
		sel  Selection
		want string
	}{
		{Selection{}, "ibp0:1[0]fe80::2:c903:40:1a2c//ib=true mlx5_0:1[3]192.168.1.5/eth1/ib=false rxe0:1[1]10.9.9.1/dummy0/ib=false"},
		{Selection{Devices: []string{"rxe0", "mlx5_0:2"}}, "rxe0:1[1]10.9.9.1/dummy0/ib=false"},
		{Selection{Devices: []string{"mlx5_0:1"}}, "mlx5_0:1[3]192.168.1.5/eth1/ib=false"},
		{Selection{Netdevs: []string{"eth1"}}, "mlx5_0:1[3]192.168.1.5/eth1/ib=false"},
		{Selection{Devices: []string{"rxe0"}, GIDIndex: 2}, "rxe0:1[2]2001:db8::1/dummy0/ib=false"},
		{Selection{Devices: []string{"rxe0"}, GIDIndex: 9}, ""},
	} {
		eps, err := s.endpoints(tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(eps); got != tc.want {
			t.Errorf("endpoints(%+v) = %s\nwant %s", tc.sel, got, tc.want)
		}
	}
}

// TestCurrent: an endpoint is current while its GID table entry holds its
// GID (as RoCE v2 on RoCE); an address that moved to another entry leaves
// the old one empty, or holding another address or the v1 twin.
func TestCurrent(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "sys/class/infiniband/rxe9/ports/1")
	writeFiles(t, p, map[string]string{
		"gids/0":            "0000:0000:0000:0000:0000:ffff:0a09:0c09", // another address
		"gid_attrs/types/0": "RoCE v2",
		"gids/1":            "0000:0000:0000:0000:0000:0000:0000:0000", // emptied
		"gids/2":            "0000:0000:0000:0000:0000:ffff:0a09:0c01", // the address, v1
		"gid_attrs/types/2": "IB/RoCE v1",
		"gids/3":            "0000:0000:0000:0000:0000:ffff:0a09:0c01", // the address, v2
		"gid_attrs/types/3": "RoCE v2",
	})
	writeFiles(t, filepath.Join(root, "sys/class/infiniband/ib9/ports/1"), map[string]string{
		"gids/0": "fe80:0000:0000:0000:0002:c903:0010:0001",
	})
	s := fakeSystem(root, nil)
	roce := func(idx int) Endpoint {
		return Endpoint{Device: "rxe9", Port: 1, GIDIndex: idx, GID: gid("10.9.12.1"), Netdev: "rdmanet3"}
	}
	ib := Endpoint{Device: "ib9", Port: 1, GID: gid("fe80::2:c903:10:1"), InfiniBand: true}
	for _, tc := range []struct {
		name string
		ep   Endpoint
		want bool
	}{
		{"v2 entry holds it", roce(3), true},
		{"another address", roce(0), false},
		{"emptied", roce(1), false},
		{"the v1 entry", roce(2), false},
		{"no such entry", roce(7), false},
		{"no such device", Endpoint{Device: "rxe8", Port: 1, GIDIndex: 3, GID: gid("10.9.12.1")}, false},
		{"InfiniBand entry 0", ib, true},
	} {
		if got := s.current(tc.ep); got != tc.want {
			t.Errorf("%s: current(%+v) = %v, want %v", tc.name, tc.ep, got, tc.want)
		}
	}
}
