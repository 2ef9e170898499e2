//go:build !linux

package rdma

// Without Linux there is no RDMA device: no budget is needed.
func totalRAM() int64     { return 0 }
func memlockLimit() int64 { return 0 }
