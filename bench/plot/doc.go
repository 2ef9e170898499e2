// Package plot draws benchmark results (bench.Result, as read from rpcbench's
// CSV) as one PNG: a grid of small log-log charts, one row per concurrency
// and one column per figure (p50, p99, p99.9 latency and MB/s), each with
// one line per implementation against payload size. The drawing is
// internal/plot's, which `rdmarpc bench --png` uses too.
package plot
