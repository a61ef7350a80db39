#!/bin/sh
# Checks `mnemon mcp` with the official MCP Python SDK (`mcp` on PyPI): every tool listed and
# called over stdio (the SDK spawns `mnemon mcp`) and over streamable HTTP (`mnemon mcp --http
# 127.0.0.1:0`), structured outputs validated against the tools' output schemas, tool errors
# checked (tests/clients/mcp.py; docs/reference/mcp.md). Exits non-zero on any mismatch.
#
# Usage: tests/clients/mcp.sh [path/to/mnemon] [--bench N]   (default: target/debug/mnemon)
# The SDK goes into a virtual environment under target/mcp-venv, created on first use (PyPI only).
# --bench N also measures tool calls/s (N remember + N recall, one client, loopback) over both
# transports, and, when npm is there, the reference @modelcontextprotocol/server-memory (from
# npm, under target/mcp-node) doing its equivalent add (add_observations) and search
# (search_nodes) through the same client. Measure with a release build for figures.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mnemon=$root/target/debug/mnemon
bench=
while [ $# -gt 0 ]; do
    case $1 in
        --bench) bench=${2:?--bench N}; shift 2 ;;
        *) mnemon=$1; shift ;;
    esac
done
[ -x "$mnemon" ] || { echo "no mnemon binary at $mnemon (cargo build -p mnemon)" >&2; exit 2; }
mnemon=$(cd "$(dirname "$mnemon")" && pwd)/$(basename "$mnemon")
library=$root/crates/mnemon/sample-library/library.json

# The SDK release these checks were written against.
sdk="mcp==2.3.0"
venv=$root/target/mcp-venv
python=$venv/bin/python
# Every dependency at the version the check last passed with (mcp-constraints.txt); a venv made
# with other constraints is made again.
if ! "$python" -c "import mcp.client.streamable_http" 2>/dev/null ||
    ! cmp -s "$here/mcp-constraints.txt" "$venv/constraints.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --retries 10 --timeout 60 \
        -c "$here/mcp-constraints.txt" "$sdk"
    cp "$here/mcp-constraints.txt" "$venv/constraints.txt"
fi

work=$(mktemp -d)
server=
cleanup() {
    [ -z "$server" ] || kill "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# -P: the script's own name must not shadow the `mcp` package.
check() { "$python" -P "$here/mcp.py" "$@"; }

# Starts `mnemon mcp --http` on a free loopback port; sets $server and $url.
start_http() {
    "$mnemon" --quiet --data-dir "$1" mcp --http 127.0.0.1:0 --library "$library" >"$work/url" &
    server=$!
    tries=0
    until [ -s "$work/url" ]; do
        tries=$((tries + 1))
        # Up to 30 s: a debug build starting on a loaded machine.
        [ $tries -le 300 ] || { echo "mnemon mcp --http printed no URL in 30 s" >&2; exit 1; }
        kill -0 "$server" 2>/dev/null || { echo "mnemon mcp --http exited" >&2; exit 1; }
        sleep 0.1
    done
    url=$(head -n 1 "$work/url")
}

stop_http() {
    kill "$server"
    wait "$server" || { echo "mnemon mcp --http did not stop cleanly" >&2; exit 1; }
    server=
}

check check stdio "$mnemon" --quiet --data-dir "$work/stdio" mcp --library "$library"
start_http "$work/http"
check check http "$url"
stop_http

[ -n "$bench" ] || exit 0
check bench "$bench" stdio "$mnemon" --quiet --data-dir "$work/bench-stdio" mcp
start_http "$work/bench-http"
check bench "$bench" http "$url"
stop_http
if command -v npm >/dev/null 2>&1; then
    node_dir=$root/target/mcp-node
    reference=$node_dir/node_modules/@modelcontextprotocol/server-memory/dist/index.js
    # The releases `cargo xtask bench server` pins (xtask/src/bench_server.rs).
    pinned="@modelcontextprotocol/server-memory@2026.8.31 @modelcontextprotocol/sdk@1.32.2"
    version_of() {
        node -p 'require(process.argv[1]).version' "$node_dir/node_modules/$1/package.json" 2>/dev/null
    }
    if [ "$(version_of @modelcontextprotocol/server-memory)" != 2026.8.31 ] ||
        [ "$(version_of @modelcontextprotocol/sdk)" != 1.32.2 ]; then
        mkdir -p "$node_dir"
        # shellcheck disable=SC2086
        npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error $pinned >/dev/null
    fi
    MEMORY_FILE_PATH=$work/reference-memory.jsonl \
        check bench-reference "$bench" env "MEMORY_FILE_PATH=$work/reference-memory.jsonl" \
        node "$reference"
else
    echo "npm not found: no reference measurement" >&2
fi
