#!/usr/bin/env bash
# Walks the README's "From a clone" route in a scratch module: the library
# and the rdmarpc command from this clone by a replace (go mod edit -replace
# -tool, go mod tidy), `go tool rdmarpc gen` on the README's greeter.proto,
# the README's server and client built, and the client's call answered.
# greeter.proto, server/main.go and client/main.go are taken from README.md,
# so the README's code is what is built.
#
#   scripts/check-clone-route.sh     (run by make build; needs the module cache make deps fills)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH GOWORK=off
tmp=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL check-clone-route: $*"; exit 1; }

# readme_block START: the README's fenced block that follows the line START
# (a heredoc's body when START is a `cat >` line, the whole block otherwise).
readme_block() {
  awk -v start="$1" '
    !on && index($0, start) == 1 { on = 1; if ($0 ~ /<</) heredoc = 1; next }
    on && heredoc && /^EOF$/ { exit }
    on && !heredoc && /^```/ { if (seen) exit; seen = 1; next }
    on && (heredoc || seen) { print }' "$repo/README.md"
}

mkdir -p "$tmp/hello" && cd "$tmp/hello"
go mod init example.com/hello >/dev/null 2>&1
# The library's go.sum holds the checksums of everything it requires, so
# tidy needs no checksum database (not every build machine reaches one).
cp "$repo/go.sum" .
go mod edit -replace github.com/rdmarpc/rdmarpc="$repo" -tool github.com/rdmarpc/rdmarpc/cmd/rdmarpc
go mod tidy
go tool rdmarpc --version | head -n 1

mkdir -p greeterpb server client
readme_block "cat > greeterpb/greeter.proto <<'EOF'" > greeterpb/greeter.proto
readme_block '`server/main.go`:' > server/main.go
readme_block '`client/main.go`:' > client/main.go
for f in greeterpb/greeter.proto server/main.go client/main.go; do
  [ -s "$f" ] || fail "no $f in README.md"
done
go tool rdmarpc gen --out . --opt paths=source_relative greeterpb/greeter.proto
go mod tidy

# The README's server listens on 127.0.0.1:50051; a scratch copy takes a
# free port instead, so a server already there is no obstacle.
port=$(go run "$repo/scripts/freeport.go")
sed -i "s/127.0.0.1:50051/127.0.0.1:$port/" server/main.go client/main.go
go build -o bin/ ./...
bin/server &
server=$!
out=
for _ in $(seq 100); do
  out=$(bin/client clone 2>&1) && break
  kill -0 "$server" 2>/dev/null || fail "the server exited"
  sleep 0.1
done
[ "$out" = "hello, clone" ] || fail "client said: $out"
echo "PASS check-clone-route: go tool rdmarpc from a replace, the README's greeter generated, built and called"
