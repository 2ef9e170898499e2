// Package kvservice implements the KV service of kv.proto (kvpb.KVServer)
// over a store.Store: it checks requests, pages scans with continuation
// tokens, and turns the store's errors into status codes:
//
//	empty or oversized key, oversized value or batch,
//	bad scan bounds or page token                     InvalidArgument
//	CompareAndSwap comparison failed                  Aborted, with a
//	                                                  kvpb.CompareAndSwapConflict detail
//	watch from a revision the change log dropped      OutOfRange
//	store closed, or watches ended (shutting down)    Unavailable
//	anything else from storage                        Internal
//
// Aborted, not FailedPrecondition, follows gRPC's guidance for a failed
// test-and-set: the client should retry its read-modify-write.
//
// It knows neither transports nor how the server is run (package server).
package kvservice
