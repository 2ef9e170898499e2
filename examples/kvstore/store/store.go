package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// Options configure a Store. The zero value with a Dir is a persistent store
// that syncs every write.
type Options struct {
	// Dir is the data directory, created if missing. Ignored when InMemory.
	Dir string
	// InMemory keeps everything in memory: nothing survives Close.
	InMemory bool
	// NoSync acknowledges writes before they are synced to disk; see the
	// package documentation for what a crash may then lose.
	NoSync bool
	// Logger receives Pebble's messages and the store's own. Default
	// zap.NewNop().
	Logger *zap.Logger

	// MinFreeBytes is the free space a persistent store keeps on its file
	// system (what df calls available: without the blocks reserved for
	// root): a write that would leave less is refused with a
	// *DiskFullError (reads go on), and accepted again once space is
	// freed. 0 means DefaultMinFreeBytes, unless MinFreePercent is set.
	// Opening read-write also needs at least the WAL's size free (its
	// replay is flushed); with less, Open opens read-only and reopens
	// once there is room.
	MinFreeBytes int64
	// MinFreePercent, when positive, is the threshold as a percentage of
	// the file system's size; with MinFreeBytes too, the larger counts.
	MinFreePercent float64
	// NoFreeSpaceCheck turns the free-space threshold off: Pebble then
	// meets a full disk as it comes, and the store fails (ErrFailed).
	NoFreeSpaceCheck bool

	// LogRetention bounds the change log that Changes reads (watchers
	// resume from it): by revisions and by bytes.
	LogRetention LogRetention

	// fs replaces vfs.NewMem() for an InMemory store: tests inject errors.
	fs vfs.FS
	// diskUsage and now replace statfs and the clock of the free-space
	// check in tests.
	diskUsage func(dir string) (vfs.DiskUsage, error)
	now       func() time.Time
}

// Store is a sorted key-value map. Its methods are safe for concurrent use.
type Store struct {
	db      *pebble.DB   // guarded by closeMu: a reopen replaces it
	dirLock *pebble.Lock // the data directory's, when we took it ourselves
	wo      *pebble.WriteOptions
	log     *zap.Logger
	seed    maphash.Seed
	failure *failure   // Pebble's fatal error, if any
	guard   *diskGuard // nil when in memory or turned off
	popts   *pebble.Options
	pdir    string // Pebble's directory, when persistent

	// enospcLog limits the lines about ENOSPC; enospcBackoff, guarded by
	// enospcMu, is the pause after the last one.
	enospcLog     *limiter
	enospcMu      sync.Mutex
	enospcBackoff time.Duration
	enospcLast    time.Time

	// readOnly (guarded by closeMu) is set while the database is open
	// read-only because the disk was full at Open; the watcher goroutine
	// (wg) reopens it for writes once space is freed, or exits at stop.
	readOnly bool
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	// writeLocks serialize writes per key stripe, so that CompareAndSwap's
	// read and write are atomic against every other write of the key.
	writeLocks [256]sync.Mutex

	// clog assigns revisions and publishes them once synced.
	clog changeLog

	// closeMu guards db against use after Close: calls hold it shared.
	closeMu sync.RWMutex
	closed  bool
	unuse   func() // closeMu.RUnlock, made once: use returns it on every call

	// afterRevisionLoad, set by tests, runs in GetRevision between loading
	// the revision and reading the key.
	afterRevisionLoad func()
}

// KV is one key and its value.
type KV struct {
	Key, Value []byte
}

// Mutation is one write of a Batch: a put, or a delete when Delete is set.
type Mutation struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// Expectation is what CompareAndSwap requires the key to hold.
type Expectation struct {
	absent bool
	value  []byte
}

// Absent expects the key not to exist.
func Absent() Expectation { return Expectation{absent: true} }

// Holds expects the key to exist with value v.
func Holds(v []byte) Expectation { return Expectation{value: v} }

