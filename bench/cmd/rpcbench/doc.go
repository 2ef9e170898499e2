// Command rpcbench serves and drives the Echo service, side by side with
// gRPC-go and raw verbs, and writes what it measured as a table, CSV and a
// PNG plot. See bench/README.md.
//
//	rpcbench --serve tcp://0.0.0.0:7000                      # serve until Ctrl-C
//	rpcbench --target tcp://host:7000                        # drive a server
//	rpcbench --compare-grpc --csv out.csv --png out.png      # rdmarpc-TCP vs gRPC-go, loopback, servers in child processes
//	rpcbench --inproc --compare raw                          # the same with both ends in one process
//	rpcbench --listen rdma://10.9.9.1:0 --ib-dev rxe0        # rdmarpc-RDMA vs perftest
//	rpcbench --plot out.csv --png out.png                    # plot an earlier run
package main
