// Package kvtest is the key-value store's end-to-end suite: a real server
// (package server, Pebble storage) and real clients (kvpb over rpc), run
// over whichever transport a test hands it, as rpctest does for the RPC
// layer. Every method, scan paging, batch atomicity, compare-and-swap,
// limits, concurrent clients and restarts.
//
// kvtest's own tests run it over TCP, and over rdma://$RDMARPC_TEST_IP when
// that is set (the Soft-RoCE test bed).
//
// It uses only the transport interfaces, rpc and the kvstore packages.
package kvtest
