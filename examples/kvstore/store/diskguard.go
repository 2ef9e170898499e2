package store

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// DefaultMinFreeBytes is the free space a persistent store keeps on its
// file system unless Options say otherwise: below it, writes are refused.
// Pebble needs room beyond the data itself to flush memtables and compact
// (a compaction writes its output before it deletes its input), and it
// cannot recover from running out in the middle of a WAL write.
const DefaultMinFreeBytes = 64 << 20

// The guard asks the file system for its free space (statfs) at most every
// guardInterval, or sooner once the writes it admitted since the last
// answer reach a quarter of the threshold (at least guardMinRecheck).
const (
	guardInterval   = 100 * time.Millisecond
	guardMinRecheck = 1 << 20
)

// mutationOverhead is what a mutation costs besides its key and value (a
// batch record's header, varints) — an estimate, which the threshold
// absorbs.
const mutationOverhead = 16

// diskGuard refuses writes while the data directory's file system has less
// free space than a threshold. Between two statfs calls it counts the
// bytes it admitted as already used, so its estimate errs on the safe side.
type diskGuard struct {
	dir        string
	usage      func(dir string) (vfs.DiskUsage, error)
	now        func() time.Time
	minBytes   uint64
	minPercent float64

	mu      sync.Mutex
	checked time.Time // of the last statfs; zero before the first
	free    uint64    // at the last statfs (or 0 after an ENOSPC)
	need    uint64    // the threshold at the last statfs
	written uint64    // bytes admitted since the last statfs
	extra   uint64    // what the last check needed beyond the threshold
	err     error     // of the last statfs
}

func newDiskGuard(dir string, o Options) *diskGuard {
	g := &diskGuard{dir: dir, usage: o.diskUsage, now: o.now, minPercent: o.MinFreePercent}
	if g.usage == nil {
		g.usage = vfs.Default.GetDiskUsage
	}
	if g.now == nil {
		g.now = time.Now
	}
	switch {
	case o.MinFreeBytes > 0:
		g.minBytes = uint64(o.MinFreeBytes)
	case o.MinFreePercent <= 0:
		g.minBytes = DefaultMinFreeBytes
	}
	return g
}

// admit accounts for a write of n bytes, or refuses it with a
// *DiskFullError.
func (g *diskGuard) admit(n uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.checked.IsZero() || g.now().Sub(g.checked) >= guardInterval || g.written >= max(g.need/4, guardMinRecheck) {
		g.refreshLocked()
	}
	if g.err != nil {
		// The guard cannot tell: let Pebble meet the disk as it is rather
		// than refuse every write for a statfs that failed.
		return nil
	}
	if g.written+n+g.need > g.free {
		return g.fullErrorLocked(n)
	}
	g.written += n
	return nil
}

// check asks the file system now; it returns a *DiskFullError while the
// free space is below the threshold or below atLeast, and the statfs error
// if that failed.
func (g *diskGuard) check(atLeast uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshLocked()
	g.extra = atLeast - min(atLeast, g.need) // for full(), until the next refresh
	switch {
	case g.err != nil:
		return g.err
	case g.free < g.need+g.extra:
		return g.fullErrorLocked(g.extra)
	}
	return nil
}

// full returns the *DiskFullError of the last statfs, or nil when it found
// enough space (for the threshold plus the extra of the last check).
func (g *diskGuard) full() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil && g.free < g.need+g.extra {
		return g.fullErrorLocked(g.extra)
	}
	return nil
}

// markFull records that the file system answered a write with ENOSPC: no
// write is admitted before the next statfs says otherwise.
func (g *diskGuard) markFull() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free, g.written, g.checked, g.err = 0, 0, g.now(), nil
	if g.need == 0 {
		g.need = max(g.minBytes, 1)
	}
}

func (g *diskGuard) refreshLocked() {
	g.checked, g.written, g.extra = g.now(), 0, 0
	u, err := g.usage(g.dir)
	if g.err = err; err != nil {
		return
	}
	g.free = u.AvailBytes
	g.need = max(g.minBytes, uint64(g.minPercent/100*float64(u.TotalBytes)))
}

func (g *diskGuard) fullErrorLocked(n uint64) error {
	return &DiskFullError{Dir: g.dir, Free: g.free - min(g.written, g.free), Need: g.need + n}
}
