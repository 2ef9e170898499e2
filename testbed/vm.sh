#!/usr/bin/env bash
# The rdmarpc Soft-RoCE test bed: Debian's full kernel booted under qemu (TCG) from a
# busybox initramfs, with rdma_rxe giving real kernel verbs to test binaries built here.
#
#   vm.sh prepare         install host packages, fetch + unpack the kernel, build the
#                         initramfs; idempotent and cached (a warm run takes seconds)
#   vm.sh run1 <outdir>   boot one guest (rxe0 over dummy0, 10.9.9.1) and run <outdir>/guest.sh
#   vm.sh run2 <outdir>   boot two guests joined by a virtual wire (server 10.9.9.2, client
#                         10.9.9.1), each with rxe0 on its own virtio NIC; both run guest.sh
#
# In the guest the repo is /src (read-only) and <outdir> is /out (read-write); guest.sh's
# exit status lands in /out/rc.<role> and becomes this script's exit status.
# Environment:
#   RDMARPC_CACHE       cache directory (default ~/.cache/rdmarpc-testbed)
#   RXE_MTU             MTU of the netdev under rxe0 (default 1500; 9000 gives active_mtu 4096)
#   RDMARPC_VM_TIMEOUT  seconds guest.sh may run (default 600); qemu gets that plus a boot margin
#   RDMARPC_VM_QUIET=1  do not echo the guest console (it is always kept in <outdir>)
#   RDMARPC_VM_MEM      MiB of memory of run1's guest (default 2048; the scale table's 10 000 rows want more)
#   RDMARPC_VM2_MEM     MiB of memory of each of run2's guests (default 1024; 1 GiB rendezvous messages want 4096)
#   RDMARPC_VM_CLOCK    the guest's clocksource (default tsc; hpet is what the kernel picks by itself)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CACHE=${RDMARPC_CACHE:-${HOME:-/root}/.cache/rdmarpc-testbed}
ARCH_LIB=/usr/lib/x86_64-linux-gnu

HOST_PKGS=(qemu-system-x86 busybox-static libibverbs-dev ibverbs-utils ibverbs-providers perftest
           rdma-core iproute2 cpio kmod xz-utils util-linux)
# Guest tools, by the name they are looked up under on the host.
GUEST_TOOLS=(ip rdma ibv_devinfo ibv_devices ibv_rc_pingpong
             ib_send_lat ib_send_bw ib_write_lat ib_write_bw ib_read_lat ib_read_bw)
# Libraries cgo test binaries built on the host expect, beyond what the tools pull in.
GUEST_LIBS=(libc.so.6 libpthread.so.0 libdl.so.2 libm.so.6 librt.so.1 libresolv.so.2 libgcc_s.so.1
            libibverbs.so.1 librdmacm.so.1 libnl-3.so.200 libnl-route-3.so.200)
# crc32_generic is not a declared dependency of rdma_rxe, but without it rxe fails with
# "failed to init crc32 algorithm"; it must come first.
GUEST_MODULES=(crc32_generic rdma_rxe ib_uverbs rdma_ucm dummy virtio_pci virtio_net 9pnet_virtio 9p)

T0=${TESTBED_T0:-${EPOCHREALTIME/./}}
export TESTBED_T0=$T0  # the _kernel/_initramfs helper processes log on the same clock
elapsed() { local d=$(( ${EPOCHREALTIME/./} - ${1:-$T0} )); printf '%d.%01d' $((d / 1000000)) $((d % 1000000 / 100000)); }
log() { printf '[testbed %6ss] %s\n' "$(elapsed)" "$*" >&2; }
fail() { printf 'FAIL %s\n' "$*" >&2; exit 1; }
# bounded CMD...: every external step gets a deadline; a stuck step fails the run instead of wedging it.
bounded() { local secs=$1; shift; timeout --kill-after=10 "$secs" "$@"; }

# ---------------------------------------------------------------- prepare

