module github.com/rdmarpc/rdmarpc/bench

go 1.26.0

require (
	github.com/bufbuild/protocompile v0.14.1
	github.com/rdmarpc/rdmarpc v0.0.0-00010101000000-000000000000
	github.com/rdmarpc/rdmarpc/examples v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
	storj.io/drpc v1.0.0
)

require (
	github.com/Mellanox/rdmamap v1.1.0 // indirect
	github.com/vishvananda/netlink v1.1.0 // indirect
	github.com/vishvananda/netns v0.0.0-20191106174202-0a2b9b5464df // indirect
	github.com/zeebo/errs v1.2.2 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

// The benchmarks measure the library and the examples in this repository.
replace (
	github.com/rdmarpc/rdmarpc => ../
	github.com/rdmarpc/rdmarpc/examples => ../examples
)
