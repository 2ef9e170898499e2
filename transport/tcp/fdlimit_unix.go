//go:build unix

package tcp

import "syscall"

// fdLimit is the process's limit on open files (RLIMIT_NOFILE's soft limit,
// which Go raises to the hard one at start), or 0 when it is unknown.
func fdLimit() int {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}
