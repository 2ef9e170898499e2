// Command kvctl is the key-value store's client:
//
//	kvctl get KEY
//	kvctl put KEY VALUE            (or --value-file FILE, - for stdin)
//	kvctl del KEY...               (several keys: deleted atomically)
//	kvctl scan [--prefix P | --start S --end E] [--limit N] [--keys-only]
//	kvctl batch put KEY VALUE | del KEY ...
//	kvctl cas KEY NEW (--expect OLD | --expect-absent)
//	kvctl watch [PREFIX] [--from REV]    (until ^C; reconnects and resumes)
//	kvctl bench [--concurrency N] [--keys N] [--value-size B] [--reads PCT] [--duration D] [--keep]
//	                               (writes kvctl-bench/* keys, says so, deletes them at the end)
//
// Global flags: --addr (default $KVCTL_ADDR, else tcp://127.0.0.1:7070),
// --timeout, --json. Output is for people by default; --json prints one
// JSON document per command on stdout (watch: one JSON object per line, per event), with byte strings as "key"/"value"
// when they are valid UTF-8 and as "key_base64"/"value_base64" otherwise.
//
// Errors print the status code and message (kvctl: Aborted: ...) on stderr,
// or {"error":{"code":...,"message":...}} on stdout with --json. Exit
// status: 0 success; 1 the call failed, or get found no such key, or bench
// saw errors; 2 bad usage.
//
// It knows the store only through the generated client (kvpb).
package main
