#!/usr/bin/env python3
"""Checks that AgentScope 0.1.6 reads a Mnemon `memory export --format agentscope-0.1` file.

Usage: agentscope_016_load.py EXPORT.json

Loads the file with agentscope 0.1.6's `TemporaryMemory.load` (unchanged), then checks that
every loaded message is an `agentscope.message.Msg` carrying the file's id, name, role,
content, metadata and timestamp, and that 0.1.6's own `TemporaryMemory.export` of what it
loaded gives the file's bytes back (so Mnemon writes exactly 0.1.6's layout). Exits 0 and
prints a summary line on success, 1 with the first difference otherwise.

Setup (about 40 s and 470 MB; 0.1.6 imports tqdm without declaring it):
    python3 -m venv /tmp/as016 && /tmp/as016/bin/pip install agentscope==0.1.6 tqdm
"""

import json
import os
import sys
import tempfile


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    import agentscope
    from agentscope.memory import TemporaryMemory
    from agentscope.message import Msg

    if agentscope.__version__ != "0.1.6":
        print(f"expected agentscope 0.1.6, found {agentscope.__version__}", file=sys.stderr)
        return 1
    with open(path, encoding="utf-8") as f:
        text = f.read()
    expected = json.loads(text)

    memory = TemporaryMemory()
    memory.load(path)
    loaded = memory.get_memory()
    if len(loaded) != len(expected):
        print(f"loaded {len(loaded)} messages, the file has {len(expected)}", file=sys.stderr)
        return 1
    for i, (msg, item) in enumerate(zip(loaded, expected)):
        if not isinstance(msg, Msg):
            print(f"message {i} loaded as {type(msg)}, not Msg", file=sys.stderr)
            return 1
        for key in ("id", "name", "role", "content", "metadata", "timestamp"):
            got = getattr(msg, key)
            if got != item[key]:
                print(f"message {i} ({item['id']}): {key} is {got!r}, file has {item[key]!r}",
                      file=sys.stderr)
                return 1

    with tempfile.TemporaryDirectory() as tmp:
        again = os.path.join(tmp, "again.json")
        memory.export(file_path=again)
        with open(again, encoding="utf-8") as f:
            rewritten = f.read()
    if rewritten != text:
        at = next((i for i, (a, b) in enumerate(zip(rewritten, text)) if a != b),
                  min(len(rewritten), len(text)))
        print(f"0.1.6's export differs from the file at character {at}: "
              f"{rewritten[at:at + 60]!r} vs {text[at:at + 60]!r}", file=sys.stderr)
        return 1
    print(f"agentscope 0.1.6 loaded {len(loaded)} messages from {path}; "
          f"its export of them is byte-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
