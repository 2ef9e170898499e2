// Package channelz is the registry behind gRPC's channelz service: every
// ClientConn (a channel), each of its backends (a subchannel), every Server,
// and every connection and listener (a socket) of this process, with what
// each counts. Package rpc feeds it; package channelz/service serves it as
// grpc.channelz.v1.Channelz.
//
// It is cheap when nobody looks: an entity is added to the registry once,
// when it is made, and removed when it closes (one lock each time); on the
// call path a counter is an atomic add and a timestamp an atomic store, with
// no lock and no allocation. What the owner already keeps (a connectivity
// state, a transport's counters) is not copied here: the registry holds a
// function that reads it, called only when someone asks.
//
// The package knows nothing of rpc, of the wire, or of protobuf: ids,
// references, counters and addresses only.
package channelz