missing_packages() {
  local installed
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${HOST_PKGS[@]}" 2>/dev/null \
              | awk '$2 == "ii" {print $1}')
  local p
  for p in "${HOST_PKGS[@]}"; do grep -qx "$p" <<<"$installed" || echo "$p"; done
}

apt_updated=0
apt_update() {
  [ "$apt_updated" = 1 ] && return
  log "apt-get update"
  bounded 600 apt-get update -qq >&2 || fail "prepare: apt-get update"
  apt_updated=1
}

ensure_packages() {
  local need
  need=$(missing_packages)
  [ -z "$need" ] && return
  apt_update
  log "installing:" $need
  # shellcheck disable=SC2086 # word splitting of the package list is intended
  DEBIAN_FRONTEND=noninteractive bounded 1800 apt-get install -y -qq --no-install-recommends $need >&2 \
    || fail "prepare: apt-get install $need"
}

# The kernel the meta-package currently points at; the -cloud- flavour lacks rdma_rxe and 9p.
resolve_kver() {
  local dep
  dep=$(bounded 60 apt-cache depends linux-image-amd64 2>/dev/null \
        | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-amd64$/ {print $2; exit}') || true
  if [ -z "$dep" ]; then
    apt_update
    dep=$(bounded 60 apt-cache depends linux-image-amd64 \
          | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-amd64$/ {print $2; exit}') || true
  fi
  [ -n "$dep" ] || fail "prepare: cannot resolve the kernel behind linux-image-amd64"
  echo "${dep#linux-image-}"
}

# Finds the compressed kernel inside a bzImage and writes the ELF vmlinux, which qemu boots
# through its PVH entry point: that skips the real-mode setup and the in-guest decompressor,
# seconds of emulated CPU under TCG. Debian uses xz; gzip and zstd are tried as well.
extract_vmlinux() { # vmlinuz out
  local img=$1 out=$2 magic tool off
  for magic in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
    tool=${magic%%:*}
    case $tool in xz) tool="xz -dc --single-stream" ;; zstd) tool="zstd -dcq" ;; gzip) tool="gzip -dcq" ;; esac
    command -v "${tool%% *}" >/dev/null || continue
    for off in $(LC_ALL=C grep -obUaP "${magic#*:}" "$img" | cut -d: -f1); do
      # shellcheck disable=SC2086 # $tool carries its flags
      tail -c +$((off + 1)) "$img" | $tool > "$out.tmp" 2>/dev/null || true
      if [ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
        mv "$out.tmp" "$out"
        return 0
      fi
    done
  done
  rm -f "$out.tmp"
  return 1
}

# _kernel KVER: download, unpack (never install) and index the kernel package. Runs under a
# deadline as its own process (see prepare).
cmd__kernel() {
  local kver=$1
  local kd="$CACHE/kernel/$kver" tmp="$CACHE/kernel/$kver.tmp" deb
  mkdir -p "$CACHE/debs"
  deb=$(ls "$CACHE/debs/linux-image-${kver}_"*.deb 2>/dev/null | tail -n1) || true
  if [ -z "$deb" ]; then
    log "apt-get download linux-image-$kver"
    (cd "$CACHE/debs" && apt-get download -q -o APT::Sandbox::User=root "linux-image-$kver" >&2)
    deb=$(ls "$CACHE/debs/linux-image-${kver}_"*.deb | tail -n1)
  fi
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "unpacking $(basename "$deb")"
  dpkg -x "$deb" "$tmp"
  depmod -b "$tmp" "$kver"
  if extract_vmlinux "$tmp/boot/vmlinuz-$kver" "$tmp/vmlinux"; then
    log "vmlinux extracted for PVH boot"
  else
    log "no ELF payload found in vmlinuz: booting the bzImage (slower)"
  fi
  rm -rf "$kd" && mv "$tmp" "$kd"
  rm -f "$deb"  # the unpacked tree is the cache
}

