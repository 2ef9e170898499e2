//go:build !linux

package rdmadev

// Without Linux there is no RDMA device, and no limit to report.
func totalRAM() int64 { return 0 }
func memlock() int64  { return 0 }
