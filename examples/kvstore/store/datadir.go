package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The layout of a data directory.
const (
	markerName    = "KVSTORE"     // says whose directory this is
	markerTmpName = "KVSTORE.tmp" // a marker being written
	pebbleDirName = "pebble"      // Pebble's files

	markerFormat  = "rdmarpc-kvstore"
	markerVersion = 2
)

// Marker states: a store is "creating" from the first write of the marker
// until Pebble has created its files, then "ready". A store never served a
// call while "creating", so one found in that state is safely created again.
const (
	stateCreating = "creating"
	stateReady    = "ready"
)

// marker is the KVSTORE file: a small JSON document.
type marker struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
	// Dir is Pebble's directory, when not pebbleDirName: a directory
	// migrated from version 1 (migrate.go).
	Dir string `json:"dir,omitempty"`
}

// pebbleDir is the name of Pebble's directory in the data directory.
func (m *marker) pebbleDir() string {
	if m == nil || m.Dir == "" {
		return pebbleDirName
	}
	return m.Dir
}

// inspectDir reads dir without changing it. It returns the marker, or nil
// when dir is new (missing, empty, or holding only a half-written marker).
func inspectDir(dir string) (*marker, error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return nil, fmt.Errorf("%w: %s is a file, not a directory", ErrForeignDir, dir)
		}
		return nil, fmt.Errorf("reading data directory %s: %w", dir, err)
	}
	var others []string
	hasMarker := false
	for _, e := range entries {
		switch e.Name() {
		case markerName:
			hasMarker = true
		case markerTmpName:
		default:
			others = append(others, e.Name())
		}
	}
	if !hasMarker {
		if len(others) == 0 {
			return nil, nil
		}
		shown := others
		if len(shown) > 3 {
			shown = append(shown[:3:3], "…")
		}
		entries := "entries"
		if len(others) == 1 {
			entries = "entry"
		}
		return nil, fmt.Errorf("%w: %s holds %d %s (%s) but no %s file; refusing to touch it: choose an empty or new directory",
			ErrForeignDir, dir, len(others), entries, strings.Join(shown, ", "), markerName)
	}
	path := filepath.Join(dir, markerName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrCorruptDir, path, err)
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s is not a kvstore marker: %v", ErrCorruptDir, path, err)
	}
	switch {
	case m.Format != markerFormat:
		return nil, fmt.Errorf("%w: %s has format %q, want %q", ErrCorruptDir, path, m.Format, markerFormat)
	case m.Version > markerVersion:
		return nil, fmt.Errorf("%w: %s is version %d, written by a newer kvserver (this one reads version %d)", ErrCorruptDir, path, m.Version, markerVersion)
	case m.Dir != "" && (m.Dir != filepath.Base(m.Dir) || !strings.HasPrefix(m.Dir, pebbleDirName)):
		return nil, fmt.Errorf("%w: %s names Pebble's directory %q", ErrCorruptDir, path, m.Dir)
	case m.Version < 1:
		return nil, fmt.Errorf("%w: %s has version %d", ErrCorruptDir, path, m.Version)
	case m.State != stateCreating && m.State != stateReady:
		return nil, fmt.Errorf("%w: %s has state %q", ErrCorruptDir, path, m.State)
	}
	return &m, nil
}

// writeMarker replaces dir's marker atomically and durably: a crash leaves
// either the old marker or the new one.
func writeMarker(dir string, m marker) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, markerTmpName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, markerName)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a directory's entries (a rename, a new file) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
