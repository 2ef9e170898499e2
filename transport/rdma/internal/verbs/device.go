//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -ldl
#cgo noescape rr_query_port
#cgo nocallback rr_query_port
#cgo noescape rr_query_gid
#cgo nocallback rr_query_gid
#cgo noescape rr_get_async_event
#cgo nocallback rr_get_async_event
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// errNoHeaders is load's error in a build made with cgo but without
// <infiniband/verbs.h>: shim.h then compiles its stub half.
var errNoHeaders = unsupported("rdma: this binary was built without libibverbs' headers " +
	"(<infiniband/verbs.h>), so it has no RDMA: install libibverbs-dev " +
	"(Debian, Ubuntu; rdma-core-devel on Fedora) and rebuild it with go build -a " +
	"(the build cache does not notice a new system header)")

// load loads libibverbs, once: every other C call needs it. Its error wraps
// ErrNotSupported and says what to install.
var load = sync.OnceValue(func() error {
	var msg [256]C.char
	switch C.rr_load(&msg[0], C.int(len(msg))) {
	case C.RR_LOAD_OK:
		return nil
	case C.RR_LOAD_NO_HEADERS:
		return errNoHeaders
	default:
		return unsupported(fmt.Sprintf("rdma: cannot load libibverbs (%s), so there is no RDMA: "+
			"install libibverbs and a provider (Debian, Ubuntu: apt-get install ibverbs-providers; "+
			"Fedora: dnf install rdma-core)", C.GoString(&msg[0])))
	}
})

// Devices lists the RDMA devices libibverbs sees. No device is not an
// error: the list is empty, also when the kernel has no RDMA support at all.
func Devices() ([]DeviceInfo, error) {
	if err := load(); err != nil {
		return nil, fmt.Errorf("rdma: list devices: %w", err)
	}
	var n C.int
	list, err := C.rr_get_device_list(&n)
	if list == nil {
		if err == syscall.ENOSYS {
			return []DeviceInfo{}, nil
		}
		return nil, verbError("ibv_get_device_list", err)
	}
	defer C.rr_free_device_list(list)
	devs := make([]DeviceInfo, 0, int(n))
	for _, d := range unsafe.Slice(list, int(n)) {
		devs = append(devs, DeviceInfo{
			Name:     C.GoString(C.rr_device_name(d)),
			GUID:     GUID(C.rr_device_guid(d)),
			NodeType: C.GoString(C.rr_device_node_type(d)),
		})
	}
	return devs, nil
}

// Context is an opened RDMA device (struct ibv_context). It owns the PDs,
// CQs and completion channels created from it, which must all be closed
// before it.
type Context struct {
	name  string
	ctx   *C.struct_ibv_context
	async *eventFile

	mu     sync.RWMutex // write-held by Close; read-held while creating children
	closed bool
	// children counts open PDs, CQs and completion channels.
	children atomic.Int64
}

// Open opens the device with the given name ("rxe0", "mlx5_0").
func Open(name string) (*Context, error) {
	if err := load(); err != nil {
		return nil, fmt.Errorf("rdma: open %s: %w", name, err)
	}
	var n C.int
	list, err := C.rr_get_device_list(&n)
	if list == nil {
		if err == syscall.ENOSYS {
			return nil, fmt.Errorf("rdma: open %q: this kernel has no RDMA support (ibv_get_device_list: %w)", name, err)
		}
		return nil, verbError("ibv_get_device_list", err)
	}
	defer C.rr_free_device_list(list)
	var names []string
	for _, d := range unsafe.Slice(list, int(n)) {
		dn := C.GoString(C.rr_device_name(d))
		if dn != name {
			names = append(names, dn)
			continue
		}
		var fd C.int
		ctx, err := C.rr_open_device(d, &fd)
		if ctx == nil {
			return nil, verbError("ibv_open_device "+name, err)
		}
		async, err := newEventFile(fd, name+" async events")
		if err != nil {
			C.rr_close_device(ctx)
			return nil, err
		}
		return &Context{name: name, ctx: ctx, async: async}, nil
	}
	return nil, fmt.Errorf("rdma: no RDMA device named %q (devices: %v): %w", name, names, syscall.ENODEV)
}

// Name returns the device's name.
func (c *Context) Name() string { return c.name }

// acquire read-locks c if it is open; release with c.mu.RUnlock.
func (c *Context) acquire() error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return closedError("device context " + c.name)
	}
	return nil
}

