package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
)

// The key layout of Pebble (data directory version 2): the first byte of a
// key says what it is, so that user keys, whatever their bytes, never meet
// the store's own.
const (
	dataPrefix = 'k' // 'k' + user key → value
	logPrefix  = 'r' // 'r' + big-endian revision → the change record
)

// revisionKey holds the revision of the last write applied, written in the
// same batch as the write: a read of it from the snapshot of a Get or Scan
// is the revision that read reflects exactly.
var revisionKey = []byte("m/revision")

// Defaults of LogRetention.
const (
	DefaultLogRevisions = 100000
	DefaultLogBytes     = 64 << 20
)

// LogRetention bounds the change log: once it holds more than Revisions
// revisions or more than Bytes bytes (keys and records) by a sixteenth, the
// oldest revisions are dropped down to those bounds (dropping in steps
// keeps range deletions rare); the latest revision is always kept. Zero
// values mean the defaults.
type LogRetention struct {
	Revisions int
	Bytes     int64
}

// ErrCompacted is wrapped by *CompactedError.
var ErrCompacted = errors.New("required revision has been compacted")

// CompactedError refuses to read the change log from a revision it no
// longer holds.
type CompactedError struct {
	Revision uint64 // the revision asked for
	Oldest   uint64 // the oldest revision the log still holds
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("required revision %d has been compacted: the oldest revision kept is %d", e.Revision, e.Oldest)
}

func (e *CompactedError) Unwrap() error { return ErrCompacted }

// Change is one committed write: its revision and its mutations, in the
// order they were applied.
type Change struct {
	Revision  uint64
	Mutations []Mutation
}

func dataKey(k []byte) []byte {
	b := make([]byte, 1+len(k))
	b[0] = dataPrefix
	copy(b[1:], k)
	return b
}

// logKeyLen is the length of every log key.
const logKeyLen = 9

func logKey(rev uint64) []byte {
	b := make([]byte, logKeyLen)
	putLogKey(b, rev)
	return b
}

func putLogKey(b []byte, rev uint64) {
	b[0] = logPrefix
	binary.BigEndian.PutUint64(b[1:], rev)
}

// dataBounds maps user-key bounds (nil: unbounded) to Pebble's.
func dataBounds(lower, upper []byte) ([]byte, []byte) {
	l, u := []byte{dataPrefix}, []byte{dataPrefix + 1}
	if lower != nil {
		l = dataKey(lower)
	}
	if len(upper) > 0 {
		u = dataKey(upper)
	}
	return l, u
}

// A change record is a uvarint count of mutations, then per mutation a kind
// byte (0 put, 1 delete), the uvarint length and bytes of the key, and for
// a put the uvarint length and bytes of the value.
func encodeChange(muts []Mutation) []byte {
	return appendChange(make([]byte, 0, changeSize(muts)), muts)
}

// changeSize is the length of muts' change record.
func changeSize(muts []Mutation) int {
	n := uvarintLen(uint64(len(muts)))
	for _, m := range muts {
		n += 1 + uvarintLen(uint64(len(m.Key))) + len(m.Key)
		if !m.Delete {
			n += uvarintLen(uint64(len(m.Value))) + len(m.Value)
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// appendChange appends muts' change record to b.
func appendChange(b []byte, muts []Mutation) []byte {
	b = binary.AppendUvarint(b, uint64(len(muts)))
	for _, m := range muts {
		if m.Delete {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(m.Key)))
			b = append(b, m.Key...)
			continue
		}
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(m.Key)))
		b = append(b, m.Key...)
		b = binary.AppendUvarint(b, uint64(len(m.Value)))
		b = append(b, m.Value...)
	}
	return b
}

var errBadRecord = errors.New("malformed change record")

// decodeChange parses a change record into fresh memory. Nothing is sized
// from a length before the bytes are there: the record is what Pebble
// holds, but a damaged one must be an error, not a huge allocation.
func decodeChange(b []byte) ([]Mutation, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 || count > MaxBatchMutations {
		return nil, errBadRecord
	}
	b = b[n:]
	take := func() ([]byte, bool) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, false
		}
		v := bytes.Clone(b[n : n+int(l)])
		if v == nil {
			v = []byte{}
		}
		b = b[n+int(l):]
		return v, true
	}
	muts := make([]Mutation, 0, min(int(count), len(b)/2))
	for range count {
		if len(b) == 0 || b[0] > 1 {
			return nil, errBadRecord
		}
		m := Mutation{Delete: b[0] == 1}
		b = b[1:]
		var ok bool
		if m.Key, ok = take(); !ok {
			return nil, errBadRecord
		}
		if !m.Delete {
			if m.Value, ok = take(); !ok {
				return nil, errBadRecord
			}
		}
		muts = append(muts, m)
	}
	if len(b) != 0 {
		return nil, errBadRecord
	}
	return muts, nil
}

