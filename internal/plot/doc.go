// Package plot draws small log-log line charts as one PNG: a grid of
// charts under a title and a legend, each with one line per series. bench's
// plots (figures against payload size) and `rdmarpc bench --png` (latency
// against percentile) are both drawn with it.
//
// It uses only the standard library (image, image/png), with its own 5×7
// bitmap font, so that plotting adds no dependency to the module.
package plot
