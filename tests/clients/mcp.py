"""Drives Mnemon's MCP server with the official MCP Python SDK (`mcp` on PyPI): every tool is
listed and called over one transport, the structured outputs are checked (the SDK itself also
validates each one against the tool's output schema), and a failure comes back as a tool error.
Exits non-zero on any mismatch (docs/reference/mcp.md).

    python mcp.py check stdio MNEMON [ARGS...]    spawn `MNEMON ARGS... mcp` over stdio
    python mcp.py check http URL                  an endpoint, e.g. http://127.0.0.1:PORT/mcp
    python mcp.py bench N stdio|http ...          N remember + N recall calls, one client
    python mcp.py bench-reference N NPX_ARGS...   the same against @modelcontextprotocol/server-memory

The benchmark prints one JSON line per run: calls/s for the add and the search tool.
"""

import asyncio
import contextlib
import json
import sys
import time

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = sorted([
    "describe_asset", "forget", "list_artifacts", "list_assets", "list_sessions",
    "load_artifacts", "put_asset", "recall", "remember", "resolve_asset", "save_artifact",
    "search_library",
])


class Mismatch(Exception):
    pass


def expect(condition, what):
    if not condition:
        raise Mismatch(what)


@contextlib.asynccontextmanager
async def connect(kind, args):
    if kind == "stdio":
        params = StdioServerParameters(command=args[0], args=list(args[1:]))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session
    elif kind == "http":
        async with streamable_http_client(args[0]) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session
    else:
        raise SystemExit(f"unknown transport {kind!r}: stdio or http")


def text_of(result):
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def ok(session, tool, arguments):
    result = await session.call_tool(tool, arguments)
    expect(not result.is_error, f"{tool} failed: {text_of(result)}")
    structured = result.structured_content
    expect(structured is not None, f"{tool}: no structured content")
    summary, _, body = text_of(result).partition("\n")
    expect(summary and json.loads(body) == structured, f"{tool}: the text is not summary + JSON")
    return structured


async def tool_error(session, tool, arguments):
    result = await session.call_tool(tool, arguments)
    expect(result.is_error, f"{tool} should have failed: {text_of(result)}")
    return json.loads(text_of(result))["error"]


async def check(session):
    listed = await session.list_tools()
    names = sorted(tool.name for tool in listed.tools)
    expect(names == TOOLS, f"tools: {names}")
    for tool in listed.tools:
        expect(len(tool.description or "") > 80, f"{tool.name}: description too short")
        expect(tool.output_schema is not None, f"{tool.name}: no output schema")

    added = await ok(session, "remember", {"session": "py-1", "messages": [
        {"name": "user", "role": "user", "content": "my cat Miso only eats tuna"},
        {"name": "user", "role": "user", "content": "the dentist appointment is on Friday"},
    ]})
    expect(added == {"added": 2, "skipped_duplicates": []}, f"remember: {added}")
    await ok(session, "remember", {"session": "py-2", "marks": ["travel"], "messages": [
        {"name": "user", "content": "book a train to Lyon"}]})

    latest = await ok(session, "recall", {"session": "py-1", "recent": 1})
    expect([m["message"]["content"] for m in latest["messages"]]
           == ["the dentist appointment is on Friday"], f"recall recent: {latest}")
    found = await ok(session, "recall", {"session": "py-1", "query": "what does Miso eat", "top_k": 1})
    expect("Miso" in found["messages"][0]["message"]["content"], f"recall query: {found}")
    everywhere = await ok(session, "recall", {"query": "train to Lyon", "top_k": 1})
    expect(everywhere["messages"][0]["session"] == "py-2", f"recall across: {everywhere}")

    sessions = await ok(session, "list_sessions", {})
    expect(sessions["sessions"] == [{"session_id": "py-1"}, {"session_id": "py-2"}],
           f"list_sessions: {sessions}")

    put = await ok(session, "put_asset", {"asset": {
        "asset_id": "sales", "asset_type": "table",
        "content": {"rows": [{"month": "jan", "total": 5}, {"month": "feb", "total": 8}]}}})
    expect(put["asset_id"] == "sales" and put["meta"]["asset_type"] == "table", f"put: {put}")
    await ok(session, "put_asset", {"asset": {
        "asset_id": "photo", "content_type": "image/png", "content_base64": "iVBORw0KGgo="}})
    meta = await ok(session, "describe_asset", {"asset_id": "photo"})
    expect("iVBORw0KGgo" not in json.dumps(meta), f"describe_asset shows the payload: {meta}")
    value = await ok(session, "resolve_asset", {"reference": "asset://sales/content/rows/1/total"})
    expect(value == {"value": 8}, f"resolve_asset: {value}")
    assets = await ok(session, "list_assets", {})
    expect(assets == {"asset_ids": ["photo", "sales"]}, f"list_assets: {assets}")

    saved = await ok(session, "save_artifact", {
        "scope": "task", "key": "plan", "type": "plan", "name": "Plan", "content": "step one"})
    expect(saved["artifact"]["key"] == "plan" and saved["content"] == "step one", f"save: {saved}")
    loaded = await ok(session, "load_artifacts", {"scope": "task", "keys": ["plan", "nope"]})
    expect("step one" in loaded["text"] and loaded["missing_keys"] == ["nope"], f"load: {loaded}")
    listed = await ok(session, "list_artifacts", {"scope": "task"})
    records = listed["artifacts"]
    expect(len(records) == 1 and records[0]["artifact"]["key"] == "plan"
           and "step one" not in json.dumps(listed), f"list_artifacts: {listed}")

    bits = await ok(session, "search_library", {"text": "how do bees keep warm", "count": 1})
    expect(len(bits["bits"]) == 1 and "bee" in bits["bits"][0]["text"], f"search_library: {bits}")

    forgot = await ok(session, "forget", {"session": "py-2"})
    expect(forgot["session_deleted"] is True, f"forget: {forgot}")
    error = await tool_error(session, "recall", {"session": "py-2"})
    expect(error["code"] == "session_not_found" and "list_sessions" in error["message"],
           f"tool error: {error}")
    error = await tool_error(session, "describe_asset", {"asset_id": "ghost"})
    expect(error["code"] == "asset_not_found", f"tool error: {error}")


