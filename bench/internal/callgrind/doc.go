// Package callgrind counts the instructions a process executes between two
// points when it runs under valgrind's callgrind tool: a benchmark's
// noise-free column, the same on a loaded machine as on an idle one.
//
// It talks to valgrind through its client-request convention (a special
// instruction sequence that is a no-op on a real CPU): Take dumps
// callgrind's counters, which zeroes them, and reads the instructions
// (Ir) of that dump from the file callgrind wrote. Outside valgrind, and
// on other architectures than amd64, Running reports false and Take 0.
package callgrind
