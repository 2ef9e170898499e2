//go:build linux && cgo

package selftest

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include <infiniband/verbs.h>

// ibv_query_port is a macro in rdma-core's verbs.h, and cgo cannot call a macro.
static int selftest_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}
*/
import "C"

import (
	"fmt"
	"net"
	"syscall"
	"unsafe"
)

// deviceProbe is what probeDevice found out about one port of a verbs device.
type deviceProbe struct {
	MaxQP     int
	PortState int    // 4 is IBV_PORT_ACTIVE
	ActiveMTU int    // bytes
	LinkLayer int    // 2 is IBV_LINK_LAYER_ETHERNET (RoCE)
	GID       net.IP // the entry at the probed GID index
	LKey      uint32 // of a freshly registered region
	CQE       int    // capacity of a freshly created completion queue
}

const (
	portActive        = 4
	linkLayerEthernet = 2
)

// probeDevice opens the named device, queries it and the port, reads one GID entry, and
// allocates a protection domain, registers a buffer and creates a completion queue, freeing
// each object again in reverse order.
func probeDevice(name string, port, gidIndex int) (deviceProbe, error) {
	var p deviceProbe
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return p, fmt.Errorf("ibv_get_device_list: %v", err)
	}
	defer C.ibv_free_device_list(list)
	var dev *C.struct_ibv_device
	for _, d := range unsafe.Slice(list, int(n)) {
		if C.GoString(C.ibv_get_device_name(d)) == name {
			dev = d
		}
	}
	if dev == nil {
		return p, fmt.Errorf("no verbs device %q among %d", name, int(n))
	}

	ctx, err := C.ibv_open_device(dev)
	if ctx == nil {
		return p, fmt.Errorf("ibv_open_device(%s): %v", name, err)
	}
	defer C.ibv_close_device(ctx)

	var dattr C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &dattr); rc != 0 {
		return p, fmt.Errorf("ibv_query_device: %v", syscall.Errno(rc))
	}
	p.MaxQP = int(dattr.max_qp)

	var pattr C.struct_ibv_port_attr
	if rc := C.selftest_query_port(ctx, C.uint8_t(port), &pattr); rc != 0 {
		return p, fmt.Errorf("ibv_query_port(%d): %v", port, syscall.Errno(rc))
	}
	p.PortState = int(pattr.state)
	p.ActiveMTU = 128 << int(pattr.active_mtu) // IBV_MTU_256 is 1
	p.LinkLayer = int(pattr.link_layer)

	var gid C.union_ibv_gid
	if rc := C.ibv_query_gid(ctx, C.uint8_t(port), C.int(gidIndex), &gid); rc != 0 {
		return p, fmt.Errorf("ibv_query_gid(%d): %v", gidIndex, syscall.Errno(rc))
	}
	p.GID = net.IP(C.GoBytes(unsafe.Pointer(&gid), 16))

	pd, err := C.ibv_alloc_pd(ctx)
	if pd == nil {
		return p, fmt.Errorf("ibv_alloc_pd: %v", err)
	}
	defer C.ibv_dealloc_pd(pd)

	const size = 1 << 16
	buf := C.malloc(size)
	defer C.free(buf)
	mr, err := C.ibv_reg_mr(pd, buf, size, C.IBV_ACCESS_LOCAL_WRITE|C.IBV_ACCESS_REMOTE_WRITE)
	if mr == nil {
		return p, fmt.Errorf("ibv_reg_mr(%d bytes): %v (memlock ulimit?)", size, err)
	}
	defer C.ibv_dereg_mr(mr)
	p.LKey = uint32(mr.lkey)

	cq, err := C.ibv_create_cq(ctx, 64, nil, nil, 0)
	if cq == nil {
		return p, fmt.Errorf("ibv_create_cq: %v", err)
	}
	defer C.ibv_destroy_cq(cq)
	p.CQE = int(cq.cqe)
	return p, nil
}