// Open opens the store that o describes. A persistent store's directory is
// checked before anything is written to it: see the package documentation.
func Open(o Options) (*Store, error) {
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("store")
	s := &Store{
		wo:        pebble.Sync,
		log:       log,
		seed:      maphash.MakeSeed(),
		failure:   &failure{},
		enospcLog: newLimiter(errorLogInterval),
		stop:      make(chan struct{}),
	}
	s.unuse = s.closeMu.RUnlock
	s.clog.retention = o.LogRetention
	if o.NoSync {
		s.wo = pebble.NoSync
	}
	s.popts = &pebble.Options{Logger: newPebbleLogger(log.Named("pebble"), s.failure)}
	if o.InMemory {
		fs := o.fs
		if fs == nil {
			fs = vfs.NewMem()
		}
		s.popts.FS = vfs.OnDiskFull(fs, s.onDiskFull) // for tests that inject ENOSPC
		var err error
		if s.db, err = pebble.Open("", s.popts); err != nil {
			return nil, err
		}
		if err := s.clog.load(s.db, s.stop); err != nil {
			s.db.Close()
			return nil, err
		}
		return s, nil
	}
	if o.Dir == "" {
		return nil, errors.New("store: no data directory given")
	}
	if !o.NoFreeSpaceCheck {
		s.guard = newDiskGuard(o.Dir, o)
	}
	s.popts.FS = vfs.OnDiskFull(vfs.Default, s.onDiskFull)
	if err := s.openDir(o.Dir); err != nil {
		return nil, err
	}
	if err := s.clog.load(s.db, s.stop); err != nil {
		s.db.Close()
		s.dirLock.Close()
		return nil, err
	}
	if s.readOnly {
		s.wg.Add(1)
		go s.watch()
	}
	return s, nil
}

// openDir opens (or creates) the Pebble database of a data directory: read
// only when the free-space check finds the disk full.
func (s *Store) openDir(dir string) error {
	m, err := inspectDir(dir)
	if err != nil {
		return err
	}
	if m != nil && m.State == stateReady && m.Version == 1 {
		if err := migrateV1(dir, m, s.popts, s.log); err != nil {
			return err
		}
		if m, err = inspectDir(dir); err != nil {
			return err
		}
	}
	pdir := filepath.Join(dir, m.pebbleDir())
	s.pdir = pdir
	if m != nil && m.State == stateReady {
		if err := precheck(pdir); err != nil {
			return err
		}
		// Lock before reading anything, so that a directory in use says
		// so rather than looking corrupt.
		lock, err := pebble.LockDirectory(pdir, vfs.Default)
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "held by current process") {
				return fmt.Errorf("%w: %s (%v)", ErrDirInUse, dir, err)
			}
			return fmt.Errorf("locking %s: %w", pdir, err)
		}
		s.popts.Lock = lock
		// On a full disk a read-write open would spin retrying the flush
		// of the replayed WAL: open read-only, which writes nothing, and
		// reopen for writes once space is freed (watch).
		full := s.roomToOpen()
		db, err := probeAndOpen(pdir, s.popts, full != nil)
		if err != nil {
			lock.Close()
			return err
		}
		s.db, s.dirLock, s.readOnly = db, lock, full != nil
		if full != nil {
			var df *DiskFullError
			errors.As(full, &df)
			s.log.Warn("opened data directory read-only: disk full, writes are refused until space is freed",
				zap.String("dir", dir), zap.Uint64("free_bytes", df.Free), zap.Uint64("need_bytes", df.Need))
		} else {
			s.log.Info("opened data directory", zap.String("dir", dir))
		}
		return nil
	}

	// A new store, or one whose creation was cut short: nothing in it was
	// ever acknowledged, so it is created from scratch.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	if s.guard != nil {
		if err := s.guard.check(0); errors.Is(err, ErrDiskFull) {
			return fmt.Errorf("creating data directory: %w", err)
		}
	}
	created := time.Now().UTC()
	if m != nil {
		created = m.Created
		if err := os.RemoveAll(pdir); err != nil {
			return fmt.Errorf("removing a half-created store: %w", err)
		}
	}
	mk := marker{Format: markerFormat, Version: markerVersion, State: stateCreating, Created: created}
	if err := writeMarker(dir, mk); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	o := s.popts.Clone()
	o.ErrorIfExists = true
	db, err := pebble.Open(pdir, o)
	if err != nil {
		return fmt.Errorf("creating %s: %w", pdir, err)
	}
	mk.State = stateReady
	if err := writeMarker(dir, mk); err != nil {
		db.Close()
		return fmt.Errorf("creating data directory: %w", err)
	}
	s.db = db
	s.log.Info("created data directory", zap.String("dir", dir))
	return nil
}

