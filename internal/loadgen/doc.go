// Package loadgen is the load generator under `rdmarpc bench`: workers that
// call one function as fast as allowed (a concurrency, a total rate, a call
// count or a duration), a pacer that spaces calls to the rate on an
// injected clock, and a latency histogram of bounded size (log-linear
// buckets, under 1% error) that gives the percentiles, the text histogram
// and the plot, however long the run.
//
// It knows nothing of RPC: the caller passes a function that makes one call
// and returns its error, and reads codes from the errors it counts.
package loadgen
