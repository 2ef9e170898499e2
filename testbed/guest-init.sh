#!/bin/sh
# /init of the test-bed guest (busybox ash; packed into the initramfs by vm.sh prepare).
# Brings up Soft-RoCE (rxe0 over one netdev), then runs /out/guest.sh under a deadline with
# the test environment exported, writes its exit status to /out/rc.<role> and powers off.
# Parameters come on the kernel command line (set by vm.sh):
#   tb_role=single|server|client  tb_net=dummy|virtio  tb_ip=A.B.C.D  tb_peer=A.B.C.D
#   tb_mtu=N  tb_timeout=SECONDS (for guest.sh)
# Exit status 125 in rc.<role> means the test bed itself failed to come up.
export PATH=/usr/sbin:/usr/bin
export HOME=/root TMPDIR=/tmp

now() { cut -d' ' -f1 /proc/uptime; }
log() { echo "[guest $(now)s] $*"; }

OUT_MOUNTED=0
finish() { # rc
  if [ "$OUT_MOUNTED" = 1 ]; then echo "$1" > "/out/rc.$tb_role"; fi
  sync
  log "power off (rc=$1)"
  poweroff -f
  echo o > /proc/sysrq-trigger  # only reached if poweroff failed
}
die() { echo "TESTBED SETUP FAILED: $*"; finish 125; }

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /tmp  # Go tests need a writable TMPDIR
mount -t tmpfs tmpfs /dev/shm

tb_role=single tb_net=dummy tb_ip=10.9.9.1 tb_peer= tb_mtu=1500 tb_timeout=600
for kv in $(cat /proc/cmdline); do
  case $kv in
    tb_role=*) tb_role=${kv#*=} ;;
    tb_net=*) tb_net=${kv#*=} ;;
    tb_ip=*) tb_ip=${kv#*=} ;;
    tb_peer=*) tb_peer=${kv#*=} ;;
    tb_mtu=*) tb_mtu=${kv#*=} ;;
    tb_timeout=*) tb_timeout=${kv#*=} ;;
  esac
done
log "init: kernel $(uname -r), role $tb_role"

# Modules in the order vm.sh computed with modprobe --show-depends (crc32_generic first).
while read -r ko; do
  insmod "$ko" || die "insmod $ko"
done < /etc/testbed/modules

p9="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o "$p9" out /out || die "mount 9p /out"
OUT_MOUNTED=1
mount -t 9p -o "$p9,ro" src /src || die "mount 9p /src"
log "modules loaded, /src and /out mounted"

ulimit -l unlimited || die "ulimit -l unlimited"   # registered memory is pinned memory
ulimit -n 65536 || true

# iproute2's ip by full path: busybox's shell runs its own ip applet before any PATH entry.
IP=/usr/sbin/ip
$IP link set lo up
case $tb_net in
  dummy)
    [ -e /sys/class/net/dummy0 ] || $IP link add dummy0 type dummy || die "no dummy0"
    IF=dummy0 ;;
  virtio)
    IF=
    for i in $(seq 50); do
      for n in /sys/class/net/*; do
        n=${n##*/}
        case $n in lo|dummy*) ;; *) IF=$n; break ;; esac
      done
      [ -n "$IF" ] && break
      sleep 0.1
    done
    [ -n "$IF" ] || die "no virtio NIC appeared" ;;
  *) die "unknown tb_net=$tb_net" ;;
esac
$IP link set "$IF" mtu "$tb_mtu" || die "mtu $tb_mtu on $IF"
$IP addr add "$tb_ip/24" dev "$IF" || die "address $tb_ip on $IF"
$IP link set "$IF" up || die "$IF up"
rdma link add rxe0 type rxe netdev "$IF" || die "rdma link add rxe0 netdev $IF"

# The RoCE v2 GID of our IPv4 address is ::ffff:a.b.c.d; wait for rxe to publish it.
SYSP=/sys/class/infiniband/rxe0/ports/1
want=$(echo "$tb_ip" | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4}')
GIDX=
for i in $(seq 100); do
  for g in "$SYSP"/gids/*; do
    idx=${g##*/}
    if [ "$(cat "$g" 2>/dev/null)" = "$want" ] \
       && [ "$(cat "$SYSP/gid_attrs/types/$idx" 2>/dev/null)" = "RoCE v2" ]; then
      GIDX=$idx; break
    fi
  done
  [ -n "$GIDX" ] && case $(cat "$SYSP/state") in *ACTIVE*) break ;; esac
  sleep 0.1
done
[ -n "$GIDX" ] || die "no RoCE v2 GID for $tb_ip on rxe0"
case $(cat "$SYSP/state") in *ACTIVE*) ;; *) die "rxe0 port 1 is $(cat "$SYSP/state")" ;; esac
log "rxe0 over $IF ($tb_ip, mtu $tb_mtu): port ACTIVE, active_mtu $(ibv_devinfo -d rxe0 | awk '/active_mtu/ {print $2; exit}'), RoCE v2 GID index $GIDX"

if [ -n "$tb_peer" ]; then
  # Two-VM mode: the other kernel may still be booting. Wait (bounded) until it answers.
  for i in $(seq 120); do ping -c 1 -W 1 "$tb_peer" >/dev/null 2>&1 && break; done
  ping -c 1 -W 1 "$tb_peer" >/dev/null 2>&1 || die "peer $tb_peer not reachable"
  log "peer $tb_peer reachable"
fi

export RDMARPC_TEST_DEV=rxe0 RDMARPC_TEST_IP="$tb_ip" RDMARPC_TEST_GID_INDEX="$GIDX"
export RDMARPC_TEST_NETDEV="$IF" ROLE="$tb_role"
[ -n "$tb_peer" ] && export PEER_IP="$tb_peer"

[ -f /out/guest.sh ] || die "/out/guest.sh missing"
log "running /out/guest.sh (deadline ${tb_timeout}s)"
cd /out
timeout "$tb_timeout" sh /out/guest.sh
rc=$?
cd /
# busybox timeout reports a kill as the child's signal status (143 for SIGTERM)
[ "$rc" = 143 ] && echo "guest.sh: TIMED OUT after ${tb_timeout}s"
log "guest.sh exited $rc"
umount /src 2>/dev/null
finish "$rc"
