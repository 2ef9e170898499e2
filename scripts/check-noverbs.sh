#!/usr/bin/env bash
# Checks that the commands build with cgo on where libibverbs-dev is not
# installed, and that a binary runs where libibverbs is not installed,
# saying what is missing: README's "builds without RDMA headers".
#
# This machine has the headers (make deps installs them), so each check runs
# in a private mount namespace (unshare) in which they are hidden: an empty
# directory over /usr/include/infiniband and /dev/null over libibverbs.so*
# (the -dev package's link-time libibverbs.so and the run-time
# libibverbs.so.1). Nothing outside the namespace changes.
#
# Go's build cache does not notice system headers, so the header-less builds
# carry a define of their own in CGO_CFLAGS: they are cached apart from the
# normal ones and never mixed up with them.
#
#   scripts/check-noverbs.sh     (run by make build; needs root or unprivileged user namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
command -v cc >/dev/null || { echo "FAIL check-noverbs: needs a C compiler (make deps installs gcc)"; exit 1; }
[ -e /usr/include/infiniband/verbs.h ] || { echo "FAIL check-noverbs: needs libibverbs-dev, to hide (make deps)"; exit 1; }

ns=(unshare --mount)
[ "$(id -u)" = 0 ] || ns=(unshare --map-root-user --mount)
"${ns[@]}" true 2>/dev/null || { echo "FAIL check-noverbs: cannot make a mount namespace (${ns[*]})"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/empty"

# without WHAT CMD...: runs CMD with WHAT (headers, library or both) hidden.
without() {
  local what=$1
  shift
  "${ns[@]}" bash -euo pipefail -c '
    what=$1 empty=$2; shift 2
    if [ "$what" != library ]; then mount --bind "$empty" /usr/include/infiniband; fi
    for f in /usr/lib/*/libibverbs.so /usr/lib/*/libibverbs.so.*; do
      [ -e "$f" ] || continue
      case $f in *.so) [ "$what" = library ] || mount --bind /dev/null "$f" ;;
                 *)    [ "$what" = headers ] || mount --bind /dev/null "$f" ;; esac
    done
    exec "$@"' _ "$what" "$tmp/empty" "$@"
}

export CGO_ENABLED=1
nohdr="${CGO_CFLAGS:--O2 -g} -DRDMARPC_BUILT_WITHOUT_VERBS_H"

echo "== check-noverbs: building the commands without libibverbs-dev (cgo on, gcc present)"
without both env CGO_CFLAGS="$nohdr" go build -o "$tmp/bin/" ./cmd/...
(cd examples && without both env GOWORK=off CGO_CFLAGS="$nohdr" go build -o "$tmp/bin/" ./kvstore/cmd/... ./echo/cmd/...)
echo "PASS check-noverbs: $(ls "$tmp/bin" | tr '\n' ' ')built"

echo "== check-noverbs: what the binding says built without the headers, and run without the library"
# onetest BIN WHAT: runs TestWithoutVerbs, which must pass (not skip).
onetest() {
  local out
  out=$(without "$2" env RDMARPC_TEST_NOVERBS="$2" "$1" -test.run '^TestWithoutVerbs$' -test.v 2>&1) \
    || { echo "$out"; echo "FAIL check-noverbs: without the $2"; exit 1; }
  grep -q -- '--- PASS: TestWithoutVerbs' <<<"$out" || { echo "$out"; echo "FAIL check-noverbs: TestWithoutVerbs did not run"; exit 1; }
  echo "PASS check-noverbs: without the $2, Devices and Open say so"
}
without both env CGO_CFLAGS="$nohdr" go test -c -o "$tmp/verbs-nohdr.test" ./transport/rdma/internal/verbs
onetest "$tmp/verbs-nohdr.test" headers
go test -c -o "$tmp/verbs.test" ./transport/rdma/internal/verbs
onetest "$tmp/verbs.test" library
echo "PASS check-noverbs"
