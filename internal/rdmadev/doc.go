// Package rdmadev finds RDMA devices and reads what the kernel says about
// them in sysfs: which device, port and GID serve an IP address (ForIP), the
// devices with their ports, GIDs and netdevs (List), and their counters
// (Counters).
//
// It is pure Go (no cgo, no libibverbs): it works in a CGO_ENABLED=0 build,
// so tools can report on devices even where the verbs binding is a stub. It
// uses github.com/Mellanox/rdmamap to enumerate devices and ports and to map
// a netdev to its RDMA device, and reads the rest of
// /sys/class/infiniband/<dev>/ports/<port>/ itself.
//
// Only RoCE v2 endpoints are resolved: the GID of an IP address is the
// port's "RoCE v2" GID entry equal to the address (::ffff:a.b.c.d for IPv4).
//
// It must not know about verbs objects or about rdmarpc's transport.
package rdmadev
