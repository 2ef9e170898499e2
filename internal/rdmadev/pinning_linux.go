package rdmadev

import "syscall"

func totalRAM() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// memlock is RLIMIT_MEMLOCK's soft limit: -1 when unlimited, 0 unknown.
func memlock() int64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(8 /* RLIMIT_MEMLOCK */, &rl) != nil {
		return 0
	}
	if rl.Cur == ^uint64(0) || rl.Cur > 1<<62 {
		return -1
	}
	return int64(rl.Cur)
}
