#!/usr/bin/env bash
# Installs what building and testing rdmarpc needs on a fresh Debian machine:
# libibverbs-dev (the cgo verbs binding), protobuf-compiler (the check that
# `rdmarpc gen` matches protoc byte for byte), and, through the test bed, qemu,
# a Debian kernel with rdma_rxe and the initramfs that runs tests on real verbs.
# Idempotent: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for p in libibverbs-dev ibverbs-providers rdma-core protobuf-compiler gcc make git; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  timeout 300 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
export PATH=/usr/local/go/bin:$PATH
timeout 600 go mod download
timeout 900 bash testbed/vm.sh prepare
