# The commands a newcomer and CI run. `make test` is exactly what .ci/run runs.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: demo echo-demo test deps lint build unit vm-test generate check-generate fuzz bench bench-rdma

# The main job: the key-value store, served (RDMA when a device serves the
# address, else TCP) and used from its command-line client.
demo:
	bash examples/kvstore/quickstart.sh

# The smallest service: Echo over TCP.
echo-demo:
	bash scripts/echo-demo.sh

# Everything, on a fresh Debian machine: installs what it needs, then lint,
# builds (with and without cgo), unit and conformance tests with -race, the
# generated-code check, and the RDMA suites on real verbs in the Soft-RoCE VM.
test: deps lint build unit check-generate vm-test

deps:
	bash scripts/install-deps.sh

lint:
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	go vet ./...

build:
	go build ./...
	CGO_ENABLED=0 go build ./...

unit:
	go test -race -count=1 -timeout 20m ./...

# The RDMA suites on real verbs in the Soft-RoCE guests, race detector on.
vm-test:
	GOFLAGS=-race bash testbed/run-tests.sh

# Regenerate every checked-in generated file (//go:generate directives).
generate:
	go generate ./...

# Fails when regenerating changes a checked-in file.
check-generate: generate
	git diff --exit-code -- '*.pb.go' '*.golden'

# Runs every fuzz target for FUZZTIME each (default 60s).
FUZZTIME ?= 60s
fuzz:
	@for pkg in $$(go list ./...); do \
	  for f in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# Benchmarks: rdmarpc-TCP and gRPC-go in one run (go test, then the harness's
# ratio table, CSV and PNG in .cache/); bench-rdma: rdmarpc over rdma://
# next to ib_send_lat / ib_send_bw in the Soft-RoCE guest. See bench/README.md.
bench:
	mkdir -p .cache
	go test -run '^$$' -bench Echo -benchtime 2s -count 1 ./bench/ | tee .cache/bench-echo.txt
	go run ./bench/cmd/rpcbench --compare-grpc --sizes 64,1KiB,64KiB --conc 1,16,64 --duration 3s \
		--csv .cache/bench.csv --png .cache/bench.png

bench-rdma:
	bash bench/softroce.sh
