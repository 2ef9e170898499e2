#!/usr/bin/env bash
# Proves the README's two commands on a fresh Debian machine: a pristine
# bookworm root (debootstrap --variant=minbase: Debian's essential packages
# and apt, nothing else), Go bind-mounted read-only at /usr/local/go, and a
# clone of this repository's HEAD; in it, as root, it runs the README's
# prerequisite line (the `apt-get update && apt-get install ...` line of
# README.md, read from there so the two cannot drift apart), then `make demo`
# and `make test`, exactly as the README says. Then it runs both again in the
# same root (warm: packages, modules, the build cache and the test VM's kernel
# in place) and prints wall and CPU time of every step: the figures the
# README quotes.
#
#   scripts/fresh-test.sh         (make fresh-test; needs root, apt, network to Debian and the Go proxy)
#   scripts/fresh-test.sh --base  only build the cached base, if it is missing
#
# The debootstrapped base is cached as a tarball in .cache/fresh/ so a re-run
# does not download it again; every run unpacks it into a new root, which is
# deleted afterwards. The base holds nothing the README does not name: make,
# git and ca-certificates come from the README's own line, run in the root.
# /proc, /sys and /dev are mounted in the root; every mount is undone on
# every exit path, and the root is removed only once nothing is mounted in it.
#
# CPU time is what the steps' processes used (user + system, from the
# kernel's accounting of waited-for children), downloads included; wall time
# includes waiting for the test VM's boot lock, which the root shares with
# this machine (other test-bed runs here hold it too).
#
# Environment: FRESH_SUITE (default bookworm), FRESH_MIRROR (default the
# first Debian archive this machine's own apt sources name), FRESH_KEEP=1 (keep the root for a look),
# FRESH_WARM=0 (skip the warm run), FRESH_TEST (the second command; default `make test`:
# e.g. `make deps lint build unit` for the host steps alone, without the test VM), FRESH_PORT (the demo's port; default a
# free one, so a demo running on the host at the README's 7070 does not collide).
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
variant=minbase
cache=$repo/.cache/fresh
base=$cache/$suite-base.tar
t0=$SECONDS
log() { printf '[fresh %4ds] %s\n' $((SECONDS - t0)) "$*" >&2; }
die() { log "FAIL $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount)"
[ -n "$mirror" ] || die "no Debian archive in this machine's apt sources: set FRESH_MIRROR"
[ -x /usr/local/go/bin/go ] || die "needs Go at /usr/local/go (the README's precondition)"
# The README's prerequisite line: what a user installs before the two commands.
prereq=$(grep -m1 -E '^apt-get update && apt-get install ' "$repo/README.md") \
  || die "README.md has no 'apt-get update && apt-get install ...' line"
command -v debootstrap >/dev/null || {
  log "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends debootstrap >/dev/null \
    || die "apt-get install debootstrap"
}
mkdir -p "$cache"

# ------------------------------------------------------------ the cached base

# The key names what went into the base: a change of suite, mirror or
# package list makes a new one.
key="$suite $mirror $variant"
if [ ! -s "$base" ] || [ "$(cat "$base.key" 2>/dev/null)" != "$key" ]; then
  tmp=$cache/base.tmp
  rm -rf "$tmp"
  log "debootstrap $suite (once; cached as $base)"
  timeout 1800 debootstrap --variant="$variant" "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 \
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
# them; Debian keeps them in /usr/local/share/ca-certificates, and the
# ca-certificates package the README's line installs adds them to the store).
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# debootstrap writes no /etc/hosts; every installed Debian (the installer,
# cloud images, container runtimes) has one naming localhost, which tests
# dialing localhost rely on as users' programs do.
[ -e "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
# A machine's / is a mount point; a directory chrooted into is not, and then
# `unshare --mount` (make build's check-noverbs) cannot make / private and
# fails. The root bound onto itself is one, private, so nothing mounted
# in it reaches the host's mount table beyond it.
mount --bind "$root" "$root" && mounts+=("$root")
mount --make-private "$root"
mkdir -p "$root/proc" "$root/sys"
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
mount -t sysfs sysfs "$root/sys" && mounts+=("$root/sys")
bind /dev "$root/dev"
bind /usr/local/go "$root/usr/local/go" ro
# One test-VM boot at a time on this machine (testbed/vm.sh takes this lock):
# the root's boots queue behind the host's instead of racing them for the cores.
hostlock=${HOME:-/root}/.cache/rdmarpc-testbed/.qemu.lock
mkdir -p "$(dirname "$hostlock")" "$root/root/.cache/rdmarpc-testbed"
touch "$hostlock" "$root/root/.cache/rdmarpc-testbed/.qemu.lock"
mount --bind "$hostlock" "$root/root/.cache/rdmarpc-testbed/.qemu.lock"
mounts+=("$root/root/.cache/rdmarpc-testbed/.qemu.lock")

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
    PORT="$port" /bin/bash -c "cd /root/rdmarpc && $1" </dev/null &
  wait $!
}

# CPU ticks (user + system) of this shell's waited-for children, the steps'
# whole process trees among them.
child_ticks() {
  local s
  s=$(</proc/$$/stat) # $$: the script itself, also inside $( )
  s=${s##*) }
  # shellcheck disable=SC2086 # the fields, split
  set -- $s
  echo $((${14} + ${15}))
}
hz=$(getconf CLK_TCK)
summary=()

# step LABEL CMD: runs CMD in the root, logs and records its wall and CPU time.
step() {
  local label=$1 cmd=$2 w0=$SECONDS c0 c1 line
  c0=$(child_ticks)
  log "$label: $cmd"
  in_root "$cmd" || die "$label in the fresh root"
  c1=$(child_ticks)
  line=$(awk -v w=$((SECONDS - w0)) -v c=$((c1 - c0)) -v hz="$hz" -v l="$label" \
    'BEGIN {printf "%-24s %6d s wall  %6.1f CPU-min", l, w, c / hz / 60}')
  summary+=("$line")
  log "PASS $line"
}

step "prerequisites" "$prereq"
step "make demo (fresh)" "make demo"
test_cmd=${FRESH_TEST:-make test}
step "$test_cmd (fresh)" "$test_cmd"
if [ "${FRESH_WARM:-1}" = 1 ]; then
  step "make demo (warm)" "make demo"
  step "$test_cmd (warm)" "$test_cmd"
fi
log "PASS fresh-test: the README's line, make demo and $test_cmd on a fresh $suite minbase root in $((SECONDS - t0)) s"
printf '  %s\n' "${summary[@]}" >&2
