#!/bin/sh
# Checks that the real AgentScope 0.1.6 loads what `mnemon memory export --format agentscope-0.1`
# writes, and writes the same bytes back (issue 11, item 15; docs/reference/memory.md).
#
# Usage: tests/clients/agentscope.sh PYTHON [path/to/mnemon]   (default: target/debug/mnemon)
# PYTHON is an interpreter with agentscope==0.1.6 and tqdm installed (.ci/run makes a venv).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${1:?usage: agentscope.sh PYTHON [MNEMON]}
mnemon=${2:-$root/target/debug/mnemon}
[ -x "$mnemon" ] || { echo "no mnemon binary at $mnemon (cargo build -p mnemon)" >&2; exit 2; }
# Absolute, as the host runs from a scratch directory.
mnemon=$(cd "$(dirname "$mnemon")" && pwd)/$(basename "$mnemon")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
"$mnemon" --data-dir "$work/data" memory import \
    "$root/tests/fixtures/agentscope/export_v016.json" --session v016 >/dev/null
"$mnemon" --data-dir "$work/data" memory export --session v016 \
    --format agentscope-0.1 "$work/export.json" >/dev/null
"$python" "$here/agentscope_016_load.py" "$work/export.json"
