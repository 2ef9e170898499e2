#!/bin/bash
# grpc-examples.sh: gRPC-go's example programs, ported by the import rule and
# nothing else, built against this clone: prints each main package OK or
# FAIL (with the first error) and the count. RUN=1 then runs gRPC-go's own
# harness (its examples_test.sh: each server and client, their output
# checked for the lines gRPC-go expects) over the ported copy.
#
# The examples are gRPC-go's module google.golang.org/grpc/examples, from
# the Go module cache (EXAMPLES=dir to use another copy). The ported copy's
# go.mod gets what any program using an unpublished clone needs: the
# library, stats/opentelemetry, experimental/opentelemetry and orca required and
# replaced by this clone's directories (gRPC-go's own replaces of the
# examples' go.mod are dropped). Needs the module cache that `make deps`
# fills; sets GOFLAGS=-mod=mod.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ver=v0.0.0-20260825154716-030ee8becb20
src=${EXAMPLES:-$(go env GOMODCACHE)/google.golang.org/grpc/examples@$ver}
[ -d "$src" ] || (cd "$root" && GOFLAGS=-mod=mod go mod download -json google.golang.org/grpc/examples@$ver >/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/ex"
chmod -R u+w "$work/ex"
cd "$work/ex"
export GOFLAGS=-mod=mod GOWORK=off
(cd "$root" && go build -o "$work/rdmarpc" ./cmd/rdmarpc)
"$work/rdmarpc" port ./... > "$work/port.out" 2>&1 || true
zero=v0.0.0-00010101000000-000000000000
for m in google.golang.org/grpc google.golang.org/grpc/gcp/observability google.golang.org/grpc/stats/opentelemetry; do
  go mod edit -dropreplace $m -droprequire $m
done
go mod edit -droprequire google.golang.org/grpc/security/advancedtls -droprequire google.golang.org/grpc/stats/opencensus
for m in "" /stats/opentelemetry /experimental/opentelemetry /orca; do
  go mod edit -require "github.com/rdmarpc/rdmarpc$m@$zero" -replace "github.com/rdmarpc/rdmarpc$m=$root$m"
done
go mod tidy -e > "$work/tidy.out" 2>&1 || true # what rdmarpc lacks stays missing
ok=0 fail=0 failed=
for rel in $(grep -rl --include='*.go' '^package main$' . | xargs -n1 dirname | sed 's|^\./||' | sort -u); do
  if out=$(go build -o /dev/null "./$rel" 2>&1); then
    ok=$((ok + 1)); echo "OK   $rel"
  else
    fail=$((fail + 1)); failed="$failed $rel"; echo "FAIL $rel: $(echo "$out" | grep -v '^#' | head -1)"
  fi
done
echo "$ok of $((ok + fail)) example programs compile by the import rule"
if [ "${RUN:-}" = 1 ]; then
  # gRPC-go's harness stops at the first example that does not build:
  # leave those out of its list.
  for rel in $failed; do
    sed -i "\|^    \"${rel%/*}\"\$|d" examples_test.sh
  done
  bash examples_test.sh
fi
