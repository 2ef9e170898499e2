#!/usr/bin/env bash
# The key-value store's quick start: builds kvserver and kvctl into bin/,
# starts kvserver with its defaults (Pebble in ./kvdata, here under
# .cache/kvstore-demo; RDMA if a device serves 127.0.0.1, so TCP), runs kvctl
# against it, restarts it to show the data stayed, and stops it with SIGTERM.
#
#   examples/kvstore/quickstart.sh        (PORT=7071 ... to use another port)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "quickstart: needs Go 1.26 (https://go.dev/dl) in /usr/local/go or on PATH" >&2; exit 1; }
port=${PORT:-7070}
target=tcp://127.0.0.1:$port

echo "# building bin/kvserver and bin/kvctl"
mkdir -p bin
go build -o bin/kvserver ./examples/kvstore/cmd/kvserver
go build -o bin/kvctl ./examples/kvstore/cmd/kvctl

work=$repo/.cache/kvstore-demo
rm -rf "$work"
mkdir -p "$work"
log=$work/kvserver.log
server=

# start_server: kvserver with its defaults, in $work; waits until it is ready.
start_server() {
  (cd "$work" && exec "$repo/bin/kvserver" --listen "auto://127.0.0.1:$port") >>"$log" 2>&1 &
  server=$!
  for _ in $(seq 200); do
    grep -q "kvserver ready" "$log" && return 0
    kill -0 "$server" 2>/dev/null || { echo "quickstart: kvserver failed to start:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.05
  done
  echo "quickstart: kvserver not ready after 10 s:" >&2; cat "$log" >&2; exit 1
}

# stop_server: SIGTERM, then wait for the clean exit.
stop_server() {
  kill -TERM "$server"
  wait "$server"
  server=
}
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; true' EXIT

# kvctl: print the command, run it, show a failure's exit status.
kvctl() {
  printf '$ kvctl'
  local a
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=@%+-]+$ ]]; then printf ' %s' "$a"; else printf " '%s'" "$a"; fi
  done
  printf '\n'
  local rc=0
  bin/kvctl --addr "$target" "$@" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || echo "(exit status $rc)"
}

echo "# starting kvserver (data in $work/kvdata)"
start_server
grep -v rpc.server "$log" | sed 's/^[^\t]*\t//'   # the log, without timestamps
echo
kvctl put greeting "hello, rdmarpc"
kvctl get greeting
kvctl batch put user/1 alice put user/2 bob put user/3 carol
kvctl scan --prefix user/
kvctl cas greeting "hi" --expect "hello, rdmarpc"
kvctl cas greeting "hey" --expect "hello, rdmarpc"
kvctl get nobody
kvctl --json get user/2
kvctl bench --duration 2s --concurrency 8 --keys 1000 --value-size 1024 --reads 95 --progress=false

echo
echo "# restarting kvserver: what it acknowledged is on disk"
: >"$log"
stop_server
start_server
kvctl get greeting
kvctl scan --prefix user/ --keys-only
stop_server
sed 's/^[^\t]*\t//' "$log" | tail -n 4