async def timed(calls):
    start = time.perf_counter()
    for call in calls:
        await call()
    return len(calls) / (time.perf_counter() - start)


async def bench(session, n):
    async def add(i):
        result = await session.call_tool("remember", {"session": "bench", "messages": [
            {"name": "user", "content": f"note {i}: the build on host {i % 17} took {i % 60} s"}]})
        expect(not result.is_error, text_of(result))

    async def search(i):
        result = await session.call_tool(
            "recall", {"session": "bench", "query": f"build on host {i % 17}", "top_k": 5})
        expect(not result.is_error, text_of(result))

    adds = await timed([lambda i=i: add(i) for i in range(n)])
    searches = await timed([lambda i=i: search(i) for i in range(n)])
    return {"add_calls_per_s": round(adds, 1), "search_calls_per_s": round(searches, 1)}


async def bench_reference(session, n):
    """The reference memory server's equivalent: add_observations to one entity, search_nodes."""
    await session.call_tool("create_entities", {"entities": [
        {"name": "bench", "entityType": "log", "observations": []}]})

    async def add(i):
        result = await session.call_tool("add_observations", {"observations": [
            {"entityName": "bench",
             "contents": [f"note {i}: the build on host {i % 17} took {i % 60} s"]}]})
        expect(not result.is_error, text_of(result))

    async def search(i):
        result = await session.call_tool("search_nodes", {"query": f"host {i % 17}"})
        expect(not result.is_error, text_of(result))

    adds = await timed([lambda i=i: add(i) for i in range(n)])
    searches = await timed([lambda i=i: search(i) for i in range(n)])
    return {"add_calls_per_s": round(adds, 1), "search_calls_per_s": round(searches, 1)}


async def main(argv):
    if len(argv) >= 3 and argv[0] == "check":
        async with connect(argv[1], argv[2:]) as session:
            await check(session)
        print(f"mcp.py: every tool checked over {argv[1]}")
    elif len(argv) >= 4 and argv[0] == "bench":
        async with connect(argv[2], argv[3:]) as session:
            print(json.dumps({"server": "mnemon", "transport": argv[2], "calls": int(argv[1]),
                              **await bench(session, int(argv[1]))}))
    elif len(argv) >= 3 and argv[0] == "bench-reference":
        async with connect("stdio", argv[2:]) as session:
            print(json.dumps({"server": "@modelcontextprotocol/server-memory",
                              "transport": "stdio", "calls": int(argv[1]),
                              **await bench_reference(session, int(argv[1]))}))
    else:
        raise SystemExit(__doc__)


def mismatches(error):
    """The Mismatch leaves of an exception (anyio wraps them in exception groups)."""
    if isinstance(error, Mismatch):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in mismatches(inner)]
    return []


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1:]))
    except BaseException as error:  # noqa: BLE001 -- report mismatches plainly, re-raise the rest
        found = mismatches(error)
        if not found:
            raise
        for mismatch in found:
            print(f"mcp.py: MISMATCH: {mismatch}", file=sys.stderr)
        sys.exit(1)
