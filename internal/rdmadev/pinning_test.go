package rdmadev

import (
	"strings"
	"testing"
)

func TestBudget(t *testing.T) {
	const gib, mib = 1 << 30, 1 << 20
	for _, tc := range []struct {
		name string
		p    Pinning
		want int64
		says string
	}{
		{"pod: 8 MiB memlock", Pinning{RAM: 16 * gib, Memlock: 8 * mib}, 8 * mib, "RLIMIT_MEMLOCK (8 MiB), without CAP_IPC_LOCK"},
		{"CAP_IPC_LOCK lifts it", Pinning{RAM: 16 * gib, Memlock: 8 * mib, CapIPCLock: true}, 4 * gib, "CAP_IPC_LOCK"},
		{"unlimited", Pinning{RAM: 16 * gib, Memlock: -1}, 4 * gib, "unlimited"},
		{"memlock above a quarter", Pinning{RAM: 16 * gib, Memlock: 8 * gib}, 4 * gib, "below RLIMIT_MEMLOCK (8 GiB)"},
		{"RAM unknown", Pinning{Memlock: 64 * mib}, 64 * mib, "RLIMIT_MEMLOCK"},
		{"nothing known", Pinning{}, 0, "no limit known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, says := tc.p.Budget()
			if got != tc.want || !strings.Contains(says, tc.says) {
				t.Fatalf("Budget() = %d, %q; want %d, saying %q", got, says, tc.want, tc.says)
			}
		})
	}
}

func TestHasCap(t *testing.T) {
	status := func(capEff string) *strings.Reader {
		return strings.NewReader("Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t" + capEff + "\nCapBnd:\t000001ffffffffff\n")
	}
	for capEff, want := range map[string]bool{
		"000001ffffffffff": true,  // root
		"0000000000004000": true,  // CAP_IPC_LOCK alone
		"0000000000000000": false, // an ordinary user
		"00000000a80425fb": false, // docker's default set: no IPC_LOCK
		"garbage":          false,
	} {
		if got := hasCap(status(capEff), capIPCLock); got != want {
			t.Errorf("CapEff %s: %v, want %v", capEff, got, want)
		}
	}
}

// TestReadPinning: this process's limits are read (a Linux test machine
// knows its RAM and its memlock limit).
func TestReadPinning(t *testing.T) {
	p := ReadPinning()
	if p.RAM <= 0 || p.Memlock == 0 {
		t.Skipf("limits not readable here: %+v", p)
	}
	if b, says := p.Budget(); b <= 0 || says == "" {
		t.Fatalf("Budget() = %d, %q from %+v", b, says, p)
	}
}
