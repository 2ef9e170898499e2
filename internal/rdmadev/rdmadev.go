package rdmadev

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNoDevice is wrapped by every error that says no RDMA device (or no
// active port, or no RoCE v2 GID) serves what was asked for. The RDMA
// transport wraps it in turn with transport.ErrNoDevice.
var ErrNoDevice = errors.New("no RDMA device serves this address")

// Endpoint is the RDMA side of an IP address: the device, port and GID
// index a QP uses to send from that address.
type Endpoint struct {
	Device   string   // "rxe0"
	Port     uint8    // from 1
	GIDIndex int      // the RoCE v2 entry for the address
	GID      [16]byte // the address as a GID (::ffff:a.b.c.d for IPv4)
	Netdev   string   // the network interface the address is on
	// InfiniBand: the port's link layer is InfiniBand, whose GIDs are not
	// IP addresses (the first 8 bytes are the subnet prefix); otherwise
	// RoCE v2.
	InfiniBand bool
}

// Selection narrows the endpoints a host offers (Endpoints). The zero
// value selects every ACTIVE port.
type Selection struct {
	// Devices are device names ("mlx5_0") or device ports ("mlx5_0:1");
	// empty: every device.
	Devices []string
	// Netdevs keeps the RoCE ports whose GID belongs to one of these
	// network interfaces ("net1"); empty: any. InfiniBand ports have no
	// netdev and are left out when Netdevs is set.
	Netdevs []string
	// GIDIndex is the GID table entry every selected port uses; 0: on
	// RoCE the RoCE v2 entry of an IPv4 address (else of a global IPv6
	// one), on InfiniBand entry 0.
	GIDIndex int
}

func (sel Selection) wantsPort(dev string, port uint8) bool {
	if len(sel.Devices) == 0 {
		return true
	}
	return slices.Contains(sel.Devices, dev) || slices.Contains(sel.Devices, fmt.Sprintf("%s:%d", dev, port))
}

// Endpoints returns one endpoint for every ACTIVE port that sel selects,
// in device and port order: the endpoints a server offers its clients
// (docs/rdma.md, "Endpoints"). A port without a usable GID (no RoCE v2
// entry yet, or not the one sel asks for) is left out. None is not an
// error: the list is empty.
func Endpoints(sel Selection) ([]Endpoint, error) { return host.endpoints(sel) }

// ActivePorts counts the ACTIVE ports of every device (without reading
// their GID tables): none means no RDMA path at all.
func ActivePorts() int {
	n := 0
	for _, dev := range host.sortedDevices() {
		for _, port := range host.sortedPorts(dev) {
			if host.portState(dev, port) == "ACTIVE" {
				n++
			}
		}
	}
	return n
}

func (s *system) endpoints(sel Selection) ([]Endpoint, error) {
	var out []Endpoint
	for _, dev := range s.sortedDevices() {
		for _, port := range s.sortedPorts(dev) {
			if !sel.wantsPort(dev, port) || s.portState(dev, port) != "ACTIVE" {
				continue
			}
			ll, _ := readAttr(filepath.Join(s.portDir(dev, port), "link_layer"))
			ib := ll == "InfiniBand"
			if ib && len(sel.Netdevs) > 0 {
				continue
			}
			// Tables are long (rxe: 1024 entries, slow to read under
			// emulation): stop at the entry that cannot be bettered.
			gids, err := s.gidsUntil(dev, port, func(g GIDEntry) bool {
				switch {
				case sel.GIDIndex > 0:
					return g.Index >= sel.GIDIndex
				case ib:
					return g.Index >= 0
				}
				return g.Type == roceV2 && g.GID.To4() != nil && (len(sel.Netdevs) == 0 || slices.Contains(sel.Netdevs, g.Netdev))
			})
			if err != nil {
				return nil, err
			}
			var best *GIDEntry
			for i := range gids {
				g := &gids[i]
				switch {
				case sel.GIDIndex > 0 && g.Index != sel.GIDIndex:
					continue
				case ib:
					if sel.GIDIndex > 0 || g.Index == 0 {
						best = g
					}
					continue
				case g.Type != roceV2 || (len(sel.Netdevs) > 0 && !slices.Contains(sel.Netdevs, g.Netdev)):
					continue
				case sel.GIDIndex > 0:
					best = g
				case g.GID.To4() != nil:
					if best == nil || best.GID.To4() == nil {
						best = g
					}
				case g.GID.IsGlobalUnicast() && best == nil:
					best = g
				}
			}
			if best != nil {
				ep := endpoint(dev, port, *best, best.Netdev)
				ep.InfiniBand = ib
				out = append(out, ep)
			}
		}
	}
	return out, nil
}

// Device is an RDMA device as sysfs describes it.
type Device struct {
	Name     string   `json:"name"`
	NodeGUID string   `json:"node_guid"`
	NodeType string   `json:"node_type"` // "CA", "RNIC", ...
	Ports    []Port   `json:"ports"`
	Netdevs  []string `json:"netdevs"` // every netdev the device serves
}

// Port is one port of a Device.
type Port struct {
	Num       uint8  `json:"port"`
	State     string `json:"state"`      // "ACTIVE", "DOWN", ...
	PhysState string `json:"phys_state"` // "LinkUp", "Disabled", ...
	LinkLayer string `json:"link_layer"` // "Ethernet" (RoCE) or "InfiniBand"
	Rate      string `json:"rate,omitempty"`
	LID       uint16 `json:"lid"`
	// ActiveMTU is the RDMA MTU in bytes. sysfs does not say it: for RoCE
	// it is estimated from the netdev's MTU the way providers set it (the
	// largest of 256…4096 that fits after the RoCE headers); 0 when
	// unknown. The verbs binding's QueryPort gives the exact value.
	ActiveMTU int        `json:"active_mtu,omitempty"`
	NetdevMTU int        `json:"netdev_mtu,omitempty"`
	GIDs      []GIDEntry `json:"gids"`
	Netdevs   []string   `json:"netdevs"`
}

// ForIP returns the endpoint that serves ip: the network interface that has
// the address, its RDMA device (via rdmamap) and the port's RoCE v2 GID
// entry equal to the address, on an ACTIVE port.
//
// An unspecified address (0.0.0.0 or ::) means "any": the first device (in
// name order) with an ACTIVE port that has a RoCE v2 GID, preferring an
// IPv4 GID; that GID's netdev is reported.
//
// When nothing serves ip the error wraps ErrNoDevice and says
// what was looked at.
func ForIP(ip net.IP) (Endpoint, error) { return host.forIP(ip) }

// List describes every RDMA device: ports, state, MTU, GIDs (with their
// types and netdevs). No device is not an error: the list is empty.
func List() ([]Device, error) { return host.list() }

// Counters returns the counters of a device's port: the files of sysfs
// ports/<port>/hw_counters (provider counters such as rcvd_rnr_err,
// retry_exceeded_err) and ports/<port>/counters (the standard port counters;
// port_xmit_data and port_rcv_data count 4-byte words), by file name. The
// hw_counters "lifespan" entry is a setting, not a counter, and is left out.
func Counters(device string, port uint8) (map[string]uint64, error) {
	return host.countersOf(device, port)
}

func (s *system) forIP(ip net.IP) (Endpoint, error) {
	if ip == nil {
		return Endpoint{}, errors.New("rdma: ForIP: nil IP")
	}
	if ip.IsUnspecified() {
		return s.anyEndpoint()
	}
	ifs, err := s.interfaces()
	if err != nil {
		return Endpoint{}, err
	}
	var ifc *netIface
	var names []string
	for i := range ifs {
		names = append(names, ifs[i].Name)
		if slices.ContainsFunc(ifs[i].Addrs, ip.Equal) {
			ifc = &ifs[i]
			break
		}
	}
	if ifc == nil {
		return Endpoint{}, fmt.Errorf("rdma: %v is not an address of this host (interfaces: %s): %w",
			ip, strings.Join(names, ", "), ErrNoDevice)
	}
	dev, err := s.deviceForNetdev(ifc.Name)
	if err != nil || dev == "" {
		return Endpoint{}, fmt.Errorf("rdma: %v is on %s, which no RDMA device serves (%v; RDMA devices: %s): %w",
			ip, ifc.Name, err, s.describeDevices(), ErrNoDevice)
	}
	want := ip.To16()
	match := func(g GIDEntry) bool {
		return g.Type == roceV2 && g.GID.Equal(want) && (g.Netdev == "" || g.Netdev == ifc.Name)
	}
	var seen []string
	for _, port := range s.sortedPorts(dev) {
		gids, err := s.gidsUntil(dev, port, match)
		if err != nil {
			return Endpoint{}, err
		}
		for _, g := range gids {
			seen = append(seen, fmt.Sprintf("port %d [%d] %v %s %s", port, g.Index, g.GID, g.Type, g.Netdev))
			if !match(g) {
				continue
			}
			if state := s.portState(dev, port); state != "ACTIVE" {
				return Endpoint{}, fmt.Errorf("rdma: %v is on %s, served by %s port %d, which is %s: %w",
					ip, ifc.Name, dev, port, state, ErrNoDevice)
			}
			return endpoint(dev, port, g, ifc.Name), nil
		}
	}
	return Endpoint{}, fmt.Errorf("rdma: %v is on %s (RDMA device %s), but no port of %s has a RoCE v2 GID for it (GIDs: %s): %w",
		ip, ifc.Name, dev, dev, orNone(seen), ErrNoDevice)
}

// Current reports whether ep's GID table entry still holds ep's GID (on
// RoCE, as a RoCE v2 entry). A RoCE GID is an IP address's: an address
// removed and added again (a NIC that went away and came back, a DHCP
// renewal) lands on whatever entry is free then, and the entry it had may
// be empty (a queue pair moved to RTR with it fails with ENODATA) or hold
// another address (its packets leave from that address, and the peer
// drops them). It reads two sysfs files: cheap enough to check before
// every handshake.
func Current(ep Endpoint) bool { return host.current(ep) }

func (s *system) current(ep Endpoint) bool {
	dir := s.portDir(ep.Device, ep.Port)
	name := strconv.Itoa(ep.GIDIndex)
	v, err := readAttr(filepath.Join(dir, "gids", name))
	if err != nil {
		return false
	}
	g := net.ParseIP(v)
	if g == nil || !g.Equal(net.IP(ep.GID[:])) {
		return false
	}
	if ep.InfiniBand {
		return true
	}
	typ, err := readAttr(filepath.Join(dir, "gid_attrs/types", name))
	return err == nil && typ == roceV2
}

func endpoint(dev string, port uint8, g GIDEntry, netdev string) Endpoint {
	ep := Endpoint{Device: dev, Port: port, GIDIndex: g.Index, Netdev: netdev}
	copy(ep.GID[:], g.GID.To16())
	return ep
}

func (s *system) anyEndpoint() (Endpoint, error) {
	var looked []string
	for _, dev := range s.sortedDevices() {
		for _, port := range s.sortedPorts(dev) {
			state := s.portState(dev, port)
			looked = append(looked, fmt.Sprintf("%s port %d %s", dev, port, state))
			if state != "ACTIVE" {
				continue
			}
			gids, err := s.gids(dev, port)
			if err != nil {
				return Endpoint{}, err
			}
			var best *GIDEntry
			for i := range gids {
				g := &gids[i]
				if g.Type != roceV2 {
					continue
				}
				if best == nil || (g.GID.To4() != nil && best.GID.To4() == nil) {
					best = g
				}
			}
			if best != nil {
				return endpoint(dev, port, *best, best.Netdev), nil
			}
		}
	}
	return Endpoint{}, fmt.Errorf("rdma: no ACTIVE RDMA port with a RoCE v2 GID (looked at: %s): %w",
		orNone(looked), ErrNoDevice)
}

// portState returns a port's state name ("ACTIVE"), or why it is unknown.
func (s *system) portState(dev string, port uint8) string {
	v, err := readAttr(filepath.Join(s.portDir(dev, port), "state"))
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return enumName(v)
}

func (s *system) describeDevices() string {
	devs := s.sortedDevices()
	if len(devs) == 0 {
		return "none (is rdma_rxe loaded and a link added, or the NIC's RDMA driver?)"
	}
	return strings.Join(devs, ", ")
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, "; ")
}

