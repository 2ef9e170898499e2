// Package kvwatch follows a KV Watch across broken connections and server
// restarts: it dials again with back-off and resumes from the revision
// after the last one it handed over, so the caller sees every revision
// for its prefix once, in order (kvctl watch is built on it).
//
// It knows the KV service's client (kvpb) and the rpc status codes, and
// nothing of how the server stores or serves.
package kvwatch
