#!/bin/sh
# Runs the client checks of this directory against a real `mnemon serve` on 127.0.0.1.
#
# Usage: tests/clients/run.sh [path/to/mnemon]   (default: target/debug/mnemon)
# Needs node >= 18 and `npm ci` run once in tests/clients (installs @polymath-ai/client at the
# version in package-lock.json).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mnemon=${1:-$root/target/debug/mnemon}
[ -x "$mnemon" ] || { echo "no mnemon binary at $mnemon (cargo build -p mnemon)" >&2; exit 2; }
# Absolute, as the host runs from a scratch directory.
mnemon=$(cd "$(dirname "$mnemon")" && pwd)/$(basename "$mnemon")
[ -d "$here/node_modules/@polymath-ai/client" ] || {
    echo "run 'npm ci' in $here first" >&2; exit 2; }

work=$(mktemp -d)
log="$work/serve.log"
# An empty working directory, so no ./host.SECRET.json or ./libraries is picked up.
(cd "$work" && exec "$mnemon" serve --addr 127.0.0.1:0 \
    --library "$root/tests/fixtures/polymath/library.json" --data-dir "$work/data") 2>"$log" &
pid=$!
# On a failure the server's log is printed before it goes: its side of what went wrong.
trap 'status=$?; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null;
      [ $status -eq 0 ] || { echo "--- mnemon serve log:" >&2; cat "$log" >&2; };
      rm -rf "$work"' EXIT INT TERM

addr=""
for _ in $(seq 1 300); do
    addr=$(sed -n 's#.*serving on http://\([^/]*\)/.*#\1#p' "$log" | head -n 1)
    [ -n "$addr" ] && break
    kill -0 $pid 2>/dev/null || { cat "$log" >&2; echo "mnemon serve exited" >&2; exit 1; }
    sleep 0.1
done
[ -n "$addr" ] || { cat "$log" >&2; echo "mnemon serve did not start in 30 s" >&2; exit 1; }

cd "$here"
node polymath_client.mjs "http://$addr/"
