// Package dnstest is a tiny authoritative DNS server on loopback UDP for
// tests: it answers A and AAAA questions from a table the test edits while
// it runs, so a test can point a "dns://127.0.0.1:port/name:port" target at
// it and add or remove backends.
//
// It answers what the Go resolver asks (one question, over UDP, or over TCP
// on the same port for a resolver set to use TCP) and nothing more: no
// CNAMEs, no truncation; answers are capped at MaxRecords.
package dnstest