func (s *system) list() ([]Device, error) {
	ifs, err := s.interfaces()
	if err != nil {
		return nil, err
	}
	mtus := map[string]int{}
	for _, i := range ifs {
		mtus[i.Name] = i.MTU
	}
	devs := []Device{}
	for _, name := range s.sortedDevices() {
		d := Device{Name: name, Netdevs: []string{}}
		dir := filepath.Join(s.classDir(), name)
		d.NodeGUID, _ = readAttr(filepath.Join(dir, "node_guid"))
		if v, err := readAttr(filepath.Join(dir, "node_type")); err == nil {
			d.NodeType = enumName(v)
		}
		for _, pn := range s.sortedPorts(name) {
			p, err := s.port(name, pn, mtus)
			if err != nil {
				return nil, err
			}
			d.Ports = append(d.Ports, p)
			d.Netdevs = appendNew(d.Netdevs, p.Netdevs...)
		}
		// A netdev without any GID yet (no address) still belongs to the
		// device; rdmamap knows.
		for _, i := range ifs {
			if slices.Contains(d.Netdevs, i.Name) || i.Name == "lo" {
				continue
			}
			if dev, err := s.deviceForNetdev(i.Name); err == nil && dev == name {
				d.Netdevs = append(d.Netdevs, i.Name)
			}
		}
		slices.Sort(d.Netdevs)
		devs = append(devs, d)
	}
	return devs, nil
}

