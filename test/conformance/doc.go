// Package conformance is what the project's conformance suites share:
// transport/transporttest, rpc/rpctest and examples/kvstore/kvtest each take
// a Config (the transport under test, where to listen, how long a wait may
// take) and run their tests with Run, which checks each one for leaked
// goroutines.
//
// It is test support, exported only so that the suites in other modules
// (examples/) can use it: import it from suites and tests, never from a
// program. It knows the transport interfaces and nothing above them.
package conformance
