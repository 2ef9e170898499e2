//go:build unix

package tcp

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the process has used so far,
// for the benchmarks' CPU per operation.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
