package rpc

// ClientConn is a client's connection to one target. (Implementation in progress.)
type ClientConn struct{}
