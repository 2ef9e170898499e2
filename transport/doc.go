// Package transport defines the message-oriented contract that every rdmarpc
// transport implements (Conn, Listener, Transport) and picks a transport by the
// scheme of a target such as "tcp://host:port" or "rdma://host:port".
//
// A transport moves whole messages, never a byte stream: what one side passes
// to Send arrives at the other side's Recv as exactly one message with the same
// bytes. Fragmentation of large messages is the transport's business.
//
// Memory can be lent across the interface so the RDMA transport need not copy:
// a received message may be handed up in the (registered) buffer it landed in
// and must be released by the receiver; a sender may ask for a send buffer and
// fill it in place. Where the memory is ordinary heap (tcp://), a receiver may
// take it for good (Buffer.Detach) and keep or decode the message without a
// copy; the transport's receive budget comes back at once. A sender may also
// give a message in parts (VectorSender): tcp:// writes them from the
// sender's memory when it can write the message at once, and copies what
// has to wait, so a large payload need not be copied behind its header.
//
// This package must not know about any concrete transport (TCP, RDMA) nor
// about RPC: the rpc package sits above it, the transports implement it.
package transport
