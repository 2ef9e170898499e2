// Package ghz is a module of its own that runs ghz, the gRPC load tester,
// against an rdmarpc server (issue 21 item 5). ghz's last release on the Go
// module proxy, v0.93.0, is built with gRPC-go v1.34, which this module
// pins by requiring it alone; it does not build with the gRPC-go of
// test/peers (v1.85), so the two modules stay apart, and this one is not in
// go.work (the workspace would join their gRPC-go versions): run it with
// GOWORK=off. ghz v0.93.0 asks for reflection's v1alpha, which rdmarpc does
// not serve, so it is given the .proto files.
package ghz
