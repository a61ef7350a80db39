"""LangGraph's PostgresStore on the same server and vectors as `cargo xtask bench stores`.

Run by xtask/src/bench_stores.rs in a virtual environment under target/ with
`langgraph-checkpoint-postgres` and `psycopg[binary]` from PyPI. The vectors are the bench's
own (little-endian f32 files it writes): the embed function looks each text up instead of
calling a model, so the timings are the store's. Prints one JSON object on stdout.

usage: langgraph_store.py URL MESSAGES_FILE QUERIES_FILE COUNT QUERY_COUNT DIM BATCH SINGLES
"""

import json
import sys
import time
from array import array

from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore


def load(path, count, dim):
    data = array("f")
    with open(path, "rb") as f:
        data.fromfile(f, count * dim)
    if sys.byteorder != "little":
        data.byteswap()
    return data


def percentile(samples, p):
    ordered = sorted(samples)
    rank = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[rank]


def main():
    url, messages_file, queries_file = sys.argv[1:4]
    count, query_count, dim, batch, singles = (int(a) for a in sys.argv[4:9])
    messages = load(messages_file, count, dim)
    queries = load(queries_file, query_count, dim)

    def vector(text):
        # "m<i>" is stored message i, "q<i>" query i, "s<i>" single put i (message i's vector).
        kind, index = text[0], int(text[1:])
        source = queries if kind == "q" else messages
        return source[index * dim : (index + 1) * dim].tolist()

    def embed(texts):
        return [vector(t) for t in texts]

    index = {
        "dims": dim,
        "embed": embed,
        "fields": ["text"],
        "distance_type": "cosine",
        "ann_index_config": {"kind": "hnsw", "vector_type": "vector"},
    }
    namespace = ("bench",)
    with PostgresStore.from_conn_string(url, index=index) as store:
        store.setup()
        start = time.perf_counter()
        for first in range(0, count, batch):
            ops = [
                PutOp(namespace, f"m{i}", {"text": f"m{i}"})
                for i in range(first, min(count, first + batch))
            ]
            store.batch(ops)
        put_seconds = time.perf_counter() - start

        single = []
        for i in range(singles):
            start = time.perf_counter()
            store.put(("single",), f"s{i}", {"text": f"s{i % count}"})
            single.append(time.perf_counter() - start)

        search = []
        results = []
        for q in range(query_count):
            start = time.perf_counter()
            found = store.search(namespace, query=f"q{q}", limit=10)
            search.append(time.perf_counter() - start)
            results.append([int(item.key[1:]) for item in found])

    print(
        json.dumps(
            {
                "adds_per_s": count / put_seconds,
                "put_p50_ms": percentile(single, 50) * 1e3,
                "put_p99_ms": percentile(single, 99) * 1e3,
                "search_p50_ms": percentile(search, 50) * 1e3,
                "search_p99_ms": percentile(search, 99) * 1e3,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