// changeLog is the store's revision bookkeeping. Revisions are assigned
// under commitMu, which is held from choosing a revision until its batch is
// applied, so Pebble applies writes in revision order; the fsyncs of
// concurrent writes still share the write-ahead log's syncs (the batch is
// applied without waiting for its sync, which is waited for after
// commitMu is released). A revision is published (Revision, Changes,
// WaitRevision) once it and every revision before it are synced: a watcher
// never sees a write that a crash could take back.
type changeLog struct {
	retention LogRetention

	commitMu sync.Mutex
	last     uint64 // the last revision applied (commitMu)
	// applying and applied let a Get read the revision it reflects
	// without a snapshot (Store.GetRevision): applying is odd while a
	// commit applies its batch and moves on by two per commit, and
	// applied is last, stored before applying turns even.
	applying atomic.Uint64
	applied  atomic.Uint64
	entries  []logEntry // the revisions the log holds, oldest first (commitMu)
	bytes    int64      // their size (commitMu)
	oldestMu sync.Mutex // guards oldest, read by readers without commitMu
	oldest   uint64     // the oldest revision kept
	mu       sync.Mutex // guards the rest
	durable  uint64     // every revision up to it is synced
	synced   map[uint64]bool
	advanced chan struct{} // closed and replaced when durable advances
	stop     <-chan struct{}
}

type logEntry struct {
	rev  uint64
	size int64
}

// load reads the log's state from db.
func (c *changeLog) load(db *pebble.DB, stop <-chan struct{}) error {
	if c.retention.Revisions <= 0 {
		c.retention.Revisions = DefaultLogRevisions
	}
	if c.retention.Bytes <= 0 {
		c.retention.Bytes = DefaultLogBytes
	}
	c.synced = make(map[uint64]bool)
	c.advanced = make(chan struct{})
	c.stop = stop
	v, closer, err := db.Get(revisionKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return err
	default:
		if len(v) != 8 {
			closer.Close()
			return fmt.Errorf("%w: the revision key holds %d bytes", ErrCorruptDir, len(v))
		}
		c.last = binary.BigEndian.Uint64(v)
		closer.Close()
	}
	c.applied.Store(c.last)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{logPrefix}, UpperBound: []byte{logPrefix + 1}})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 9 {
			it.Close()
			return fmt.Errorf("%w: a change log key of %d bytes", ErrCorruptDir, len(k))
		}
		c.entries = append(c.entries, logEntry{rev: binary.BigEndian.Uint64(k[1:]), size: int64(len(k) + len(it.Value()))})
		c.bytes += c.entries[len(c.entries)-1].size
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	c.oldest = c.last + 1
	if len(c.entries) > 0 {
		c.oldest = c.entries[0].rev
	}
	if c.last == 0 {
		c.oldest = 1
	}
	c.durable = c.last
	return nil
}

// commitRoom is what commit adds to a batch besides the mutations' own
// entries, for a Pebble batch sized up front (see batchSize).
func commitRoom(muts []Mutation) int {
	return 2*batchEntry + logKeyLen + changeSize(muts) + len(revisionKey) + 8
}

// batchEntry bounds what a Pebble batch adds to each entry's key and
// value: a kind byte and two uvarint lengths (of at most 5 bytes each).
const batchEntry = 1 + 2*5

// commit applies b, a batch of muts, as the next revision. It calls applied
// once the batch is applied (visible to reads), before waiting for its
// sync: the caller's key locks need not wait for the disk, since a later
// write of the key reads what this one applied, and if this sync fails the
// store fails, and every later write with it.
//
// The change record is encoded straight into the batch, before commitMu:
// a record as large as the batch's data is written once, not built apart
// and copied in under the lock; only its key, the revision, waits for the
// lock. Nothing else may touch b between the two.
func (s *Store) commit(b *pebble.Batch, muts []Mutation, applied func()) error {
	c := &s.clog
	size := changeSize(muts)
	op := b.SetDeferred(logKeyLen, size)
	if rec := appendChange(op.Value[:0:size], muts); len(rec) != size {
		return fmt.Errorf("change record of %d bytes, %d expected", len(rec), size) // changeSize is wrong
	}
	c.commitMu.Lock()
	rev := c.last + 1
	var revBytes [8]byte
	binary.BigEndian.PutUint64(revBytes[:], rev)
	putLogKey(op.Key, rev)
	if err := errors.Join(op.Finish(), b.Set(revisionKey, revBytes[:], nil)); err != nil {
		c.commitMu.Unlock()
		return err
	}
	var err error
	c.applying.Add(1) // odd: reads from here on may see this batch
	if s.wo.Sync {
		err = s.db.ApplyNoSyncWait(b, s.wo)
	} else {
		err = s.db.Apply(b, s.wo)
	}
	if err != nil {
		c.applying.Add(1)
		c.commitMu.Unlock()
		return err
	}
	c.last = rev
	c.applied.Store(rev)
	c.applying.Add(1) // even: applied is what reads see
	c.entries = append(c.entries, logEntry{rev: rev, size: int64(logKeyLen + size)})
	c.bytes += c.entries[len(c.entries)-1].size
	trimErr := s.trimLog()
	c.commitMu.Unlock()
	applied()
	if s.wo.Sync {
		if err := b.SyncWait(); err != nil {
			// Applied but maybe not durable: the store has failed, and
			// this revision is never published.
			s.failure.set(fmt.Errorf("syncing the write-ahead log: %w", err))
			return s.failure.Err()
		}
	}
	if err := s.committed(nil); err != nil {
		return err
	}
	c.publish(rev)
	if trimErr != nil {
		s.log.Warn("trimming the change log", zap.Error(trimErr))
	}
	return nil
}

