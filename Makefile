# The commands a newcomer and CI run. `make test` is exactly what .ci/run runs.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: demo echo-demo test fresh-test deps lint build unit vm-test generate check-generate fuzz bench bench-rdma bench-kv bench-scale bench-grpc

# The repository's modules: the library (what users require), the
# instrumentation packages and the gRPC-go adapter (contrib/: OpenTelemetry,
# Prometheus and gRPC-go, so that the library does not require them), the examples, the benchmarks and the real-peer tests (test/peers: gRPC-go; test/ghz: ghz, pinned to the old gRPC-go it builds with, so not in go.work), each
# with its own go.mod (and go.work joining them for
# development). Every target below runs over each of them as its users build
# it, alone (GOWORK=off), so a module that only builds inside the workspace
# fails here.
MODULES := . contrib/otel contrib/prometheus contrib/grpcgo experimental/opentelemetry stats/opentelemetry orca examples bench test/peers test/ghz
STATICCHECK := $(shell /usr/local/go/bin/go env GOPATH 2>/dev/null)/bin/staticcheck
# each CMD: runs CMD in every module, stops at the first failure.
each = @set -e; for m in $(MODULES); do echo "== $$m: $(1)"; (cd $$m && GOWORK=off $(1)); done

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

# The README's two commands (make demo, make test) in a pristine Debian root:
# debootstrap (cached in .cache/fresh), Go bind-mounted, a clone of HEAD.
# Needs root. See scripts/fresh-test.sh.
fresh-test:
	bash scripts/fresh-test.sh

deps:
	bash scripts/install-deps.sh

# gofmt, go vet, staticcheck, and go.mod/go.sum tidy, in every module; the
# Kubernetes manifests against Kubernetes' schemas (scripts/check-deploy.sh).
lint:
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	@[ -x $(STATICCHECK) ] || { echo "staticcheck missing: run make deps"; exit 1; }
	$(call each,go vet ./...)
	$(call each,$(STATICCHECK) ./...)
	$(call each,go mod tidy -diff)
	bash scripts/check-deploy.sh

# Builds with and without cgo, the commands with cgo but without
# libibverbs-dev (scripts/check-noverbs.sh), and the README's route from a
# clone into another module (scripts/check-clone-route.sh).
build:
	$(call each,go build ./...)
	$(call each,CGO_ENABLED=0 go build ./...)
	bash scripts/check-noverbs.sh
	bash scripts/check-clone-route.sh

unit:
	$(call each,go test -race -count=1 -timeout 20m ./...)
	# The tests that skip under -race (its allocations and its schedule would
	# hide what they check) run here without it.
	go test -count=1 -run '^(TestUnaryAllocs|TestStreamedMessageAllocs|TestLendingSavesTheCopy)$$' ./rpc
	go test -count=1 -run '^TestConcurrentPingPongsShareWrites$$' ./transport/tcp

# The RDMA suites on real verbs in the Soft-RoCE guests, race detector on.
vm-test:
	GOFLAGS=-race bash testbed/run-tests.sh

# Regenerate every checked-in generated file (//go:generate directives).
generate:
	$(call each,go generate ./...)

# Fails when regenerating changes a checked-in file.
check-generate: generate
	git diff --exit-code -- '*.pb.go' '*.golden'

# Runs every fuzz target for FUZZTIME each (default 60s).
FUZZTIME ?= 60s
fuzz:
	@for m in $(MODULES); do (cd $$m && export GOWORK=off && \
	  for pkg in $$(go list ./...); do \
	    for f in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	      echo "== $$pkg $$f"; go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	    done; \
	  done) || exit 1; \
	done

# Benchmarks: each target runs one area's benchmark and writes its page of current
# figures, bench/results/<area>.md, and the run's files beside it (bench/pages.sh; commit
# both). bench: rdmarpc over tcp:// against raw TCP, drpc and gRPC-go on loopback;
# bench-rdma: the latency ladder in one Soft-RoCE boot; bench-kv: the KV store's Get
# against the echo, separate processes, rdma:// and tcp://; bench-scale: idle rdma://
# connections at scale (a 12 GiB guest). See bench/README.md.
bench:
	bash bench/pages.sh tcp

bench-rdma:
	bash bench/pages.sh rdma

bench-kv:
	bash bench/pages.sh kv

bench-scale:
	bash bench/pages.sh scale

# The gRPC protocol path against gRPC-go (servers in processes of their
# own) and what sniffing costs rdmarpc's framing: bench/grpcwire.sh.
bench-grpc:
	bash bench/grpcwire.sh
