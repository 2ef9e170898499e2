#!/usr/bin/env bash
# Runs the project's test binaries on real kernel verbs in the Soft-RoCE test bed.
#
#   testbed/run-tests.sh [outdir]     (default outdir: <repo>/.cache/testbed)
#
# Reads testbed/tests.txt, one test binary per line:
#   <1vm|2vm> <go package dir, relative to the repo> [test flags...]
# builds each package's test binary on the host (go test -c, cgo on), writes <outdir>/guest.sh
# and boots the guests: every 1vm line in one run1 boot, every 2vm line in one run2 boot,
# where both guests run the same binary with the same flags and ROLE tells each its side.
# Flags are passed to the binary; -run, -timeout, -count ... may omit the "test." prefix.
# A binary without -test.timeout gets RDMARPC_TEST_TIMEOUT (default 5m).
# Environment: RDMARPC_TESTBED_TESTS (another tests file), GOFLAGS (e.g. -race), and
# vm.sh's RDMARPC_CACHE, RXE_MTU, RDMARPC_VM_QUIET.
# Exit status 0 only when every binary built and passed in every guest.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
TESTS=${RDMARPC_TESTBED_TESTS:-$HERE/tests.txt}
OUT=${1:-$REPO/.cache/testbed}
export RDMARPC_CACHE=${RDMARPC_CACHE:-${HOME:-/root}/.cache/rdmarpc-testbed}
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
MODULE=$(awk '$1 == "module" {print $2; exit}' "$REPO/go.mod")

T0=${EPOCHREALTIME/./}
elapsed() { local d=$(( ${EPOCHREALTIME/./} - ${1:-$T0} )); printf '%d.%01d' $((d / 1000000)) $((d % 1000000 / 100000)); }
log() { printf '[run-tests %6ss] %s\n' "$(elapsed)" "$*"; }

HOST_FAILS=()  # failures found on the host (build, guest that did not report)
host_fail() { HOST_FAILS+=("$1"); echo "### $1: FAIL ($2)"; }

# dur_seconds GO-DURATION -> whole seconds, rounded up (e.g. 90s, 5m, 1h30m, 1m30s)
dur_seconds() {
  local d=$1 total=0 n u
  [ -n "$d" ] || return 1
  while [[ $d =~ ^([0-9]+)(h|m|s|ms|us|µs|ns)(.*)$ ]]; do
    n=${BASH_REMATCH[1]}; u=${BASH_REMATCH[2]}; d=${BASH_REMATCH[3]}
    case $u in h) total=$((total + n * 3600)) ;; m) total=$((total + n * 60)) ;; s) total=$((total + n)) ;;
               *) total=$((total + 1)) ;; esac
  done
  [ -z "$d" ] && [ "$total" -gt 0 ] && echo "$total"
}

# ---------------------------------------------------------------- read tests.txt

