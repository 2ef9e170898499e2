package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// migratedDirName is where a version 1 directory's data goes in version 2.
const migratedDirName = pebbleDirName + "-v2"

// migrateV1 turns a version 1 data directory (user keys as they are in
// Pebble) into version 2 (keys prefixed, room for the change log). It copies
// the data into a new Pebble directory beside the old one, syncs it, and
// then rewrites the marker to version 2 naming the new directory: the
// marker is the commit point. A crash before it leaves version 1 as it was
// (the half-copied directory is removed and the copy done again at the next
// open); after it, version 2. The old directory is removed last. The store
// starts at revision 0 with an empty change log.
func migrateV1(dir string, m *marker, popts *pebble.Options, log *zap.Logger) error {
	old, dst := filepath.Join(dir, pebbleDirName), filepath.Join(dir, migratedDirName)
	if err := precheck(old); err != nil {
		return err
	}
	lock, err := pebble.LockDirectory(old, vfs.Default)
	if err != nil {
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "held by current process") {
			return fmt.Errorf("%w: %s (%v)", ErrDirInUse, dir, err)
		}
		return fmt.Errorf("locking %s: %w", old, err)
	}
	n, err := func() (int, error) {
		defer lock.Close()
		o := popts.Clone()
		o.ReadOnly, o.ErrorIfNotExists, o.Lock = true, true, lock
		src, err := pebble.Open(old, o)
		if err != nil {
			return 0, fmt.Errorf("%w: Pebble cannot read %s: %v", ErrCorruptDir, old, err)
		}
		defer src.Close()
		if err := os.RemoveAll(dst); err != nil {
			return 0, fmt.Errorf("removing a half-done migration: %w", err)
		}
		n, err := copyPrefixed(src, dst, popts)
		if err == nil {
			err = syncDir(dir)
		}
		if err == nil {
			m2 := *m
			m2.Version, m2.Dir = markerVersion, migratedDirName
			err = writeMarker(dir, m2)
		}
		if err != nil {
			return 0, fmt.Errorf("migrating %s to version %d: %w", dir, markerVersion, err)
		}
		return n, nil
	}()
	if err != nil {
		return err
	}
	log.Info("migrated the data directory to version 2 (room for the change log of watches)",
		zap.String("dir", dir), zap.Int("keys", n))
	if err := os.RemoveAll(old); err != nil {
		log.Warn("removing the version 1 files", zap.String("dir", old), zap.Error(err))
	}
	return nil
}

// copyPrefixed copies every key of src into a new database at dst under
// its version 2 key, and syncs it; it returns how many keys it copied.
func copyPrefixed(src *pebble.DB, dst string, popts *pebble.Options) (int, error) {
	o := popts.Clone()
	o.ErrorIfExists, o.Lock = true, nil
	db, err := pebble.Open(dst, o)
	if err != nil {
		return 0, err
	}
	it, err := src.NewIter(nil)
	if err != nil {
		db.Close()
		return 0, err
	}
	n := 0
	b := db.NewBatch()
	for ok := it.First(); ok && err == nil; ok = it.Next() {
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		if err = b.Set(dataKey(it.Key()), v, nil); err != nil {
			break
		}
		n++
		if b.Len() > 4<<20 {
			err = b.Commit(pebble.NoSync)
			b.Close()
			b = db.NewBatch()
		}
	}
	err = errors.Join(err, it.Error(), it.Close())
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	b.Close()
	if err == nil {
		err = db.Flush()
	}
	return n, errors.Join(err, db.Close())
}