// roomToOpen returns a *DiskFullError unless the file system has room for
// a read-write open: the threshold, and at least the WAL that the open
// replays and flushes (until that flush is done, Open does not return).
// The WAL files counted include those kept for recycling, which errs on
// the safe side.
func (s *Store) roomToOpen() error {
	if s.guard == nil {
		return nil
	}
	var wal uint64
	logs, _ := filepath.Glob(filepath.Join(s.pdir, "*.log"))
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil {
			wal += uint64(fi.Size())
		}
	}
	if err := s.guard.check(wal); errors.Is(err, ErrDiskFull) {
		return err
	}
	return nil
}

// precheck refuses a Pebble directory that is missing or has no LOCK file
// (which locking would create).
func precheck(pdir string) error {
	if fi, err := os.Stat(pdir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: %s is missing or not a directory", ErrCorruptDir, pdir)
	}
	if _, err := os.Stat(filepath.Join(pdir, "LOCK")); err != nil {
		return fmt.Errorf("%w: Pebble cannot read %s: it has no LOCK file, so it holds no database", ErrCorruptDir, pdir)
	}
	return nil
}

// probeAndOpen opens Pebble's files read-only first, so that a store that
// cannot be read is refused before a read-write open changes anything (it
// would clean up obsolete files, for instance), then opens them for real,
// unless readOnly.
func probeAndOpen(pdir string, popts *pebble.Options, readOnly bool) (*pebble.DB, error) {
	o := popts.Clone()
	o.ReadOnly = true
	o.ErrorIfNotExists = true
	db, err := pebble.Open(pdir, o)
	if err != nil {
		return nil, fmt.Errorf("%w: Pebble cannot read %s: %v", ErrCorruptDir, pdir, err)
	}
	if readOnly {
		return db, nil
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	o = popts.Clone()
	o.ErrorIfNotExists = true
	if db, err = pebble.Open(pdir, o); err != nil {
		return nil, fmt.Errorf("opening %s: %w", pdir, err)
	}
	return db, nil
}

// Close syncs what NoSync left unsynced and closes the store. Calls made
// after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.wg.Wait() // the watcher, which may be reopening the database
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.db == nil { // a reopen failed
		return s.dirLock.Close() // ours: set whenever a reopen can happen
	}
	var err error
	if s.wo == pebble.NoSync && !s.readOnly && s.failure.Err() == nil {
		err = s.db.Flush()
	}
	err = errors.Join(err, s.db.Close())
	if s.dirLock != nil {
		err = errors.Join(err, s.dirLock.Close())
	}
	return err
}

// use holds the store open for one call; the caller must call the returned
// function when done.
func (s *Store) use() (func(), error) {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return nil, ErrClosed
	}
	if s.db == nil { // a reopen failed: the failure says why
		s.closeMu.RUnlock()
		return nil, s.failure.Err()
	}
	return s.unuse, nil
}

// Writable returns nil while the store accepts writes, else why it refuses
// them: a *DiskFullError (below the free-space threshold at the last check,
// or opened read-only on a full disk), an error wrapping ErrFailed, or
// ErrClosed. It asks nothing of the file system.
func (s *Store) Writable() error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	if err := s.failure.Err(); err != nil {
		return err
	}
	if s.readOnly || s.guard != nil {
		if err := s.guard.full(); err != nil {
			return err
		}
	}
	if s.readOnly {
		return fmt.Errorf("%w: space was freed, the store is reopening for writes", ErrDiskFull)
	}
	return nil
}

// writable admits a write of n bytes, or says why not. The caller holds
// the store open (use).
func (s *Store) writable(n uint64) error {
	if err := s.failure.Err(); err != nil {
		return err
	}
	if s.readOnly {
		if err := s.guard.full(); err != nil {
			return err
		}
		return fmt.Errorf("%w: space was freed, the store is reopening for writes", ErrDiskFull)
	}
	if s.guard != nil {
		return s.guard.admit(n)
	}
	return nil
}

