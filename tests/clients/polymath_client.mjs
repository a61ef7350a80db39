// Checks `mnemon serve` with the original Polymath TypeScript client, @polymath-ai/client
// (docs/limits.md, issue 11): a successful query, a host error that must reach the caller as
// the host's own message, and a multi-key omit that the client's response schema must accept.
//
// Usage: node polymath_client.mjs http://127.0.0.1:PORT/
// The host must serve tests/fixtures/polymath/library.json (model
// openai.com:text-embedding-ada-002, 1536 dimensions). run.sh starts one and calls this.
import assert from "node:assert/strict";
import { PolymathEndpoint } from "@polymath-ai/client";

const url = process.argv[2];
if (!url) {
  console.error("usage: node polymath_client.mjs http://127.0.0.1:PORT/");
  process.exit(2);
}

// A fixed query vector (the client requires 1536 numbers), the same on every run.
const queryEmbedding = Array.from({ length: 1536 }, (_, i) => Math.sin(i + 1));

const checks = [
  [
    "a query returns bits",
    async () => {
      const endpoint = new PolymathEndpoint(url);
      const result = await endpoint.ask({
        query_embedding: queryEmbedding,
        count: 2,
        count_type: "bit",
      });
      assert.equal(result.bits.length, 2);
    },
  ],
  [
    "a host error reaches the caller with the host's message",
    async () => {
      const endpoint = new PolymathEndpoint(url);
      await assert.rejects(
        endpoint.ask({ query_embedding: queryEmbedding, count: 0 }),
        (error) => {
          assert.equal(error.message, "count must be greater than 0");
          return true;
        },
      );
    },
  ],
  [
    "a multi-key omit comes back as a list the client accepts",
    async () => {
      const endpoint = new PolymathEndpoint(url);
      const result = await endpoint.ask({
        query_embedding: queryEmbedding,
        count: 3,
        count_type: "bit",
        omit: ["embedding", "similarity"],
      });
      assert.deepEqual(result.omit, ["embedding", "similarity"]);
      assert.equal(result.bits.length, 3);
      for (const bit of result.bits) {
        assert.equal(bit.embedding, undefined);
        assert.equal(bit.similarity, undefined);
      }
    },
  ],
];

let failed = 0;
for (const [name, check] of checks) {
  try {
    await check();
    console.log(`ok: ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`FAILED: ${name}\n  ${String(error?.message ?? error).split("\n").join("\n  ")}`);
  }
}
console.log(failed ? `${failed} of ${checks.length} checks failed` : `all ${checks.length} checks passed`);
process.exit(failed ? 1 : 0);