// QueryDevice returns the device's attributes and limits.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	if err := c.acquire(); err != nil {
		return DeviceAttr{}, err
	}
	defer c.mu.RUnlock()
	var a C.struct_rr_device_attr
	if rc, errno := C.rr_query_device(c.ctx, &a); rc != 0 {
		return DeviceAttr{}, rcError("ibv_query_device", int(rc), errno)
	}
	return DeviceAttr{
		FWVersion:       C.GoString(&a.fw_ver[0]),
		NodeGUID:        GUID(a.node_guid),
		SysImageGUID:    GUID(a.sys_image_guid),
		MaxMRSize:       uint64(a.max_mr_size),
		PageSizeCap:     uint64(a.page_size_cap),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVersion:       uint32(a.hw_ver),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		DeviceCapFlags:  uint32(a.device_cap_flags),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		MaxSRQ:          int(a.max_srq),
		MaxSRQWR:        int(a.max_srq_wr),
		PhysPortCount:   int(a.phys_port_cnt),
	}, nil
}

// QueryPort returns the attributes of a port (ports are numbered from 1).
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	if err := c.acquire(); err != nil {
		return PortAttr{}, err
	}
	defer c.mu.RUnlock()
	var a C.struct_rr_port_attr
	if rc, errno := C.rr_query_port(c.ctx, C.uint8_t(port), &a); rc != 0 {
		return PortAttr{}, rcError(fmt.Sprintf("ibv_query_port %s/%d", c.name, port), int(rc), errno)
	}
	return PortAttr{
		State:        PortState(a.state),
		MaxMTU:       mtuFromEnum(uint32(a.max_mtu)),
		ActiveMTU:    mtuFromEnum(uint32(a.active_mtu)),
		GIDTableLen:  int(a.gid_tbl_len),
		PortCapFlags: uint32(a.port_cap_flags),
		MaxMsgSize:   uint32(a.max_msg_sz),
		LID:          uint16(a.lid),
		SMLID:        uint16(a.sm_lid),
		LMC:          uint8(a.lmc),
		ActiveWidth:  uint8(a.active_width),
		ActiveSpeed:  uint8(a.active_speed),
		PhysState:    uint8(a.phys_state),
		LinkLayer:    LinkLayer(a.link_layer),
	}, nil
}

// QueryGID returns entry index of a port's GID table.
func (c *Context) QueryGID(port uint8, index int) (GID, error) {
	if err := c.acquire(); err != nil {
		return GID{}, err
	}
	defer c.mu.RUnlock()
	var g GID
	if rc, errno := C.rr_query_gid(c.ctx, C.uint8_t(port), C.int(index), (*C.uint8_t)(&g[0])); rc != 0 {
		return GID{}, rcError(fmt.Sprintf("ibv_query_gid %s/%d[%d]", c.name, port, index), int(rc), errno)
	}
	return g, nil
}

// AsyncEvent waits for the device's next asynchronous event (port up or
// down, QP fatal error, ...) and returns it, already acknowledged. It
// blocks no OS thread. One goroutine should own the event stream: concurrent
// calls are served one at a time. It returns ctx's error when ctx is done and
// an error wrapping ErrClosed once the context is closed.
func (c *Context) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	if err := c.acquire(); err != nil {
		return AsyncEvent{}, err
	}
	// The async file is closed (and its waiter released) before the device
	// is, so it is safe to use without holding c.mu while blocked.
	cctx := c.ctx
	c.mu.RUnlock()
	var ev AsyncEvent
	var verr error
	err := c.async.wait(ctx, func() bool {
		var typ, qpn, port C.uint32_t
		rc, errno := C.rr_get_async_event(cctx, &typ, &qpn, &port)
		if rc != 0 {
			if errno == syscall.EAGAIN {
				return false
			}
			verr = verbError("ibv_get_async_event", errno)
			return true
		}
		ev = AsyncEvent{Type: EventType(typ), QPNum: uint32(qpn), Port: uint8(port)}
		return true
	})
	if err != nil {
		return AsyncEvent{}, err
	}
	return ev, verr
}

// Close closes the device. It fails with an error wrapping syscall.EBUSY,
// leaving the context open, while PDs, CQs or completion channels created
// from it are open. A goroutine blocked in AsyncEvent returns ErrClosed.
// Close is idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if n := c.children.Load(); n > 0 {
		return busyError("device context "+c.name, n, "its PDs, CQs and completion channels")
	}
	c.closed = true
	c.async.close() // the dup'ed fd; waits for an ibv_get_async_event in flight
	if rc, errno := C.rr_close_device(c.ctx); rc != 0 {
		return rcError("ibv_close_device", int(rc), errno)
	}
	return nil
}
