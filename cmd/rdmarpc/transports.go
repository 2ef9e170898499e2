package main

// The transports `call` and `bench` dial. transport/rdma builds without cgo
// too (its verbs binding is then a stub whose dial fails with
// transport.ErrNoDevice), so the command still builds with CGO_ENABLED=0.
import (
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)
