package store

import (
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
)

// The pause after an ENOSPC: Pebble retries a failed flush or compaction
// at once and for ever ("TODO: count consecutive flush errors and
// backoff"), which spun at full CPU with one error line per try. The pause
// doubles from enospcMinBackoff to enospcMaxBackoff while ENOSPCs keep
// coming, and starts again after a quiet enospcResetAfter.
const (
	enospcMinBackoff = 10 * time.Millisecond
	enospcMaxBackoff = time.Second
	enospcResetAfter = 10 * time.Second
)

// watchInterval is how often a store opened read-only on a full disk looks
// for freed space.
var watchInterval = time.Second

// onDiskFull is called by Pebble's file system (vfs.OnDiskFull) when a
// write meets ENOSPC, before that write is retried once; every other write
// to the file system waits meanwhile. It refuses writes at once, without
// waiting for the next statfs, and pauses: the back-off Pebble lacks.
func (s *Store) onDiskFull() {
	if s.guard != nil {
		s.guard.markFull()
	}
	if ok, suppressed := s.enospcLog.allow(); ok {
		s.log.Warn("the file system is full (ENOSPC): Pebble's writes fail, and are retried with back-off",
			zap.String("dir", s.pdir), zap.Int("suppressed", suppressed))
	}
	s.enospcMu.Lock()
	now := time.Now()
	switch {
	case s.enospcBackoff == 0 || now.Sub(s.enospcLast) > enospcResetAfter:
		s.enospcBackoff = enospcMinBackoff
	default:
		s.enospcBackoff = min(2*s.enospcBackoff, enospcMaxBackoff)
	}
	s.enospcLast = now
	pause := s.enospcBackoff
	s.enospcMu.Unlock()
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
}

// watch is the goroutine of a store opened read-only on a full disk: it
// reopens the database for writes once the free-space check passes.
func (s *Store) watch() {
	defer s.wg.Done()
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	failures := newLimiter(errorLogInterval)
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.roomToOpen() != nil {
			continue
		}
		done, err := s.reopen()
		if err != nil {
			if ok, suppressed := failures.allow(); ok || done {
				s.log.Error("space was freed but reopening for writes failed", zap.Bool("read_only", !done), zap.Error(err), zap.Int("suppressed", suppressed))
			}
		}
		if done {
			return
		}
	}
}

// reopen replaces the read-only database with a read-write one. It reports
// whether the watcher is done: reopened, or the store closed.
func (s *Store) reopen() (done bool, _ error) {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return true, nil
	}
	if err := s.db.Close(); err != nil {
		s.log.Warn("closing the read-only database", zap.Error(err))
	}
	o := s.popts.Clone()
	o.ErrorIfNotExists = true
	db, err := pebble.Open(s.pdir, o)
	if err == nil {
		s.db, s.readOnly = db, false
		s.log.Info("space freed: writes are accepted again", zap.String("dir", s.guard.dir))
		return true, nil
	}
	o.ReadOnly = true
	ro, rerr := pebble.Open(s.pdir, o)
	if rerr != nil {
		s.db = nil
		s.failure.set(errors.Join(err, rerr))
		return true, err
	}
	s.db = ro
	return false, err
}