// trimLog drops the oldest revisions beyond the retention, keeping the
// latest. The caller holds commitMu. The drop is a batch of its own: a
// crash before it leaves a longer log, trimmed at the next write.
func (s *Store) trimLog() error {
	c := &s.clog
	r, b := c.retention.Revisions, c.retention.Bytes
	if len(c.entries) <= r+r/16 && c.bytes <= b+b/16 {
		return nil
	}
	drop := 0
	bytes := c.bytes
	for len(c.entries)-drop > 1 && (len(c.entries)-drop > c.retention.Revisions || bytes > c.retention.Bytes) {
		bytes -= c.entries[drop].size
		drop++
	}
	if drop == 0 {
		return nil
	}
	from, to := c.entries[0].rev, c.entries[drop].rev
	c.entries = append(c.entries[:0:0], c.entries[drop:]...)
	c.bytes = bytes
	// Readers check oldest after opening their iterator: raising it
	// before the delete applies means none reads a half-dropped range
	// without being told.
	c.oldestMu.Lock()
	c.oldest = to
	c.oldestMu.Unlock()
	return s.db.DeleteRange(logKey(from), logKey(to), pebble.NoSync)
}

// publish marks rev synced and advances what watchers see over every
// revision synced in a row.
func (c *changeLog) publish(rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced[rev] = true
	moved := false
	for c.synced[c.durable+1] {
		delete(c.synced, c.durable+1)
		c.durable++
		moved = true
	}
	if moved {
		close(c.advanced)
		c.advanced = make(chan struct{})
	}
}

func (c *changeLog) head() (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.durable, c.advanced
}

func (c *changeLog) oldestKept() uint64 {
	c.oldestMu.Lock()
	defer c.oldestMu.Unlock()
	return c.oldest
}

// Revision returns the store's revision: every write up to it is
// committed and synced. It is 0 for a store never written to.
func (s *Store) Revision() uint64 {
	rev, _ := s.clog.head()
	return rev
}

// OldestRevision returns the oldest revision the change log holds.
func (s *Store) OldestRevision() uint64 { return s.clog.oldestKept() }

// WaitRevision blocks until the store's revision passes after, ctx is
// done, or the store closes (ErrClosed).
func (s *Store) WaitRevision(ctx context.Context, after uint64) error {
	for {
		rev, advanced := s.clog.head()
		if rev > after {
			return nil
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.clog.stop:
			return ErrClosed
		}
	}
}

// Changes returns the changes from revision from on, up to the store's
// revision, in revision order: at most limit, and stopping once their keys
// and values pass maxBytes (though the first is always returned). next is
// the revision to ask for next. A from the log no longer holds is a
// *CompactedError.
func (s *Store) Changes(from uint64, limit, maxBytes int) (changes []Change, next uint64, err error) {
	if from == 0 {
		from = 1
	}
	done, err := s.use()
	if err != nil {
		return nil, 0, err
	}
	defer done()
	head, _ := s.clog.head()
	if from > head {
		return nil, from, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(from), UpperBound: logKey(head + 1)})
	if err != nil {
		return nil, 0, err
	}
	defer it.Close()
	if oldest := s.clog.oldestKept(); from < oldest {
		return nil, 0, &CompactedError{Revision: from, Oldest: oldest}
	}
	next, size := head+1, 0
	for ok := it.First(); ok; ok = it.Next() {
		rev := binary.BigEndian.Uint64(it.Key()[1:])
		if len(changes) == limit || len(changes) > 0 && size > maxBytes {
			next = rev
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, 0, err
		}
		muts, err := decodeChange(v)
		if err != nil {
			return nil, 0, fmt.Errorf("revision %d: %w", rev, err)
		}
		for _, m := range muts {
			size += len(m.Key) + len(m.Value)
		}
		changes = append(changes, Change{Revision: rev, Mutations: muts})
	}
	if err := it.Error(); err != nil {
		return nil, 0, err
	}
	return changes, next, nil
}
