//go:build linux && cgo

package verbs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// gidNetdev returns the netdev a GID table entry belongs to (sysfs).
func gidNetdev(dev string, port, index int) (string, error) {
	p := filepath.Join("/sys/class/infiniband", dev, "ports", strconv.Itoa(port), "gid_attrs/ndevs", strconv.Itoa(index))
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("netdev of %s port %d GID %d: %w", dev, port, index, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// setLinkUp sets or clears IFF_UP on a network interface (needs
// CAP_NET_ADMIN: the test guest runs as root).
func setLinkUp(name string, up bool) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(ifr.name[:], name)
	ioctl := func(req uintptr) error {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			return fmt.Errorf("ioctl %#x on %s: %w", req, name, e)
		}
		return nil
	}
	if err := ioctl(syscall.SIOCGIFFLAGS); err != nil {
		return err
	}
	if up {
		ifr.flags |= syscall.IFF_UP
	} else {
		ifr.flags &^= syscall.IFF_UP
	}
	return ioctl(syscall.SIOCSIFFLAGS)
}
