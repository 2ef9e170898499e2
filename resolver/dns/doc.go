// Package dns registers the "dns" resolver: A and AAAA records for the
// target's host, each address with the target's port (443 when left out, as
// gRPC's), through the standard library's resolver.
//
//	dns:///kv.prod:7070          the system's DNS servers (/etc/resolv.conf)
//	dns://10.0.0.53/kv.prod:7070 ask the server at 10.0.0.53:53
//	dns://127.0.0.1:5353/kv:7070 ask 127.0.0.1:5353 (a test's own server)
//
// It resolves when built, again every ResolveInterval, and when ResolveNow
// asks (a connection failed), but never twice within MinResolveInterval, so
// a fleet of failing connections does not flood the DNS servers. Every
// lookup's result is reported, changed or not. A failed
// lookup, or an answer with no addresses, is reported with ReportError,
// naming the host and the DNS server asked (the target's authority when it
// has one), and retried with exponential backoff. An answer yields at most MaxAddresses
// addresses, so no DNS server decides how many connections a client opens.
// A host that is an IP address is reported once, without a lookup or a
// goroutine.
//
// This is what a Kubernetes headless Service gives: one A record per ready
// pod behind the Service's name.
package dns
