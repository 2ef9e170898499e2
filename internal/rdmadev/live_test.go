package rdmadev

import (
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
)

// These run against the real sysfs in the Soft-RoCE guest of testbed/,
// which sets the variables below.
func liveEnv(t *testing.T) (dev string, ip net.IP, gidIndex int) {
	t.Helper()
	dev = os.Getenv("RDMARPC_TEST_DEV")
	if dev == "" {
		t.Skip("RDMARPC_TEST_DEV not set: this test needs a real RDMA device (it runs in the Soft-RoCE guest of testbed/)")
	}
	ip = net.ParseIP(os.Getenv("RDMARPC_TEST_IP"))
	gidIndex, err := strconv.Atoi(os.Getenv("RDMARPC_TEST_GID_INDEX"))
	if ip == nil || err != nil {
		t.Fatalf("RDMARPC_TEST_IP=%q and RDMARPC_TEST_GID_INDEX=%q must be set with RDMARPC_TEST_DEV",
			os.Getenv("RDMARPC_TEST_IP"), os.Getenv("RDMARPC_TEST_GID_INDEX"))
	}
	return dev, ip, gidIndex
}

func TestLiveForIP(t *testing.T) {
	dev, ip, gidIndex := liveEnv(t)
	ep, err := ForIP(ip)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ForIP(%v) = %+v", ip, ep)
	if ep.Device != dev || ep.Port != 1 || ep.GIDIndex != gidIndex || !net.IP(ep.GID[:]).Equal(ip) {
		t.Errorf("ForIP(%v) = %+v, want %s port 1 GID index %d", ip, ep, dev, gidIndex)
	}
	if nd := os.Getenv("RDMARPC_TEST_NETDEV"); nd != "" && ep.Netdev != nd {
		t.Errorf("netdev %q, want %q", ep.Netdev, nd)
	}
	anyEP, err := ForIP(net.IPv4zero)
	if err != nil || anyEP.Device != dev {
		t.Errorf("ForIP(0.0.0.0) = %+v, %v; want an endpoint on %s", anyEP, err, dev)
	}
	if _, err := ForIP(net.ParseIP("127.0.0.1")); !errors.Is(err, ErrNoDevice) {
		t.Errorf("ForIP(127.0.0.1) = %v, want ErrNoDevice", err)
	} else {
		t.Logf("ForIP(127.0.0.1): %v", err)
	}
}

func TestLiveList(t *testing.T) {
	dev, ip, gidIndex := liveEnv(t)
	devs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(devs, func(d Device) bool { return d.Name == dev })
	if i < 0 {
		t.Fatalf("List() = %+v, no %s", devs, dev)
	}
	d := devs[i]
	t.Logf("%+v", d)
	if len(d.Ports) == 0 || d.Ports[0].State != "ACTIVE" || d.Ports[0].LinkLayer != "Ethernet" || d.Ports[0].ActiveMTU == 0 {
		t.Fatalf("%s ports = %+v", dev, d.Ports)
	}
	if !slices.ContainsFunc(d.Ports[0].GIDs, func(g GIDEntry) bool {
		return g.Index == gidIndex && g.GID.Equal(ip) && g.Type == "RoCE v2"
	}) {
		t.Errorf("%s port 1 GIDs %v lack [%d] %v RoCE v2", dev, d.Ports[0].GIDs, gidIndex, ip)
	}
	if len(d.Netdevs) == 0 {
		t.Errorf("%s has no netdev", dev)
	}
}

func TestLiveCounters(t *testing.T) {
	dev, _, _ := liveEnv(t)
	c, err := Counters(dev, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s/1 counters: %v", dev, c)
	// rxe's hw_counters; the ones rdmarpc checks stay at zero.
	for _, name := range []string{"sent_pkts", "rcvd_pkts", "rcvd_rnr_err", "send_rnr_err", "retry_exceeded_err"} {
		if _, ok := c[name]; !ok {
			t.Errorf("counter %s missing", name)
		}
	}
	if _, ok := c["lifespan"]; ok {
		t.Error("lifespan (a setting) reported as a counter")
	}
}
