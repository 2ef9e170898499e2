// Command echo runs the demo Echo service: "echo serve" serves it, "echo
// call" calls it. It speaks tcp:// and rdma://.
package main