# Where a host file goes in the guest: merged /usr, like Debian.
guest_path() { case $1 in /usr/*) echo "$1" ;; *) echo "/usr$1" ;; esac; }

host_tool() { # name -> absolute host path
  local p
  for p in /usr/sbin /usr/bin /sbin /bin; do [ -x "$p/$1" ] && { echo "$p/$1"; return; }; done
  fail "prepare: host tool $1 not found"
}

# Every host file that goes into the initramfs, one per line: "<host path> <guest path>".
initramfs_files() {
  local t p l lib
  local -a elfs=()
  echo "$(readlink -f /bin/busybox) /usr/bin/busybox"
  for t in "${GUEST_TOOLS[@]}"; do
    p=$(host_tool "$t")
    # iproute2's ip sits at a fixed path: the guest calls it by full path because busybox's
    # shell would otherwise run its own ip applet.
    if [ "$t" = ip ]; then echo "$p /usr/sbin/ip"; else echo "$p $(guest_path "$p")"; fi
    elfs+=("$p")
  done
  for p in "$ARCH_LIB"/libibverbs/librxe-rdmav*.so; do
    [ -e "$p" ] || fail "prepare: no rxe provider in $ARCH_LIB/libibverbs"
    echo "$p $p"; elfs+=("$p")
  done
  echo "/etc/libibverbs.d/rxe.driver /etc/libibverbs.d/rxe.driver"
  for lib in "${GUEST_LIBS[@]}"; do
    for p in "$ARCH_LIB/$lib" "/lib/x86_64-linux-gnu/$lib"; do
      [ -e "$p" ] && { echo "$p $(guest_path "$p")"; elfs+=("$p"); break; }
    done
  done
  for p in "${elfs[@]}"; do
    bounded 30 ldd "$p" 2>/dev/null | grep -o '/[^ ]*' || true
  done | sort -u | while read -r l; do echo "$l $(guest_path "$l")"; done
}

# One host file per guest path (ldd names /lib/... and /usr/lib/... for the same library).
initramfs_inputs() { initramfs_files | awk '!seen[$2]++'; }

# Module closure in insmod order, as paths relative to the kernel tree.
module_closure() { # kver
  local kd="$CACHE/kernel/$1" m line
  for m in "${GUEST_MODULES[@]}"; do
    line=$(bounded 30 modprobe -d "$kd" -S "$1" --show-depends "$m") \
      || fail "prepare: module $m not found in kernel $1"
    awk '$1 == "insmod" {print $2}' <<<"$line" | sed "s|^$kd||"
  done | awk '!seen[$0]++'
}

# _initramfs KVER KEY FILELIST MODLIST: assemble the root and pack it.
cmd__initramfs() {
  local kver=$1 key=$2 files=$3 mods=$4
  local r="$CACHE/initramfs.root" out="$CACHE/initramfs-$kver.cpio" kd="$CACHE/kernel/$kver"
  local src dst a rel
  rm -rf "$r"
  mkdir -p "$r"/{usr/bin,usr/sbin,usr/lib64,etc/testbed,proc,sys,dev,tmp,root,src,out} "$r/$ARCH_LIB"
  for a in bin sbin lib lib64; do ln -s "usr/$a" "$r/$a"; done
  while read -r src dst; do mkdir -p "$r$(dirname "$dst")"; cp -L "$src" "$r$dst"; done < "$files"
  # busybox applets, except names a real tool already has (ip, ...)
  for a in $("$r/usr/bin/busybox" --list); do
    [ -e "$r/usr/bin/$a" ] || [ -e "$r/usr/sbin/$a" ] || ln -s busybox "$r/usr/bin/$a"
  done
  : > "$r/etc/testbed/modules"
  while read -r rel; do
    dst="/usr/lib/modules/$kver${rel#/lib/modules/$kver}"
    mkdir -p "$r$(dirname "$dst")"
    case $rel in
      *.ko.xz)  xz -dc "$kd$rel" > "$r${dst%.xz}"; dst=${dst%.xz} ;;
      *.ko.zst) zstd -dcq "$kd$rel" > "$r${dst%.zst}"; dst=${dst%.zst} ;;
      *)        cp "$kd$rel" "$r$dst" ;;
    esac
    echo "$dst" >> "$r/etc/testbed/modules"
  done < "$mods"
  echo "$kver" > "$r/etc/testbed/kernel"
  cp "$HERE/guest-init.sh" "$r/init" && chmod 755 "$r/init"
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$r/etc/passwd"
  printf 'root:x:0:\n' > "$r/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' > "$r/etc/hosts"
  printf 'hosts: files dns\n' > "$r/etc/nsswitch.conf"
  mknod -m 600 "$r/dev/console" c 5 1 2>/dev/null || true
  (cd "$r" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$out.tmp"
  # What the image holds, so run-tests.sh can ship any other library a test binary needs.
  (cd "$r" && find . \( -type f -o -type l \) | sed 's|^\.||' | LC_ALL=C sort) > "$CACHE/initramfs-$kver.files"
  mv "$out.tmp" "$out"
  echo "$key" > "$CACHE/initramfs-$kver.key"
  rm -rf "$r"
}

cmd_prepare() {
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.prepare.lock"
  bounded 5 true  # the deadline tool itself must be there before anything else runs under it
  flock -w 900 8 || fail "prepare: another prepare holds $CACHE/.prepare.lock"

  ensure_packages
  local kver kd
  kver=$(resolve_kver)
  kd="$CACHE/kernel/$kver"
  if [ ! -f "$kd/boot/vmlinuz-$kver" ]; then
    bounded 1800 "$0" _kernel "$kver" || fail "prepare: kernel $kver"
  fi

  # The initramfs is rebuilt only when an input changed: a host file (path, size, mtime),
  # the module closure, the guest init or this script.
  local files="$CACHE/initramfs.inputs" mods="$CACHE/initramfs.modules" key
  initramfs_inputs > "$files"
  module_closure "$kver" > "$mods"
  key=$( { echo "$kver"; cat "$mods"
           cut -d' ' -f1 "$files" | xargs stat -L -c '%n %s %Y'; cat "$files"
           cat "$HERE/guest-init.sh" "$HERE/vm.sh"; } | sha256sum | cut -d' ' -f1)
  local how=cached
  if [ ! -f "$CACHE/initramfs-$kver.cpio" ] || [ "$(cat "$CACHE/initramfs-$kver.key" 2>/dev/null)" != "$key" ]; then
    log "building initramfs ($(wc -l < "$files") files, $(wc -l < "$mods") modules)"
    bounded 600 "$0" _initramfs "$kver" "$key" "$files" "$mods" || fail "prepare: initramfs"
    how=rebuilt
  fi
  local kernel="$kd/vmlinux"
  [ -f "$kernel" ] || kernel="$kd/boot/vmlinuz-$kver"
  cat > "$CACHE/boot.env" <<EOF
KVER=$kver
KERNEL=$kernel
INITRD=$CACHE/initramfs-$kver.cpio
EOF
  exec 8>&-
  echo "PASS prepare: kernel $kver, initramfs $how ($(du -h "$CACHE/initramfs-$kver.cpio" | cut -f1)), $(elapsed)s"
}

# ---------------------------------------------------------------- run1 / run2

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  [ -n "${SOCKDIR:-}" ] && rm -rf "$SOCKDIR"
  return 0
}

boot_env() {
  [ "${RDMARPC_TESTBED_PREPARED:-0}" = 1 ] || cmd_prepare >&2
  # shellcheck source=/dev/null
  . "$CACHE/boot.env"
  command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86_64 missing: run vm.sh prepare"
}

check_outdir() { # outdir -> absolute path
  [ -n "${1:-}" ] || fail "usage: vm.sh run1|run2 <outdir>"
  mkdir -p "$1"
  local out
  out=$(cd "$1" && pwd)
  case $out$REPO in *,*) fail "neither $out nor $REPO may contain a comma (qemu -virtfs syntax)" ;; esac
  [ -f "$out/guest.sh" ] || fail "$out/guest.sh missing: write the script the guest should run"
  echo "$out"
}

GUEST_TIMEOUT=${RDMARPC_VM_TIMEOUT:-600}
# The guest reads the time from the TSC, as Linux does on the x86 servers RDMA runs on. Left to
# itself under TCG it finds the vCPUs' TSCs "unsynchronized" and falls back to the HPET, which
# the vDSO cannot read: every clock read (time.Now, and the Go scheduler's own) becomes a
# system call and an emulated device access, 2.5-2.8 us against 0.19 us, and the test bed would
# magnify what real machines do not pay (bench/results/history/2026-12-06-guest-clock).
CLOCK="clocksource=${RDMARPC_VM_CLOCK:-tsc}"
[ "${RDMARPC_VM_CLOCK:-tsc}" != tsc ] || CLOCK="tsc=reliable $CLOCK"
# Boot, module loading and power-off take ~10 s under TCG; the margin covers a loaded host.
QEMU_TIMEOUT=$((GUEST_TIMEOUT + 180))

# start_guest ROLE OUT MEM CPUS EXTRA-APPEND QEMU-ARGS...: boots one guest in the background,
# console in OUT/console.ROLE.log; the qemu pid (under timeout) is appended to PIDS.
start_guest() {
  local role=$1 out=$2 mem=$3 cpus=$4 append=$5; shift 5
  local raw="$out/.console.$role.raw"
  rm -f "$out/rc.$role" "$out/console.$role.log"
  timeout --kill-after=10 "$QEMU_TIMEOUT" qemu-system-x86_64 \
    -nodefaults -no-user-config -display none -monitor none -serial stdio -no-reboot \
    -machine pc -accel tcg -cpu max -m "$mem" -smp "$cpus" \
    -kernel "$KERNEL" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3 tb_role=$role tb_timeout=$GUEST_TIMEOUT tb_mtu=${RXE_MTU:-1500} $CLOCK $append" \
    -virtfs "local,path=$REPO,mount_tag=src,security_model=none,readonly=on,id=src" \
    -virtfs "local,path=$out,mount_tag=out,security_model=none,id=out" \
    "$@" < /dev/null > "$raw" 2>&1 &
  PIDS+=($!)
  if [ "${RDMARPC_VM_QUIET:-0}" != 1 ]; then
    local prefix=""; [ "$role" = single ] || prefix="[$role] "
    tail -n +1 -F --pid=$! "$raw" 2>/dev/null | sed -u "s/\r\$//; s/^/$prefix/" &
  fi
}

# finish_guest ROLE OUT QEMU-RC: keeps the console, prints PASS/FAIL, echoes the guest's rc.
finish_guest() {
  local role=$1 out=$2 qrc=$3 rc
  sed 's/\r$//' "$out/.console.$role.raw" > "$out/console.$role.log" && rm -f "$out/.console.$role.raw"
  if [ -f "$out/rc.$role" ]; then
    rc=$(tr -dc '0-9' < "$out/rc.$role"); rc=${rc:-1}
    if [ "$rc" = 0 ]; then echo "PASS $role guest: guest.sh exited 0" >&2
    elif [ "$rc" = 125 ]; then echo "FAIL $role guest: test bed setup failed in the guest (see $out/console.$role.log)" >&2
    else echo "FAIL $role guest: guest.sh exited $rc (console: $out/console.$role.log)" >&2; fi
  else
    rc=1
    if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
      echo "FAIL $role guest: qemu killed after ${QEMU_TIMEOUT}s (console: $out/console.$role.log)" >&2
    else
      echo "FAIL $role guest: no rc.$role written, qemu exited $qrc; console tail:" >&2
      tail -n 30 "$out/console.$role.log" >&2
    fi
  fi
  echo "$rc"
}

take_qemu_lock() {
  # One boot at a time on this machine: two TCG guests racing two other guests for two cores
  # make rxe's retransmit timers fire.
  exec 9>"$CACHE/.qemu.lock"
  flock -w "${RDMARPC_VM_LOCK_WAIT:-1800}" 9 || fail "another test-bed run holds $CACHE/.qemu.lock"
}

cmd_run1() {
  local out; out=$(check_outdir "${1:-}")
  boot_env
  take_qemu_lock
  trap cleanup EXIT
  trap 'cleanup; exit 130' INT TERM
  local t0=${EPOCHREALTIME/./}
  local mem=${RDMARPC_VM_MEM:-2048}
  log "run1: booting one guest (2 vCPU, $mem MiB), rxe0 over dummy0, MTU ${RXE_MTU:-1500}"
  start_guest single "$out" "$mem" 2 "tb_net=dummy tb_ip=10.9.9.1" -nic none
  local qrc=0; wait "${PIDS[0]}" || qrc=$?
  wait  # the console echo
  local rc; rc=$(finish_guest single "$out" "$qrc")
  echo "$( [ "$rc" = 0 ] && echo PASS || echo FAIL ) run1: boot to power-off $(elapsed "$t0")s" >&2
  return "$rc"
}

cmd_run2() {
  local out; out=$(check_outdir "${1:-}")
  boot_env
  take_qemu_lock
  trap cleanup EXIT
  trap 'cleanup; exit 130' INT TERM
  # The wire: qemu's stream netdev over a unix socket (the TCP socket backend adds ~40 ms per
  # round trip). The socket lives in a short path: sun_path holds 108 bytes.
  SOCKDIR=$(mktemp -d /tmp/rdmarpc-wire.XXXXXX)
  local sock="$SOCKDIR/wire" t0=${EPOCHREALTIME/./}
  local mem=${RDMARPC_VM2_MEM:-1024}
  log "run2: booting server (10.9.9.2) and client (10.9.9.1), 1 vCPU and $mem MiB each, MTU ${RXE_MTU:-1500}"
  start_guest server "$out" "$mem" 1 "tb_net=virtio tb_ip=10.9.9.2 tb_peer=10.9.9.1" \
    -netdev "stream,id=wire,server=on,addr.type=unix,addr.path=$sock" \
    -device virtio-net-pci,netdev=wire,mac=52:54:00:9e:09:02
  local i
  for i in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || fail "run2: server qemu did not create $sock"
  start_guest client "$out" "$mem" 1 "tb_net=virtio tb_ip=10.9.9.1 tb_peer=10.9.9.2" \
    -netdev "stream,id=wire,server=off,addr.type=unix,addr.path=$sock" \
    -device virtio-net-pci,netdev=wire,mac=52:54:00:9e:09:01
  local src=0 crc=0
  wait "${PIDS[0]}" || src=$?
  wait "${PIDS[1]}" || crc=$?
  wait
  local rs rcl; rs=$(finish_guest server "$out" "$src"); rcl=$(finish_guest client "$out" "$crc")
  if [ "$rs" = 0 ] && [ "$rcl" = 0 ]; then
    echo "PASS run2: both guests passed, boot to power-off $(elapsed "$t0")s" >&2
    return 0
  fi
  echo "FAIL run2: server rc=$rs client rc=$rcl, $(elapsed "$t0")s" >&2
  [ "$rs" != 0 ] && return "$rs"
  return "$rcl"
}

case "${1:-}" in
  prepare)    cmd_prepare ;;
  run1)       cmd_run1 "${2:-}" ;;
  run2)       cmd_run2 "${2:-}" ;;
  _kernel)    cmd__kernel "$2" ;;
  _initramfs) cmd__initramfs "$2" "$3" "$4" "$5" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
