// Package bufpool recycles byte slices by power-of-two size class, so the
// hot paths of the transports and the rpc layer do not allocate per message.
//
// It knows nothing of messages, connections or the wire.
package bufpool
