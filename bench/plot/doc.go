// Package plot draws benchmark results (bench.Result, as read from rpcbench's
// CSV) as one PNG: a grid of small log-log charts, one row per concurrency
// and one column per figure (p50, p99, p99.9 latency and MB/s), each with
// one line per implementation against payload size.
//
// It uses only the standard library (image, image/png), with its own 5×7
// bitmap font, so that plotting adds no dependency to the module.
package plot