func (s *Store) stripe(key []byte) int {
	return int(maphash.Bytes(s.seed, key) % uint64(len(s.writeLocks)))
}

// Get returns a copy of key's value; found is false when key does not exist.
func (s *Store) Get(key []byte) (value []byte, found bool, err error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	done, err := s.use()
	if err != nil {
		return nil, false, err
	}
	defer done()
	return s.get(s.db, key)
}

// GetRevision is Get, and the revision the answer reflects: every write up
// to it and none after it. A watch from the revision after it misses
// nothing and repeats nothing.
//
// It reads the live database between two loads of the commit counter
// (changeLog.applying): when no batch was being applied at the first and
// none began by the second, the read saw exactly the writes up to the
// revision applied at the first. Only a read that overlaps a commit's
// apply (not its fsync) takes a snapshot and reads the revision from it.
func (s *Store) GetRevision(key []byte) (value []byte, found bool, rev uint64, err error) {
	if err := checkKey(key); err != nil {
		return nil, false, 0, err
	}
	done, err := s.use()
	if err != nil {
		return nil, false, 0, err
	}
	defer done()
	c := &s.clog
	if before := c.applying.Load(); before%2 == 0 {
		rev := c.applied.Load()
		if s.afterRevisionLoad != nil {
			s.afterRevisionLoad()
		}
		value, found, err := s.get(s.db, key)
		if err != nil {
			return nil, false, 0, err
		}
		if c.applying.Load() == before {
			return value, found, rev, nil
		}
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	if rev, err = readRevision(snap); err != nil {
		return nil, false, 0, err
	}
	value, found, err = s.get(snap, key)
	return value, found, rev, err
}

// readRevision returns the revision of the last write r holds.
func readRevision(r pebble.Reader) (uint64, error) {
	v, closer, err := r.Get(revisionKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: the revision key holds %d bytes", ErrCorruptDir, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func (s *Store) get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(dataKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v = bytes.Clone(v)
	if v == nil {
		v = []byte{}
	}
	return v, true, closer.Close()
}

// Put sets key to value.
func (s *Store) Put(key, value []byte) error {
	return s.Batch([]Mutation{{Key: key, Value: value}})
}

// Delete removes key; removing a missing key is not an error.
func (s *Store) Delete(key []byte) error {
	return s.Batch([]Mutation{{Key: key, Delete: true}})
}

// Batch applies muts atomically and in order. Every mutation is checked
// before anything is written.
func (s *Store) Batch(muts []Mutation) error {
	if len(muts) > MaxBatchMutations {
		return invalid("batch of %d mutations is larger than the limit (%d)", len(muts), MaxBatchMutations)
	}
	for i, m := range muts {
		err := checkKey(m.Key)
		if err == nil && !m.Delete {
			err = checkValue(m.Value)
		}
		if err != nil {
			if len(muts) > 1 {
				err = invalid("mutation %d: %v", i, err)
			}
			return err
		}
	}
	if len(muts) == 0 {
		return nil
	}
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	var size uint64
	for _, m := range muts {
		size += uint64(len(m.Key)+len(m.Value)) + mutationOverhead
	}
	if err := s.writable(size); err != nil {
		return err
	}
	unlock := s.lock(muts)
	unlocked := false
	defer func() {
		if !unlocked {
			unlock()
		}
	}()
	b := s.db.NewBatchWithSize(batchSize(muts))
	defer b.Close()
	for _, m := range muts {
		if m.Delete {
			err = b.Delete(dataKey(m.Key), nil)
		} else {
			err = b.Set(dataKey(m.Key), m.Value, nil)
		}
		if err != nil {
			return err
		}
	}
	return s.committed(s.commit(b, muts, func() { unlocked = true; unlock() }))
}

// batchSize is the room a Pebble batch of muts needs, with what commit
// adds: sized up front, a batch of 10 000 mutations is not grown (and
// copied) a dozen times as it fills.
func batchSize(muts []Mutation) int {
	n := batchHeader + commitRoom(muts)
	for _, m := range muts {
		n += batchEntry + 1 + len(m.Key) + len(m.Value) // 1: dataKey's prefix
	}
	return n
}

// batchHeader is a Pebble batch's header: a sequence number and a count.
const batchHeader = 12

// committed returns the error of a commit: its own, or the fatal error
// Pebble reported through its logger while committing and then carried on
// from as if the commit had worked.
func (s *Store) committed(err error) error {
	if err != nil {
		return err
	}
	return s.failure.Err()
}

// lock takes the write locks of muts' keys, in stripe order so that two
// batches never wait on each other, and returns their release.
func (s *Store) lock(muts []Mutation) func() {
	if len(muts) == 1 {
		mu := &s.writeLocks[s.stripe(muts[0].Key)]
		mu.Lock()
		return mu.Unlock
	}
	stripes := make([]int, len(muts))
	for i, m := range muts {
		stripes[i] = s.stripe(m.Key)
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, i := range stripes {
		s.writeLocks[i].Lock()
	}
	return func() {
		for _, i := range stripes {
			s.writeLocks[i].Unlock()
		}
	}
}

// CompareAndSwap sets key to value if it meets expected. Otherwise it
// returns a *ConflictError with what key holds and writes nothing.
func (s *Store) CompareAndSwap(key []byte, expected Expectation, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	if err := s.writable(uint64(len(key)+len(value)) + mutationOverhead); err != nil {
		return err
	}
	mu := &s.writeLocks[s.stripe(key)]
	mu.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			mu.Unlock()
		}
	}()
	cur, found, err := s.get(s.db, key)
	if err != nil {
		return err
	}
	if expected.absent && found || !expected.absent && (!found || !bytes.Equal(cur, expected.value)) {
		return &ConflictError{Found: found, Current: cur, expectedAbsent: expected.absent}
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(dataKey(key), value, nil); err != nil {
		return err
	}
	return s.committed(s.commit(b, []Mutation{{Key: key, Value: value}}, func() { unlocked = true; mu.Unlock() }))
}

// ScanOptions select the pairs of one Scan.
type ScanOptions struct {
	// Lower is the first key (inclusive); nil means the first key.
	Lower []byte
	// Upper bounds the keys (exclusive); nil means no bound.
	Upper []byte
	// Limit caps the pairs returned; it must be positive.
	Limit int
	// MaxBytes stops the scan once the keys and values gathered would
	// exceed it, though the first pair is always returned. 0 means no cap.
	MaxBytes int
	// KeysOnly leaves the values out.
	KeysOnly bool
}

// Scan returns pairs in ascending key order from one consistent view of the
// store; more reports that pairs beyond the last one returned exist.
func (s *Store) Scan(o ScanOptions) (pairs []KV, more bool, err error) {
	pairs, more, _, err = s.ScanRevision(o)
	return pairs, more, err
}

// ScanRevision is Scan, and the revision its view reflects (see
// GetRevision).
func (s *Store) ScanRevision(o ScanOptions) (pairs []KV, more bool, rev uint64, err error) {
	if o.Limit <= 0 {
		return nil, false, 0, invalid("scan limit %d is not positive", o.Limit)
	}
	done, err := s.use()
	if err != nil {
		return nil, false, 0, err
	}
	defer done()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	if rev, err = readRevision(snap); err != nil {
		return nil, false, 0, err
	}
	lower, upper := dataBounds(o.Lower, o.Upper)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, false, 0, err
	}
	size := 0
	for ok := it.First(); ok; ok = it.Next() {
		var v []byte
		if !o.KeysOnly {
			if v, err = it.ValueAndErr(); err != nil {
				break
			}
		}
		key := it.Key()[1:]
		n := len(key) + len(v)
		if len(pairs) == o.Limit || o.MaxBytes > 0 && len(pairs) > 0 && size+n > o.MaxBytes {
			more = true
			break
		}
		size += n
		kv := KV{Key: bytes.Clone(key)}
		if !o.KeysOnly {
			kv.Value = append([]byte{}, v...)
		}
		pairs = append(pairs, kv)
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, 0, err
	}
	return pairs, more, rev, nil
}
