#!/usr/bin/env bash
# Proves the README's two commands on a fresh Debian machine: a pristine
# bookworm root (debootstrap), Go bind-mounted read-only at /usr/local/go, a
# clone of this repository's HEAD, and nothing else; in it, as root, it runs
# `make demo` and then `make test`, exactly as the README says.
#
#   scripts/fresh-test.sh         (make fresh-test; needs root, apt, network to Debian and the Go proxy)
#   scripts/fresh-test.sh --base  only build the cached base, if it is missing
#
# The debootstrapped base is cached as a tarball in .cache/fresh/ so a re-run
# does not download it again; every run unpacks it into a new root, which is
# deleted afterwards. The base holds debootstrap's default package set plus
# what the README takes for granted before its first command: git (the clone)
# and make (the command); ca-certificates so that git and Go can use HTTPS.
# /proc, /sys and /dev are mounted in the root; every mount is undone on
# every exit path, and the root is removed only once nothing is mounted in it.
#
# Environment: FRESH_SUITE (default bookworm), FRESH_MIRROR (default the
# first Debian archive this machine's own apt sources name), FRESH_KEEP=1 (keep the root for a look),
# FRESH_PORT (the demo's port; default a free one, so a demo running on the
# host at the README's 7070 does not collide).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
suite=${FRESH_SUITE:-bookworm}
# The machine's own apt configuration says where Debian's packages come from.
host_mirror() {
  # A machine may have only one of the two files: a missing one is no error.
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' || true
    grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' || true; } | grep -v -- '-security' | head -n 1
}
mirror=${FRESH_MIRROR:-$(host_mirror)}
include=make,git,ca-certificates
cache=$repo/.cache/fresh
base=$cache/$suite-base.tar
t0=$SECONDS
log() { printf '[fresh %4ds] %s\n' $((SECONDS - t0)) "$*" >&2; }
die() { log "FAIL $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount)"
[ -n "$mirror" ] || die "no Debian archive in this machine's apt sources: set FRESH_MIRROR"
[ -x /usr/local/go/bin/go ] || die "needs Go at /usr/local/go (the README's precondition)"
command -v debootstrap >/dev/null || {
  log "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends debootstrap >/dev/null \
    || die "apt-get install debootstrap"
}
mkdir -p "$cache"

# ------------------------------------------------------------ the cached base

# The key names what went into the base: a change of suite, mirror or
# package list makes a new one.
key="$suite $mirror $include"
if [ ! -s "$base" ] || [ "$(cat "$base.key" 2>/dev/null)" != "$key" ]; then
  tmp=$cache/base.tmp
  rm -rf "$tmp"
  log "debootstrap $suite (once; cached as $base)"
  timeout 1800 debootstrap --include="$include" "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -n 20 "$cache/debootstrap.log" >&2; rm -rf "$tmp"; die "debootstrap (log: $cache/debootstrap.log)"; }
  # Downloaded packages are not part of a fresh machine.
  rm -rf "$tmp"/var/cache/apt/archives/*.deb
  tar -C "$tmp" -cf "$base.tmp" .
  mv "$base.tmp" "$base"
  echo "$key" >"$base.key"
  rm -rf "$tmp"
fi

[ "${1:-}" = --base ] && { log "base ready: $base"; exit 0; }

# ------------------------------------------------------------ a pristine root

root=$cache/root.$$
mounts=() # mount points, in the order they were made

cleanup() {
  local rc=$? i
  set +e
  # Processes still running in the root (a demo server left behind by a
  # failure) hold mounts busy; they are ours, found by their root directory.
  local pid
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] && kill -KILL "$pid" 2>/dev/null
  done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[i]}" 2>/dev/null || umount -R -l "${mounts[i]}" 2>/dev/null \
      || log "could not unmount ${mounts[i]}"
  done
  if findmnt -rn -o TARGET | grep -q "^$root"; then
    log "something is still mounted under $root: not deleting it"
  elif [ "${FRESH_KEEP:-0}" = 1 ]; then
    log "root kept at $root"
  else
    rm -rf "$root"
  fi
  log "done, exit status $rc"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bind() { # src dst [ro]
  mkdir -p "$2"
  mount --rbind "$1" "$2"
  mounts+=("$2")
  mount --make-rslave "$2"
  [ "${3:-}" = ro ] && mount -o remount,bind,ro "$2"
  return 0
}

log "unpacking the base into $root"
mkdir -p "$root"
tar -C "$root" -xf "$base"
# The machine's network as the host has it: its resolver, and the local
# certificate authorities it trusts (a network that inspects HTTPS needs
# them; Debian keeps them in /usr/local/share/ca-certificates).
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
mkdir -p "$root/proc" "$root/sys"
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
mount -t sysfs sysfs "$root/sys" && mounts+=("$root/sys")
bind /dev "$root/dev"
bind /usr/local/go "$root/usr/local/go" ro

# The repository as a user would clone it: committed HEAD, nothing else.
log "cloning $(git -C "$repo" rev-parse --short HEAD) into /root/rdmarpc"
git clone -q --no-hardlinks "$repo" "$root/root/rdmarpc"

port=${FRESH_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 7171)}

# As a fresh login would: a clean environment, the README's commands. It
# runs in the background and is waited for, so an INT or TERM reaches the
# traps at once (bash defers them while a foreground command runs), and
# cleanup ends what runs in the root.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PORT="$port" /bin/bash -c "cd /root/rdmarpc && $1" &
  wait $!
}

log "make demo"
in_root 'make demo' || die "make demo in the fresh root"
log "PASS make demo"
log "make test"
in_root 'make test' || die "make test in the fresh root"
log "PASS make test"
log "PASS fresh-test: make demo and make test on a fresh $suite root in $((SECONDS - t0)) s"
