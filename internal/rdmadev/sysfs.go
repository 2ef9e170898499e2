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

	"github.com/Mellanox/rdmamap"
)

// system is where device facts come from: the real sysfs and network stack,
// or a fake tree and interface list in tests. The parsing below is the same
// for both.
type system struct {
	root string // sysfs lives at root/sys

	// deviceNames, ports and deviceForNetdev are rdmamap's on a real system.
	deviceNames     func() []string
	ports           func(dev string) []string
	deviceForNetdev func(netdev string) (string, error)
	interfaces      func() ([]netIface, error)
}

// netIface is the part of a network interface rdmadev needs.
type netIface struct {
	Name  string
	MTU   int
	Up    bool
	Addrs []net.IP
}

var host = &system{
	root:            "/",
	deviceNames:     rdmamap.GetRdmaDeviceList,
	ports:           rdmamap.GetPorts,
	deviceForNetdev: rdmamap.GetRdmaDeviceForNetdevice,
	interfaces:      hostInterfaces,
}

func hostInterfaces() ([]netIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("rdma: list network interfaces: %w", err)
	}
	out := make([]netIface, 0, len(ifs))
	for _, i := range ifs {
		ni := netIface{Name: i.Name, MTU: i.MTU, Up: i.Flags&net.FlagUp != 0}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("rdma: addresses of %s: %w", i.Name, err)
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ni.Addrs = append(ni.Addrs, ipn.IP)
			}
		}
		out = append(out, ni)
	}
	return out, nil
}

func (s *system) classDir() string { return filepath.Join(s.root, "sys/class/infiniband") }

func (s *system) portDir(dev string, port uint8) string {
	return filepath.Join(s.classDir(), dev, "ports", strconv.Itoa(int(port)))
}

// sortedDevices returns the device names in order.
func (s *system) sortedDevices() []string {
	devs := slices.Clone(s.deviceNames())
	slices.Sort(devs)
	return devs
}

// sortedPorts returns a device's port numbers in order (entries that are
// not port numbers are ignored).
func (s *system) sortedPorts(dev string) []uint8 {
	var out []uint8
	for _, p := range s.ports(dev) {
		if n, err := strconv.ParseUint(p, 10, 8); err == nil && n > 0 {
			out = append(out, uint8(n))
		}
	}
	slices.Sort(out)
	return out
}

// readAttr reads one sysfs attribute, trimmed.
func readAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// enumName turns sysfs's "4: ACTIVE" or "1: CA" into "ACTIVE" or "CA".
func enumName(v string) string {
	if _, name, ok := strings.Cut(v, ": "); ok {
		return name
	}
	return v
}

// GIDEntry is one populated entry of a port's GID table.
type GIDEntry struct {
	Index  int    `json:"index"`
	GID    net.IP `json:"gid"`
	Type   string `json:"type"`             // "RoCE v2", "IB/RoCE v1"
	Netdev string `json:"netdev,omitempty"` // the netdev the entry belongs to (RoCE)
}

// gids reads the populated entries of a port's GID table. Unpopulated
// entries read as the zero GID (and their type and netdev fail to read with
// EINVAL): they are skipped.
func (s *system) gids(dev string, port uint8) ([]GIDEntry, error) {
	return s.gidsUntil(dev, port, nil)
}

// gidsUntil reads the populated GID entries in index order and stops after
// the first for which stop reports true. Tables are long (rxe has 1024
// entries) and the entry sought is usually among the first, so stopping
// early saves a thousand sysfs reads per lookup.
func (s *system) gidsUntil(dev string, port uint8, stop func(GIDEntry) bool) ([]GIDEntry, error) {
	dir := s.portDir(dev, port)
	ents, err := os.ReadDir(filepath.Join(dir, "gids"))
	if err != nil {
		return nil, fmt.Errorf("rdma: GID table of %s port %d: %w", dev, port, err)
	}
	idxs := make([]int, 0, len(ents))
	for _, e := range ents {
		if idx, err := strconv.Atoi(e.Name()); err == nil {
			idxs = append(idxs, idx)
		}
	}
	slices.Sort(idxs)
	var out []GIDEntry
	for _, idx := range idxs {
		name := strconv.Itoa(idx)
		v, err := readAttr(filepath.Join(dir, "gids", name))
		if err != nil {
			continue
		}
		ip := net.ParseIP(v)
		if ip == nil || ip.IsUnspecified() {
			continue
		}
		typ, err := readAttr(filepath.Join(dir, "gid_attrs/types", name))
		if err != nil {
			continue // removed while we read, or not populated after all
		}
		ndev, _ := readAttr(filepath.Join(dir, "gid_attrs/ndevs", name)) // none on InfiniBand
		g := GIDEntry{Index: idx, GID: ip, Type: typ, Netdev: ndev}
		out = append(out, g)
		if stop != nil && stop(g) {
			break
		}
	}
	return out, nil
}

// roceV2 is the sysfs name of the RoCE v2 GID type.
const roceV2 = "RoCE v2"

// counterSkip lists hw_counters entries that are settings, not counters.
var counterSkip = map[string]bool{"lifespan": true}

// counters reads a port's hw_counters and counters directories. A counter
// that cannot be read or parsed is an error, never a silent zero: callers
// check that error counters stay at zero.
func (s *system) counters(dev string, port uint8) (map[string]uint64, error) {
	out := map[string]uint64{}
	found := false
	for _, sub := range []string{"counters", "hw_counters"} { // hw_counters wins a name clash
		dir := filepath.Join(s.portDir(dev, port), sub)
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rdma: counters of %s port %d: %w", dev, port, err)
		}
		found = true
		for _, e := range ents {
			if e.IsDir() || counterSkip[e.Name()] {
				continue
			}
			v, err := readAttr(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("rdma: counter %s/%s of %s port %d: %w", sub, e.Name(), dev, port, err)
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("rdma: counter %s/%s of %s port %d: %q is not a number", sub, e.Name(), dev, port, v)
			}
			out[e.Name()] = n
		}
	}
	if !found {
		return nil, fmt.Errorf("rdma: %s port %d has no counters or hw_counters in sysfs", dev, port)
	}
	return out, nil
}
