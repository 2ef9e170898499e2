// Package selftest proves that the Soft-RoCE test bed (testbed/vm.sh, testbed/run-tests.sh)
// gives test binaries what they are promised: an rxe device that libibverbs can open, with a
// protection domain, registered memory and a completion queue, the RoCE v2 GID index of the
// guest's address, and in two-VM mode a peer reachable over TCP and over RoCE.
//
// The tests read the environment the guest exports (RDMARPC_TEST_DEV, RDMARPC_TEST_IP,
// RDMARPC_TEST_GID_INDEX, ROLE, PEER_IP) and skip when RDMARPC_TEST_DEV is unset, so a plain
// `go test ./...` on a host without RDMA stays green.
//
// It checks the bed, not the product: it must not import any rdmarpc package.
package selftest
