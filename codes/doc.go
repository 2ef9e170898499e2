// Package codes defines the status codes of rdmarpc calls. The numbering is
// gRPC's, so code values mean the same thing in logs, metrics and tools that
// already know gRPC.
//
// This package depends on nothing; everything that reports call outcomes
// depends on it.
package codes
