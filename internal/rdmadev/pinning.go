package rdmadev

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Pinning is what limits the memory this process may register (pin) for
// RDMA: the kernel refuses to pin beyond RLIMIT_MEMLOCK unless the process
// holds CAP_IPC_LOCK.
type Pinning struct {
	RAM        int64 // total memory of the machine; 0 unknown
	Memlock    int64 // RLIMIT_MEMLOCK's soft limit; -1 unlimited, 0 unknown
	CapIPCLock bool  // the process may pin beyond RLIMIT_MEMLOCK
}

// capIPCLock is CAP_IPC_LOCK's bit in the capability sets.
const capIPCLock = 14

// ReadPinning reads this process's limits (sysinfo, getrlimit and the
// effective capabilities in /proc/self/status). What it cannot read stays
// zero.
func ReadPinning() Pinning {
	p := Pinning{RAM: totalRAM(), Memlock: memlock()}
	if f, err := os.Open("/proc/self/status"); err == nil {
		p.CapIPCLock = hasCap(f, capIPCLock)
		f.Close()
	}
	return p
}

// hasCap reports whether the CapEff line of a /proc/<pid>/status holds bit.
func hasCap(r io.Reader, bit uint) bool {
	s := bufio.NewScanner(r)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}

// Budget is the default registered-memory budget under these limits, and a
// sentence saying where it comes from: a quarter of RAM, lowered to
// RLIMIT_MEMLOCK when that binds (no CAP_IPC_LOCK, not unlimited); 0 when
// nothing is known.
func (p Pinning) Budget() (int64, string) {
	quarter := p.RAM / 4
	switch {
	case p.CapIPCLock:
		return quarter, fmt.Sprintf("a quarter of RAM (%s): CAP_IPC_LOCK lifts RLIMIT_MEMLOCK", Bytes(quarter*4))
	case p.Memlock < 0:
		return quarter, fmt.Sprintf("a quarter of RAM (%s): RLIMIT_MEMLOCK is unlimited", Bytes(quarter*4))
	case p.Memlock > 0 && (quarter <= 0 || p.Memlock < quarter):
		return p.Memlock, fmt.Sprintf("RLIMIT_MEMLOCK (%s), without CAP_IPC_LOCK", Bytes(p.Memlock))
	case quarter > 0:
		return quarter, fmt.Sprintf("a quarter of RAM (%s), below RLIMIT_MEMLOCK (%s)", Bytes(quarter*4), Bytes(p.Memlock))
	}
	return 0, "no limit known"
}

// RaiseAdvice says how to let a process pin more: what an operator changes.
const RaiseAdvice = "raise RLIMIT_MEMLOCK (`ulimit -l unlimited`; systemd: LimitMEMLOCK=infinity; " +
	"docker: --ulimit memlock=-1; Kubernetes: add the IPC_LOCK capability to the container's securityContext) " +
	"or give the process CAP_IPC_LOCK"

// Bytes formats n as KiB/MiB/GiB, for messages.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
