package orca

import "time"

// AllowAnyMinReportingInterval lets a test's server report more often than
// every 30 s (gRPC-go has an internal option of the kind).
func AllowAnyMinReportingInterval(o *ServiceOptions, d time.Duration) {
	o.allowAnyMinReportingInterval = true
	o.MinReportingInterval = d
}

// ParseTrailer is the parser the package installs.
var ParseTrailer = parseTrailer
