#!/usr/bin/env bash
# The Echo demo: builds bin/echo, starts the Echo server over TCP on
# loopback, calls it three times, and stops it with SIGTERM (it drains and
# exits).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
mkdir -p bin
go build -o bin/echo ./examples/echo/cmd/echo
port=${PORT:-7070}
log=$(mktemp)
bin/echo serve --listen "tcp://127.0.0.1:$port" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$log"' EXIT
# Wait until the server says it listens (or dies).
for _ in $(seq 100); do
  grep -q "listening" "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
head -n1 "$log"
bin/echo call --target "tcp://127.0.0.1:$port" --message "hello, rdmarpc"
kill -TERM $server
wait $server
echo "server drained and exited"
