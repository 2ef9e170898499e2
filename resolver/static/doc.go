// Package static registers the "ipv4" and "ipv6" resolvers of gRPC's naming
// document: a fixed, comma-separated list of IP addresses, each with an
// optional port (443 when left out, as gRPC's). IPv6 addresses with a port
// are bracketed:
//
//	ipv4:10.0.0.1:7070,10.0.0.2:7070
//	ipv4:///10.0.0.1:7070
//	ipv6:[fd00::1]:7070,[fd00::2]:7070
//
// The list is reported once, on Build; it never changes.
package static
