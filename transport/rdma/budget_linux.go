package rdma

import "syscall"

func totalRAM() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// memlockLimit is RLIMIT_MEMLOCK's soft limit, or 0 when unlimited or
// unknown.
func memlockLimit() int64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(8 /* RLIMIT_MEMLOCK */, &rl) != nil || rl.Cur == ^uint64(0) || rl.Cur > 1<<62 {
		return 0
	}
	return int64(rl.Cur)
}
