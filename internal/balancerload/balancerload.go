// Package balancerload is the hook through which a load-report format
// (ORCA's, in package orca) turns the trailer of a finished call into the
// balancer.DoneInfo.ServerLoad a Picker's Done sees, as gRPC-go's internal
// package of the same name: rpc calls Parse, the format's package calls
// SetParser at init. It knows no metadata type (it sits below them): a
// trailer is the map metadata.MD is.
package balancerload

import "sync/atomic"

// Parser turns a call's trailer into a load report, nil when it holds none.
type Parser func(trailer map[string][]string) any

var parser atomic.Pointer[Parser]

// SetParser installs p; the last one set wins.
func SetParser(p Parser) { parser.Store(&p) }

// Parse is the installed parser's report of trailer, nil without a parser
// or a trailer.
func Parse(trailer map[string][]string) any {
	p := parser.Load()
	if p == nil || trailer == nil {
		return nil
	}
	return (*p)(trailer)
}
