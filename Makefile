# The commands a newcomer and CI run. `make test` is what .ci/run runs.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: test generate check-generate

# Regenerate every checked-in generated file (//go:generate directives).
generate:
	go generate ./...

# Fails when regenerating changes a checked-in file.
check-generate: generate
	git diff --exit-code -- '*.pb.go' '*_rdmarpc.pb.go' '*.golden'
