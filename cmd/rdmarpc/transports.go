package main

// The transports `call` and `bench` dial: transport/rdma builds without cgo
// too (its verbs binding is then a stub whose dial fails with
// transport.ErrNoDevice), so the command still builds with CGO_ENABLED=0.
// And google.rpc's error details, linked so that a failed call's details of
// those types print as JSON rather than as a type URL.
import (
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"

	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)
