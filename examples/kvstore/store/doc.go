// Package store is the key-value store's storage: a sorted map from byte keys
// to byte values on Pebble (github.com/cockroachdb/pebble/v2), persistent in a
// data directory or held in memory.
//
// It adds what Pebble leaves to its users: the size limits of the service,
// compare-and-swap (writes to a key are serialized by a striped lock, so a
// compare and its write are atomic against every other write), and a data
// directory that announces itself. A persistent store lives in a directory
// holding a KVSTORE marker file and Pebble's files in pebble/; Open refuses,
// without writing anything, a directory that is not empty and has no marker
// (someone else's data), a marker it cannot read or from a newer version,
// and Pebble files that do not open read-only.
//
// Durability: by default every write is synced to Pebble's write-ahead log
// before the call returns, so what a call acknowledged survives a crash of
// the process or of the machine. Options.NoSync trades that for speed: a
// process crash may then lose the last writes still buffered in Pebble, and
// an OS crash what the kernel had not written back.
//
// A full disk: a persistent store keeps Options.MinFreeBytes free on its
// file system (statfs, asked at most every 100 ms or after a quarter of the
// threshold was written) and refuses writes that would leave less with a
// *DiskFullError; reads go on, and writes are accepted again once space is
// freed. Opened on a full disk, it opens Pebble read-only and reopens it
// for writes once space is freed. Pebble's fatal errors (its logger's
// Fatalf) never exit the process: writes then fail with ErrFailed until
// the store is opened again. Each ENOSPC pauses Pebble's writes (10 ms
// doubling to 1 s), the back-off its flush and compaction retries lack.
//
// Revisions: every committed write (Put, Delete, Batch, CompareAndSwap) is
// the next revision, and its mutations are kept in a change log in Pebble,
// in the same batch as the write, with the revision of the last write: a
// crash keeps both or neither. Changes reads the log in revision order;
// a revision shows there (and in Revision) only once it and every one
// before it are synced. GetRevision and ScanRevision say the revision
// their read reflects, exactly, so a reader can follow the log from the
// next one (ScanRevision reads a snapshot; GetRevision reads the live
// database between two loads of a commit counter, and a snapshot only when
// a write was applied meanwhile). The log keeps Options.LogRetention's revisions or bytes;
// a read from a dropped revision is a *CompactedError. A data directory of
// version 1 (keys unprefixed, no log) is migrated at Open (migrate.go).
//
// The package knows nothing of RPC: the service maps its errors to status
// codes.
package store
