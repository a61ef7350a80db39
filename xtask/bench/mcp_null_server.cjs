// `cargo xtask bench server`'s client floor (docs/bench-server.md): a do-nothing MCP server that
// answers every request at once with a fixed result (no store, no work), so that the MCP SDK
// client of mcp_calls.cjs timed against it shows what the client and the transport cost by
// themselves. No server over that transport can be timed faster than this by that client.
//
// Usage: node mcp_null_server.cjs stdio        newline-delimited JSON-RPC on stdin / stdout
//        node mcp_null_server.cjs http PORT    streamable HTTP (one JSON answer per POST) on
//                                               127.0.0.1:PORT (0: any free port); prints
//                                               `listening on http://127.0.0.1:<port>/mcp`
"use strict";
const http = require("node:http");
const readline = require("node:readline");

// The answer to one JSON-RPC request: a tool result of the size of a `remember` answer.
function answer(message) {
  let result = {};
  if (message.method === "initialize") {
    result = {
      protocolVersion: (message.params && message.params.protocolVersion) || "2025-06-18",
      capabilities: { tools: {} },
      serverInfo: { name: "mcp-null-server", version: "1.0.0" },
    };
  } else if (message.method === "tools/call") {
    result = {
      content: [{ type: "text", text: "Remembered 1 message.\n{\"added\":1,\"skipped_duplicates\":[]}" }],
      structuredContent: { added: 1, skipped_duplicates: [] },
      isError: false,
    };
  }
  return { jsonrpc: "2.0", id: message.id, result };
}

const mode = process.argv[2];
if (mode === "stdio") {
  readline.createInterface({ input: process.stdin }).on("line", (line) => {
    const message = JSON.parse(line);
    // Notifications (no id) get no answer.
    if (message.id !== undefined) process.stdout.write(JSON.stringify(answer(message)) + "\n");
  });
} else if (mode === "http") {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      if (req.method !== "POST") {
        res.writeHead(405).end();
        return;
      }
      const message = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      if (message.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      const body = JSON.stringify(answer(message));
      res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
      });
      res.end(body);
    });
  });
  server.listen(Number(process.argv[3] || 0), "127.0.0.1", () => {
    process.stdout.write(`listening on http://127.0.0.1:${server.address().port}/mcp\n`);
  });
} else {
  process.stderr.write("usage: node mcp_null_server.cjs stdio | http PORT\n");
  process.exit(2);
}
