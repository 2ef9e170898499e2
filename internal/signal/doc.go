// Package signal is the one close primitive of rdmarpc's components: a
// Signal is set once, with the error that ended something; the first error
// wins, Done is closed when it is set, and Err says why.
//
// A component that also has goroutines to wait for pairs a Signal with a
// sync.WaitGroup of its own; Signal only answers "is it over, and why".
package signal