func (s *system) port(dev string, num uint8, mtus map[string]int) (Port, error) {
	dir := s.portDir(dev, num)
	p := Port{Num: num, State: s.portState(dev, num), GIDs: []GIDEntry{}, Netdevs: []string{}}
	if v, err := readAttr(filepath.Join(dir, "phys_state")); err == nil {
		p.PhysState = enumName(v)
	}
	p.LinkLayer, _ = readAttr(filepath.Join(dir, "link_layer"))
	p.Rate, _ = readAttr(filepath.Join(dir, "rate"))
	if v, err := readAttr(filepath.Join(dir, "lid")); err == nil {
		if n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 16); err == nil {
			p.LID = uint16(n)
		}
	}
	gids, err := s.gids(dev, num)
	if err != nil {
		return Port{}, err
	}
	if gids != nil {
		p.GIDs = gids
	}
	for _, g := range gids {
		if g.Netdev != "" {
			p.Netdevs = appendNew(p.Netdevs, g.Netdev)
		}
	}
	if len(p.Netdevs) > 0 {
		p.NetdevMTU = mtus[p.Netdevs[0]]
	}
	if p.LinkLayer == "Ethernet" {
		p.ActiveMTU = roceMTU(p.NetdevMTU)
	}
	return p, nil
}

// roceMTU estimates the RDMA MTU a RoCE port offers over a netdev MTU: the
// largest IB MTU that fits once the headers a RoCE packet may carry are
// taken off (96 bytes, the rule the kernel's iboe_get_mtu uses). 0 if the
// netdev MTU is unknown.
func roceMTU(netdevMTU int) int {
	if netdevMTU <= 0 {
		return 0
	}
	avail := netdevMTU - 96
	for mtu := 4096; mtu >= 256; mtu /= 2 {
		if avail >= mtu {
			return mtu
		}
	}
	return 256
}

func appendNew(l []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(l, v) {
			l = append(l, v)
		}
	}
	return l
}

func (s *system) countersOf(dev string, port uint8) (map[string]uint64, error) {
	if _, err := os.Stat(filepath.Join(s.classDir(), dev)); err != nil {
		return nil, fmt.Errorf("rdma: no RDMA device %q (devices: %s): %w", dev, s.describeDevices(), ErrNoDevice)
	}
	if !slices.Contains(s.sortedPorts(dev), port) {
		return nil, fmt.Errorf("rdma: device %s has no port %d (ports: %v)", dev, port, s.sortedPorts(dev))
	}
	return s.counters(dev, port)
}
