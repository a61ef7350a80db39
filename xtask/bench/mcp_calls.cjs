// `cargo xtask bench server`'s MCP client (docs/bench-server.md): the official MCP TypeScript
// SDK's client (@modelcontextprotocol/sdk, installed with @modelcontextprotocol/server-memory
// under target/mcp-node) calling one server's add and search tools a fixed number of times each,
// `concurrency` calls in flight on one session, and printing the raw timings as JSON on stdout.
// The same client drives every server (mnemon over streamable HTTP and over stdio, the
// reference over stdio, and mcp_null_server.cjs, the do-nothing server whose figures are the
// client's own floor on each transport), so the calls/s compare the servers, not the clients.
//
// Usage: node mcp_calls.cjs '<config JSON>' with
//   node_dir     the npm prefix holding node_modules/@modelcontextprotocol/sdk
//   kind         "mnemon" (remember / recall), "reference" (add_observations / search_nodes) or
//                "null" (mnemon's calls, to mcp_null_server.cjs)
//   transport    "http" (url) or "stdio" (command, args, env)
//   calls        adds, then as many searches
//   groups       sessions (mnemon) or entities (reference) the calls are spread over
//   concurrency  calls in flight at once
"use strict";
const path = require("node:path");
const { createRequire } = require("node:module");

async function main() {
  const config = JSON.parse(process.argv[2] || "{}");
  const sdk = createRequire(path.join(config.node_dir, "package.json"));
  const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
  let transport;
  if (config.transport === "http") {
    const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
    transport = new StreamableHTTPClientTransport(new URL(config.url));
  } else {
    const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
    transport = new StdioClientTransport({
      command: config.command,
      args: config.args || [],
      env: { ...process.env, ...(config.env || {}) },
      stderr: "ignore",
    });
  }
  const client = new Client({ name: "mnemon-bench-server", version: "1.0.0" });
  await client.connect(transport);

  const groups = Math.max(1, config.groups | 0);
  const group = (i) => `topic-${String(i % groups).padStart(2, "0")}`;
  const content = (i) => `note ${i}: the build on host ${i % 17} took ${i % 60} s`;
  let add, search;
  if (config.kind === "reference") {
    // One entity per group, made before the clock starts.
    await client.callTool({
      name: "create_entities",
      arguments: {
        entities: Array.from({ length: groups }, (_, g) => ({
          name: group(g), entityType: "log", observations: [],
        })),
      },
    });
    add = (i) => ({ name: "add_observations", arguments: {
      observations: [{ entityName: group(i), contents: [content(i)] }] } });
    search = (i) => ({ name: "search_nodes", arguments: { query: group(i) } });
  } else {
    add = (i) => ({ name: "remember", arguments: {
      session: group(i), messages: [{ name: "user", role: "user", content: content(i) }] } });
    search = (i) => ({ name: "recall", arguments: {
      session: group(i), query: `build on host ${i % 17}`, top_k: 5 } });
  }

  async function phase(make) {
    const seconds = [];
    let errors = 0;
    let next = 0;
    const started = process.hrtime.bigint();
    const worker = async () => {
      for (;;) {
        const i = next++;
        if (i >= config.calls) return;
        const sent = process.hrtime.bigint();
        try {
          const result = await client.callTool(make(i));
          if (result.isError) errors += 1;
          else seconds.push(Number(process.hrtime.bigint() - sent) / 1e9);
        } catch (_) {
          errors += 1;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, config.concurrency | 0) }, worker));
    return { wall_seconds: Number(process.hrtime.bigint() - started) / 1e9, seconds, errors };
  }

  // How many of the acknowledged adds the server holds (off the clock): a server that loses
  // adds made concurrently is not faster at the same work.
  async function countKept() {
    if (config.kind === "reference") {
      const graph = await client.callTool({ name: "read_graph", arguments: {} });
      const entities = (graph.structuredContent || JSON.parse(graph.content[0].text)).entities;
      return entities.reduce((n, e) => n + e.observations.length, 0);
    }
    if (config.kind !== "mnemon") return null;
    // Each group's latest messages, as many as were added in all (recall without a query).
    let kept = 0;
    for (let g = 0; g < groups; g++) {
      const got = await client.callTool({ name: "recall", arguments: {
        session: group(g), recent: Math.max(1, config.calls | 0) } });
      if (got.isError) throw new Error(`counting ${group(g)}: ${JSON.stringify(got.content)}`);
      kept += got.structuredContent.messages.length;
    }
    return kept;
  }

  const adds = await phase(add);
  const kept = await countKept();
  // The top-up, off the clock: the adds a server lost are made again one at a time, so that
  // every server's searches run over a memory of `calls` adds (the one that lost most would
  // otherwise search the least).
  if (kept !== null && kept < config.calls) {
    for (let i = config.calls; i < config.calls + (config.calls - kept); i++) {
      const result = await client.callTool(add(i));
      if (result.isError) throw new Error(`top-up add ${i}: ${JSON.stringify(result.content)}`);
    }
  }
  const searches = await phase(search);
  await client.close();
  process.stdout.write(JSON.stringify({ adds, searches, kept }) + "\n");
}

main().catch((error) => {
  process.stderr.write(`mcp_calls.cjs: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
