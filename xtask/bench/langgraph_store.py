"""LangGraph's PostgresStore on the same server and vectors as `cargo xtask bench stores`.

Run by xtask/src/bench_stores.rs in a virtual environment under target/ with
`langgraph-checkpoint-postgres` and `psycopg[binary]` from PyPI. The vectors are the bench's
own (little-endian f32 files it writes): the embed function looks each text up instead of
calling a model, so the timings are the store's. Every phase mirrors one of the Mnemon side's,
with the same counts, batch size and vectors:

1. bulk: `count` messages put through `batch` in batches of `batch` into namespace ("bench",),
   with the HNSW index dropped after `setup` (as the bench drops Mnemon's after its first
   batch), then rebuilt from its own definition (the index build time);
2. maintained: `maintained` more messages (vectors 0.. again) in batches into ("maintained",),
   with the index now over every stored vector;
3. singles: `singles` sequential `put`s of one message each into ("single",);
4. searches: every query, sequentially, `search(("bench",), query=…, limit=top_k)`;
5. concurrent (when `clients` > 0): `clients` threads, each with its own PostgresStore and so
   its own connection (psycopg releases the GIL while it waits for the server): each puts
   `singles` messages into a namespace of its own, then, after every client finished putting,
   runs every query; the wall time of each half.

The script prints one JSON object on stdout with the raw figures (seconds per call, total
seconds of the batches, wall times, the keys found per query); the Rust side computes rates
and percentiles from them with the same functions as its own.

usage: langgraph_store.py CONFIG_JSON
  CONFIG_JSON: {"url", "messages_file", "queries_file", "count", "query_count", "dim",
                "batch", "maintained", "singles", "clients", "top_k"}
"""

import json
import sys
import threading
import time
from array import array

import psycopg
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore

# The HNSW index LangGraph's `setup` creates on store_vectors (its migrations).
INDEX = "store_vectors_embedding_idx"


def load(path, count, dim):
    data = array("f")
    with open(path, "rb") as f:
        data.fromfile(f, count * dim)
    if sys.byteorder != "little":
        data.byteswap()
    return data


def put_batches(store, namespace, count, batch):
    """Puts messages 0..count in batches; the seconds spent in `batch` only."""
    spent = 0.0
    for first in range(0, count, batch):
        ops = [
            PutOp(namespace, f"m{i}", {"text": f"m{i}"})
            for i in range(first, min(count, first + batch))
        ]
        start = time.perf_counter()
        store.batch(ops)
        spent += time.perf_counter() - start
    return spent


def main():
    config = json.loads(sys.argv[1])
    url = config["url"]
    count, query_count, dim = config["count"], config["query_count"], config["dim"]
    batch, maintained, singles = config["batch"], config["maintained"], config["singles"]
    clients, top_k = config["clients"], config["top_k"]
    messages = load(config["messages_file"], count, dim)
    queries = load(config["queries_file"], query_count, dim)

    def vector(text):
        # "m<i>" is message i, "q<i>" query i.
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
    report = {}
    with (
        psycopg.connect(url, autocommit=True) as admin,
        PostgresStore.from_conn_string(url, index=index) as store,
    ):
        store.setup()
        definition = admin.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (INDEX,)
        ).fetchone()
        if definition is None:
            sys.exit(f"LangGraph's setup created no index {INDEX}: has its name changed?")
        admin.execute(f"DROP INDEX {INDEX}")
        print(f"LangGraph: bulk puts of {count} messages ...", file=sys.stderr)
        report["bulk_seconds"] = put_batches(store, ("bench",), count, batch)
        print("LangGraph: building the HNSW index ...", file=sys.stderr)
        start = time.perf_counter()
        admin.execute(definition[0])
        report["index_build_seconds"] = time.perf_counter() - start
        # As the Mnemon side: the planner's statistics current before anything is measured.
        admin.execute("ANALYZE store, store_vectors")
        print(f"LangGraph: {maintained} puts with the index maintained ...", file=sys.stderr)
        report["maintained_seconds"] = put_batches(store, ("maintained",), maintained, batch)

        single = []
        for i in range(singles):
            start = time.perf_counter()
            store.put(("single",), f"s{i}", {"text": f"m{i % count}"})
            single.append(time.perf_counter() - start)
        report["single_seconds"] = single

        # How many index scans the searches made on the HNSW index (said on stderr): the
        # planner picks LangGraph's plan freely, where Mnemon's recall forces the index.
        def index_scans():
            row = admin.execute(
                "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = %s", (INDEX,)
            ).fetchone()
            return row[0] if row else 0

        scans_before = index_scans()
        search = []
        results = []
        for q in range(query_count):
            start = time.perf_counter()
            found = store.search(("bench",), query=f"q{q}", limit=top_k)
            search.append(time.perf_counter() - start)
            results.append([item.key for item in found])
        report["search_seconds"] = search
        report["results"] = results
        # Other backends' statistics reach the view within about a second of going idle.
        deadline = time.monotonic() + 10
        scans = index_scans() - scans_before
        while scans < query_count and time.monotonic() < deadline:
            time.sleep(0.2)
            scans = index_scans() - scans_before
        print(
            f"LangGraph: its searches made {scans} scans of its HNSW index for {query_count} "
            "queries (pg_stat_user_indexes)",
            file=sys.stderr,
        )

    if clients > 0:
        print(f"LangGraph: {clients} concurrent clients ...", file=sys.stderr)
        report.update(concurrent(url, index, clients, count, query_count, singles, top_k))
    print(json.dumps(report))


def concurrent(url, index, clients, count, query_count, singles, top_k):
    """Each client its own store (connection): `singles` puts each, then every query each."""
    connected = threading.Barrier(clients + 1)
    put_done = threading.Barrier(clients + 1)
    errors = []

    def client(c):
        try:
            with PostgresStore.from_conn_string(url, index=index) as store:
                connected.wait()
                for i in range(singles):
                    text = f"m{(c * singles + i) % count}"
                    store.put(("concurrent", str(c)), f"s{i}", {"text": text})
                put_done.wait()
                for q in range(query_count):
                    store.search(("bench",), query=f"q{q}", limit=top_k)
        except BaseException as error:  # noqa: BLE001 - reported, and the barriers released
            errors.append(repr(error))
            connected.abort()
            put_done.abort()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    try:
        connected.wait()
        start = time.perf_counter()
        put_done.wait()
        put_wall = time.perf_counter() - start
        start = time.perf_counter()
    except threading.BrokenBarrierError:
        put_wall = None
    for t in threads:
        t.join()
    search_wall = time.perf_counter() - start
    if errors or put_wall is None:
        sys.exit(f"a concurrent LangGraph client failed: {errors}")
    return {
        "concurrent_put_wall_seconds": put_wall,
        "concurrent_puts": clients * singles,
        "concurrent_search_wall_seconds": search_wall,
        "concurrent_searches": clients * query_count,
    }


if __name__ == "__main__":
    main()