[ -f "$TESTS" ] || { echo "FAIL no tests file $TESTS"; exit 1; }
MODES=() PKGS=() NAMES=() FLAGS=() DEADLINES=()
declare -A seen=()
lineno=0
while read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  line=${line%%#*}
  read -r -a f <<<"$line"
  [ ${#f[@]} -eq 0 ] && continue
  mode=${f[0]}; pkg=${f[1]:-}
  [[ $mode == 1vm || $mode == 2vm ]] || { echo "FAIL $TESTS:$lineno: mode '$mode' is not 1vm or 2vm"; exit 1; }
  pkg=${pkg#./}; pkg=${pkg#"$MODULE"/}; pkg=${pkg%/}
  [ "$pkg" = "$MODULE" ] && pkg=.
  [ -n "$pkg" ] && [ -d "$REPO/$pkg" ] || { echo "FAIL $TESTS:$lineno: no package directory '${f[1]:-}'"; exit 1; }
  flags=() timeout=
  for a in "${f[@]:2}"; do
    # -run=X / --run X -> -test.run=X for the flags a compiled test binary knows
    if [[ $a =~ ^--?(run|skip|v|count|timeout|short|parallel|failfast|shuffle|cpu|bench|benchtime|benchmem|list)(=.*)?$ ]]; then
      a="-test.${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
    fi
    [[ $a == -test.timeout=* ]] && timeout=${a#-test.timeout=}
    [ "${prev:-}" = -test.timeout ] && timeout=$a
    prev=$a
    flags+=("$a")
  done
  prev=
  if [ -z "$timeout" ]; then timeout=${RDMARPC_TEST_TIMEOUT:-5m}; flags+=("-test.timeout=$timeout"); fi
  secs=$(dur_seconds "$timeout") || { echo "FAIL $TESTS:$lineno: -test.timeout '$timeout' must be a positive duration like 90s, 5m, 1h30m"; exit 1; }
  # the report name is the package; a package listed twice in one mode gets #2, #3 ...
  name=$pkg
  n=${seen[$mode.$name]:-0}; seen[$mode.$name]=$((n + 1))
  [ "$n" -gt 0 ] && name="$name#$((n + 1))"
  MODES+=("$mode"); PKGS+=("$pkg"); NAMES+=("$name"); DEADLINES+=($((secs + 30)))
  FLAGS+=("$(printf '%q ' "${flags[@]}")")
done < "$TESTS"
[ ${#MODES[@]} -gt 0 ] || { echo "FAIL $TESTS lists no test binary"; exit 1; }

# ---------------------------------------------------------------- host side: prepare, build

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/lib" "$OUT/sync"
rm -f "$OUT"/*.test "$OUT"/*.log "$OUT"/rc.* "$OUT"/results.* "$OUT/guest.sh"

log "preparing the test bed"
"$HERE/vm.sh" prepare || exit 1
export RDMARPC_TESTBED_PREPARED=1
# shellcheck source=/dev/null
. "$RDMARPC_CACHE/boot.env"

# module_dir PKGDIR: the directory (relative to the repo, "." for the root) of
# the nearest go.mod at or above the package directory.
module_dir() {
  local d=$1
  while [ "$d" != . ] && [ ! -f "$REPO/$d/go.mod" ]; do d=$(dirname "$d"); done
  echo "$d"
}

declare -A built=()  # package -> binary name, or "" when its build failed
for i in "${!PKGS[@]}"; do
  pkg=${PKGS[$i]}
  [ -n "${built[$pkg]+x}" ] && continue
  bin="${pkg//\//-}.test"; [ "$pkg" = . ] && bin=root.test
  t=${EPOCHREALTIME/./}
  # Built from the module that holds the package (the library, examples/,
  # bench/ are modules of their own), with or without the go.work.
  mod=$(module_dir "$pkg")
  rel=${pkg#"$mod"}; rel=${rel#/}
  if ! (cd "$REPO/$mod" && CGO_ENABLED=1 timeout 900 go test -c -o "$OUT/$bin" "./$rel"); then
    built[$pkg]=""; host_fail "${pkg}" "go test -c failed"; continue
  fi
  if [ ! -x "$OUT/$bin" ]; then
    built[$pkg]=""; host_fail "${pkg}" "no test binary: the package has no tests for linux/cgo"; continue
  fi
  built[$pkg]=$bin
  log "built $pkg -> $bin ($(elapsed "$t")s)"
done

# Libraries a test binary needs that the initramfs does not hold travel in /out/lib.
for bin in "${built[@]}"; do
  [ -n "$bin" ] || continue
  # a static binary (no cgo) has none: ldd fails
  libs=$(timeout 30 ldd "$OUT/$bin" 2>/dev/null | grep -o '/[^ ]*') || continue
  for l in $libs; do
    g=$l; case $g in /usr/*) ;; *) g=/usr$g ;; esac
    grep -qxF "$g" "${INITRD%.cpio}.files" 2>/dev/null && continue
    mkdir -p "$OUT/lib" && cp -L "$l" "$OUT/lib/" && log "shipping $l in /out/lib"
  done
done

# ---------------------------------------------------------------- guest.sh

GUEST_SECS=(0 0) # total deadline of the 1vm and the 2vm boot
{
  cat <<'EOF'
#!/bin/sh
# Generated by testbed/run-tests.sh from testbed/tests.txt; runs in the test-bed guest
# (busybox sh) with ROLE, RDMARPC_TEST_* and PEER_IP set. Re-run by hand: testbed/vm.sh run1|run2 <this dir>
PASS=0 FAIL=0
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
now() { cut -d' ' -f1 /proc/uptime; }

# run_test NAME BINARY PKGDIR DEADLINE FLAGS...: runs one test binary from its package
# directory (for testdata), output in /out/NAME.ROLE.log; prints it whole only on failure.
run_test() {
  name=$1 bin=$2 dir=$3 deadline=$4; shift 4
  log=/out/$(echo "$name" | tr '/#' '-.').$ROLE.log
  [ "$ROLE" = single ] || name="$name@$ROLE"
  echo "=== RUN $name: cd /src/$dir && $bin -test.v $*"
  t0=$(now)
  (cd "/src/$dir" && exec timeout "$deadline" "/out/$bin" -test.v "$@") > "$log" 2>&1
  rc=$?
  dt=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}')
  if [ "$rc" = 0 ]; then
    PASS=$((PASS + 1)); echo "PASS $name" >> "/out/results.$ROLE"
    # test verdicts, with the reason under each skip
    awk '/^ *--- / {s = /--- SKIP/; print; next} /^(=== |PASS$|FAIL$|ok )/ {s = 0} s' "$log"
    echo "### $name: PASS (${dt}s)"
  else
    FAIL=$((FAIL + 1)); echo "FAIL $name" >> "/out/results.$ROLE"
    echo "--- output of $name ($log):"
    cat "$log"
    [ "$rc" = 143 ] && echo "(killed at the guest's ${deadline}s deadline)"
    echo "### $name: FAIL (exit $rc, ${dt}s)"
  fi
}

# barrier TAG SECONDS: both guests wait here for each other (files in the shared /out),
# so a server of one binary never meets the client of another.
barrier() {
  peer=server; [ "$ROLE" = server ] && peer=client
  touch "/out/sync/$1.$ROLE"
  i=0
  while [ ! -e "/out/sync/$1.$peer" ]; do
    i=$((i + 1)); [ "$i" -gt $(($2 * 10)) ] && return 1
    sleep 0.1
  done
}
missed() { # NAME: the peer never arrived
  FAIL=$((FAIL + 1)); echo "FAIL $1@$ROLE" >> "/out/results.$ROLE"
  echo "### $1@$ROLE: FAIL (the $ROLE waited in vain for its peer)"
}

# The rxe device counters: RNR and retry errors must stay at zero (credits make RNR impossible).
counters() {
  echo "=== rxe0 hw_counters ($ROLE)"
  bad=
  for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
    v=$(cat "$f"); printf '  %-26s %s\n' "${f##*/}" "$v"
    case ${f##*/} in rcvd_rnr_err|send_rnr_err|retry_rnr_exceeded_err|retry_exceeded_err)
      [ "$v" = 0 ] || bad="$bad ${f##*/}=$v" ;; esac
  done
  [ -z "$bad" ] || echo "WARNING: rxe0 error counters are not zero:$bad"
  if [ "$ROLE" != single ]; then
    echo "=== $RDMARPC_TEST_NETDEV ($ROLE)"; /usr/sbin/ip -s link show "$RDMARPC_TEST_NETDEV"
  fi
}

case $ROLE in
single)
EOF
  for i in "${!MODES[@]}"; do
    [ "${MODES[$i]}" = 1vm ] && [ -n "${built[${PKGS[$i]}]}" ] || continue
    echo "  run_test $(printf '%q %q %q' "${NAMES[$i]}" "${built[${PKGS[$i]}]}" "${PKGS[$i]}") ${DEADLINES[$i]} ${FLAGS[$i]}"
    GUEST_SECS[0]=$((GUEST_SECS[0] + DEADLINES[i]))
  done
  echo "  ;;"
  echo "server|client)"
  wait_peer=300  # the first barrier also absorbs the difference in boot times
  for i in "${!MODES[@]}"; do
    [ "${MODES[$i]}" = 2vm ] && [ -n "${built[${PKGS[$i]}]}" ] || continue
    echo "  barrier $i $wait_peer && run_test $(printf '%q %q %q' "${NAMES[$i]}" "${built[${PKGS[$i]}]}" "${PKGS[$i]}") ${DEADLINES[$i]} ${FLAGS[$i]}|| missed $(printf %q "${NAMES[$i]}")"
    GUEST_SECS[1]=$((GUEST_SECS[1] + wait_peer + DEADLINES[i]))
    wait_peer=$((DEADLINES[i] + 30))
  done
  cat <<'EOF'
  ;;
esac
counters
echo "=== SUMMARY pass=$PASS fail=$FAIL"
[ "$FAIL" = 0 ]
EOF
} > "$OUT/guest.sh"

# ---------------------------------------------------------------- boot

have() { local i; for i in "${!MODES[@]}"; do [ "${MODES[$i]}" = "$1" ] && [ -n "${built[${PKGS[$i]}]}" ] && return 0; done; return 1; }
expected() { local i n=0; for i in "${!MODES[@]}"; do [ "${MODES[$i]}" = "$1" ] && [ -n "${built[${PKGS[$i]}]}" ] && n=$((n + 1)); done; echo "$n"; }

# A guest whose results are missing or short (crashed, killed, setup failed) is a failure too.
check_results() { # role mode
  local got=0 rc
  rc=$(cat "$OUT/rc.$1" 2>/dev/null || echo none)
  [ -f "$OUT/results.$1" ] && got=$(wc -l < "$OUT/results.$1")
  if [ "$got" -lt "$(expected "$2")" ] || { [ "$rc" != 0 ] && ! grep -q '^FAIL' "$OUT/results.$1" 2>/dev/null; }; then
    host_fail "$1 guest" "guest.sh exit status $rc, $got of $(expected "$2") binaries reported; see $OUT/console.$1.log"
  fi
}

if have 1vm; then
  log "run1: $(expected 1vm) binaries in one guest"
  RDMARPC_VM_TIMEOUT=$((GUEST_SECS[0] + 60)) "$HERE/vm.sh" run1 "$OUT" || true  # judged by the results
  check_results single 1vm
fi
if have 2vm; then
  log "run2: $(expected 2vm) binaries in two guests"
  mkdir -p "$OUT/sync"
  RDMARPC_VM_TIMEOUT=$((GUEST_SECS[1] + 60)) "$HERE/vm.sh" run2 "$OUT" || true  # judged by the results
  check_results server 2vm
  check_results client 2vm
fi

# ---------------------------------------------------------------- summary

pass=$(cat "$OUT"/results.* 2>/dev/null | grep -c '^PASS' || true)
fail=$(( $(cat "$OUT"/results.* 2>/dev/null | grep -c '^FAIL' || true) + ${#HOST_FAILS[@]} ))
echo
echo "=== test bed results ($(elapsed)s, logs in $OUT)"
for r in "$OUT"/results.{single,server,client}; do
  [ -f "$r" ] || continue
  role=${r##*.}
  while read -r verdict name; do
    if [ "$verdict" = PASS ]; then echo "  PASS $name"; continue; fi
    f=${name%@*}; f=${f//\//-}; f="$OUT/${f//#/.}.$role.log"
    echo "  FAIL $name: $f"
    # quiet runs did not show the console: show the end of what failed here
    [ "${RDMARPC_VM_QUIET:-0}" = 1 ] && [ -f "$f" ] && tail -n 60 "$f" | sed 's/^/      /'
  done < "$r"
done
for f in "${HOST_FAILS[@]}"; do echo "  FAIL $f"; done
echo "=== SUMMARY pass=$pass fail=$fail"
echo "testbed: $pass passed, $fail failed"
[ "$fail" = 0 ]
