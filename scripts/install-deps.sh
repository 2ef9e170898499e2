#!/usr/bin/env bash
# Installs what building and testing rdmarpc needs on a fresh Debian machine
# (Go 1.26 at /usr/local/go is the one precondition):
#   - gcc, libibverbs-dev, ibverbs-providers, rdma-core: the cgo verbs binding;
#   - protobuf-compiler and libprotobuf-dev: the check that `rdmarpc gen`
#     matches protoc byte for byte (libprotobuf-dev holds the well-known types,
#     google/protobuf/*.proto, that protoc needs; --no-install-recommends
#     leaves it out, so it is named here);
#   - make, git, ca-certificates: the Makefile, `git diff` in check-generate,
#     and HTTPS to the Go module proxy;
#   - every module's Go dependencies, and staticcheck (make lint);
#   - kubeconform and Kubernetes' OpenAPI document (the k8s.io/kubernetes
#     module), from the Go module proxy: make lint validates deploy/kubernetes
#     (scripts/check-deploy.sh) with nothing fetched at test time;
#   - through the test bed (testbed/vm.sh prepare): qemu, busybox, perftest,
#     a Debian kernel with rdma_rxe and the initramfs that runs tests on real
#     verbs.
# Idempotent: it installs only what is missing, and a warm run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

# The staticcheck release make lint runs; one that knows Go 1.26.
STATICCHECK_VERSION=v0.8.2
# kubeconform, and the Kubernetes release whose schemas it checks against
# (K8S_VERSION is also in scripts/check-deploy.sh).
KUBECONFORM_VERSION=v0.8.0
K8S_VERSION=v1.37.2

need=()
for p in gcc make git ca-certificates libibverbs-dev ibverbs-providers rdma-core \
         protobuf-compiler libprotobuf-dev; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 1200 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "install-deps: needs Go 1.26 at /usr/local/go (https://go.dev/dl)" >&2; exit 1; }

# Every module of the repository (the library, examples/, bench/), each by
# its own go.mod and go.sum, as the Makefile builds them (GOWORK=off): the
# workspace's wider graph would only add entries to go.work.sum.
for mod in $(find . \( -name .cache -o -name .git \) -prune -o -name go.mod -printf '%h\n' | sort); do
  (cd "$mod" && GOWORK=off timeout 600 go mod download)
done

gobin=$(go env GOPATH)/bin
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "install-deps: installing staticcheck $STATICCHECK_VERSION"
  timeout 600 go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

if [ ! -x "$gobin/kubeconform" ]; then
  echo "install-deps: installing kubeconform $KUBECONFORM_VERSION"
  timeout 600 go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
fi
(cd /tmp && GOFLAGS=-mod=mod timeout 600 go mod download "k8s.io/kubernetes@$K8S_VERSION")

timeout 900 bash testbed/vm.sh prepare
