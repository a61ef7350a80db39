//! The durable PostgreSQL memory: the same threads, messages, marks and embeddings as the SQLite
//! memory (`crate::sqlite`), in a PostgreSQL database that processes on many machines share
//! (docs/postgres.md).
//!
//! **Tables.** `memory_threads`, `memory_messages` and `memory_marks`, versioned in
//! `memory_schema` with the same numbering as SQLite's (1: the tables; 2: the namespace), so a
//! copy between the backends can rely on versions 1 and 2 meaning the same tables on both; from
//! 3 the numbering is each backend's own: here 3 adds the counters recall reads instead of
//! counting (below), 4 one copy of an embedding, 5 the thread summaries' `last_active_ms` (SQLite
//! has `live` and `last_active_ms` from its version 3; see `crate::activity`). The migrations
//! run through `mnemon_db::postgres::migrate`, under an advisory lock: processes opening a new
//! database at once never race.
//!
//! **Counters.** Every write keeps, in its own transaction, the thread's `live` message count
//! and `next_seq` (seqs are never reused, so a removed one stays a gap), the removed seqs above
//! the thread's smallest live one (`memory_gaps`; trimming the oldest messages leaves none),
//! and with pgvector the thread's count of messages per indexable dimension (`memory_dims`).
//! Appends only add to them; a removal adds its seqs as gaps; a replace or an overwriting load
//! resets them. A message's index is then `seq − min(seq) − #gaps between the two`: an index
//! lookup and a count over the gaps, never over the messages.
//!
//! **Tenants.** A [`PostgresMemoryStore`] is opened for one namespace ([`Namespace`]); every
//! thread row carries it, and every other row is reached only through a thread id looked up
//! with it, so nothing a handle does can read, list, count, search or delete another tenant's
//! data.
//!
//! **Consistency.** Every mutating call is one transaction that first locks its thread's row
//! (`SELECT … FOR UPDATE`), so writers of one thread, in any process, are serialised and the
//! thread's messages keep one dense order; the call returns after `COMMIT` (with
//! `synchronous_commit = on` under [`Durability::Full`], the default). Reads run in a
//! `REPEATABLE READ` read-only transaction, so a scan sees one snapshot. Like the SQLite memory,
//! each [`PostgresMemory`] mirrors its thread and reloads it when the thread's `rev` (bumped by
//! every write) changed; thread ids come from a sequence and are never reused.
//!
//! **Batches.** An add inserts all its messages with one `INSERT … SELECT FROM UNNEST(…)`
//! statement (and their marks with one more), inside the call's one transaction: a batch is
//! stored whole or not at all.
//!
//! **One copy of an embedding** (schema version 4). A message's embedding is stored once: when
//! its numbers are `f32`s (widened to `f64`, or written as their shortest decimals, which is
//! what a message built from `f32`s or read from a file written from them holds), the body keeps
//! a `null` in the `embedding` extra's place and the `f32`s go to the `vector` column (or the
//! `embedding` bytes without pgvector), from which a read rebuilds the very same numbers, so
//! exports stay byte-identical; other numbers stay in the body as before (see [`SCHEMA_V4`]).
//!
//! **Deferred HNSW maintenance.** With
//! [`PostgresMemoryOptions::background_indexing`] (default), once a dimension's HNSW index
//! exists, a write stores its rows outside the index (`pending_dim`) and is acknowledged after its
//! durable commit; the store's background indexer moves them into the index in small batches
//! (`postgres/indexer.rs`), and a recall through the index scores the thread's pending rows
//! exactly beside the index's shortlist, so no written message is ever missing from a result.
//!
//! **pgvector.** When the `vector` extension is available and
//! [`PostgresMemoryOptions::vector_index`] is on, a second schema (`memory_vector_schema`) adds an
//! `embedding_v vector` column, filled beside the exact `embedding` bytes, with one partial HNSW
//! index (`vector_cosine_ops`) per dimension up to 2,000 (pgvector's HNSW limit) created the first
//! time that dimension is stored. Recall scores exactly with the crate's own kernel (see
//! `crate::retrieval`) over the mirrored thread, as the SQLite memory does, except for a cosine cut
//! to `top_k` over at least [`PostgresMemoryOptions::hnsw_min_messages`] candidates, every one with
//! an indexable embedding of the query's dimension (at most 2,000; the counters say so without a
//! count, unless a mark filters the candidates): the HNSW index then shortlists candidates
//! (`ef_search` [`PostgresMemoryOptions::hnsw_ef_search`], at least `top_k + max(top_k, 10)`, at
//! most 1,000) without the thread being read, and the closest `top_k` plus a margin are re-scored
//! exactly, so every returned score is the exact one. With the handle's mirror current, the
//! embeddings, indices and messages of the shortlist come from it; otherwise from the snapshot,
//! with indices from the counters. Which messages come back is as good as the index's recall (HNSW
//! is approximate: clustered 1,536-dimensional data, the shape of real embeddings, gave recall@10
//! 0.960–1.000 at the default `ef_search` of 40 and 1.000 from 60 up at 100,000 messages, 1.000
//! at 20,000; uniformly random vectors, the hardest case, far less: see the option), and a
//! shortlist that holds fewer than
//! `top_k` of the thread's candidates (the index is shared by every thread, and filtered after the
//! search) is retried at `ef_search` 1,000, then the exact path answers: never silently fewer. Set
//! `hnsw_min_messages` to `usize::MAX` for exact recall always. The recall's transaction turns
//! sequential scans and sorts off (`set_config(…, true)`), so the planner takes the index even
//! before the table's first `ANALYZE`. Which of the two modes a store runs in is logged once at
//! open (`tracing`, target `mnemon_memory::postgres`) and reported by
//! [`PostgresMemoryStore::vector_mode`].

mod indexer;
mod search;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use mnemon_db::postgres::{self as pg, CachedTransaction, Pool, Settings, VectorSupport};
use mnemon_db::{DbError, Durability, Migration, Namespace, Schema};
use mnemon_types::{Msg, MsgFactory, MsgKind};
use postgres::{IsolationLevel, Row, Transaction};
use serde_json::Value;

use crate::activity::{
    Cursor, ThreadPage, ThreadSummary, created_page, decode_created, fetch_count, page,
};
use crate::clock::default_factory;
use crate::document::LoadSource;
use crate::entry::Entry;
use crate::error::MemoryError;
use crate::exact;
use crate::load::decode_stream;
use crate::ops::Backend;
use crate::report::AddReport;
use crate::retrieval::{self, Metric, RetrieveOptions, Retrieved, rank};
use crate::scope::Scope;
use crate::search::ScopeFilter;
use crate::sweep::Forgotten;
use crate::thread::{Change, ThreadState};
use crate::words;

/// The memory tables' schema on PostgreSQL: the same table and version numbers as SQLite's.
static SCHEMA: Schema = Schema {
    component: "memory",
    table: "memory_schema",
    key_column: "id",
    migrations: &[
        Migration {
            version: 1,
            sql: SCHEMA_V1,
        },
        Migration {
            version: 2,
            sql: SCHEMA_V2,
        },
        Migration {
            version: 3,
            sql: SCHEMA_V3,
        },
        Migration {
            version: 4,
            sql: SCHEMA_V4,
        },
        Migration {
            version: 5,
            sql: SCHEMA_V5,
        },
        Migration {
            version: 6,
            sql: SCHEMA_V6,
        },
        Migration {
            version: 7,
            sql: SCHEMA_V7,
        },
        Migration {
            version: 8,
            sql: SCHEMA_V8,
        },
        Migration {
            version: 9,
            sql: SCHEMA_V9,
        },
        Migration {
            version: 10,
            sql: SCHEMA_V10,
        },
        Migration {
            version: 11,
            sql: SCHEMA_V11,
        },
        Migration {
            version: 12,
            sql: SCHEMA_V12,
        },
        Migration {
            version: 13,
            sql: SCHEMA_V13,
        },
        Migration {
            version: 14,
            sql: SCHEMA_V14,
        },
        Migration {
            version: 15,
            sql: SCHEMA_V15,
        },
        Migration {
            version: 16,
            sql: SCHEMA_V16,
        },
    ],
};

/// Version 14: keyword search matches the same words as on SQLite
/// (docs/reference/memory.md#keyword-and-hybrid-search). Every write now sends its message's
/// words as FTS5's `unicode61` tokenizer splits and folds them (`crate::words`), where
/// PostgreSQL's parser kept `alice@example.com`, `report.pdf`, `/usr/bin/env`, `3.14` and
/// `1.2.3` whole and left accents on. The rows written before must have their `search_tsv`
/// built again from their bodies, which takes Rust: this records that, and the store's open
/// rebuilds them ([`rebuild_keyword_words`]) and then removes the record.
const SCHEMA_V14: &str = "
CREATE TABLE IF NOT EXISTS memory_keyword_rebuild (id INTEGER PRIMARY KEY CHECK (id = 1));
INSERT INTO memory_keyword_rebuild (id)
  SELECT 1 WHERE EXISTS (SELECT 1 FROM memory_messages) ON CONFLICT DO NOTHING;
";

/// Version 15: the words are stored as they are, never parsed again by PostgreSQL. Version 14
/// sent them through `to_tsvector('simple', …)`, whose parser splits and drops characters by
/// the database's `LC_CTYPE`: under `C.UTF-8` or `en_US.UTF-8` (most servers) `x²` became `x`,
/// `①` nothing, and keyword search then matched other messages than SQLite's; only the `C`
/// locale (the tests' servers) kept them. Now a write sends the `tsvector` itself
/// ([`keyword_tsvector`]) and a query its lexemes as a `tsquery`; the rows written before are
/// rebuilt by [`rebuild_keyword_words`], as for version 14.
const SCHEMA_V15: &str = SCHEMA_V14;

/// A thread summary row (`thread_id, user_id, agent_id, session_id, live, last_active_ms`) of
/// the summary listings, with its thread id.
fn summary_row(r: &postgres::Row) -> Result<(ThreadSummary, i64), MemoryError> {
    let live: i64 = r.try_get(4).map_err(pg_error)?;
    Ok((
        ThreadSummary {
            scope: Scope::from_columns(
                r.try_get(1).map_err(pg_error)?,
                r.try_get(2).map_err(pg_error)?,
                r.try_get(3).map_err(pg_error)?,
            ),
            messages: u64::try_from(live).unwrap_or(0),
            last_active_ms: r.try_get(5).map_err(pg_error)?,
        },
        r.try_get::<_, i64>(0).map_err(pg_error)?,
    ))
}

/// Version 16: the namespace's threads in creation order, a page at a time
/// ([`PostgresMemoryStore::threads_page`]), as one index range read from the last listed
/// thread on (the listing read every thread of the namespace for each page before).
const SCHEMA_V16: &str = "
CREATE INDEX IF NOT EXISTS memory_threads_created ON memory_threads (namespace, thread_id);
";

/// The longest lexeme a `tsvector` or `tsquery` holds, in bytes: PostgreSQL refuses one of
/// `MAXSTRLEN` (2,047) bytes or more, in both inputs, and `to_tsvector` leaves such words out;
/// so does [`keyword_tsvector`], and a query drops them.
const MAX_LEXEME_BYTES: usize = 2046;

/// The highest word position a `tsvector` records (later words share it, as in `to_tsvector`).
const MAX_POSITION: usize = 16_383;

/// The most bytes a `tsvector`'s lexemes and positions take (PostgreSQL's `MAXSTRPOS`, just
/// under 1 MiB): past it PostgreSQL refuses the value, and so the write. [`keyword_tsvector`]
/// keeps the distinct words that fit, first come first.
const MAX_TSVECTOR_LEXEME_BYTES: usize = (1 << 20) - 1;

/// The most positions PostgreSQL keeps of one word (`MAXNUMPOS`).
const MAX_POSITIONS_PER_WORD: usize = 256;

/// The `tsvector` of `words` (space-separated, as [`content_words`] gives them), as its input
/// text: each word quoted, with its positions. Words are letters and digits only
/// (`crate::words`), so no quote, backslash or space needs escaping; longer than
/// [`MAX_LEXEME_BYTES`] they are left out, as `to_tsvector` leaves them, and distinct words
/// past [`MAX_TSVECTOR_LEXEME_BYTES`] in all too (a text of over a mebibyte of distinct words
/// is indexed by its first ones rather than refused).
fn keyword_tsvector(words: &str) -> String {
    // Each distinct word with its distinct positions (at most `MAX_POSITIONS_PER_WORD`, as
    // PostgreSQL keeps), in order of first occurrence.
    let mut entries: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, word) in words.split(' ').filter(|w| !w.is_empty()).enumerate() {
        if word.len() > MAX_LEXEME_BYTES {
            continue;
        }
        let position = (i + 1).min(MAX_POSITION);
        let entry = *at.entry(word).or_insert_with(|| {
            entries.push((word, Vec::new()));
            entries.len() - 1
        });
        if let Some((_, positions)) = entries.get_mut(entry)
            && positions.len() < MAX_POSITIONS_PER_WORD
            && positions.last() != Some(&position)
        {
            positions.push(position);
        }
    }
    let mut out = String::with_capacity(words.len() + 8 * entries.len());
    let mut room = MAX_TSVECTOR_LEXEME_BYTES;
    for (word, positions) in entries {
        // What the word takes of the value's room: its bytes (to an even count), then its
        // positions' count and each position, two bytes apiece.
        let takes = word.len().next_multiple_of(2) + 2 + 2 * positions.len();
        let Some(left) = room.checked_sub(takes) else {
            continue;
        };
        room = left;
        if !out.is_empty() {
            out.push(' ');
        }
        out.push('\'');
        out.push_str(word);
        out.push_str("':");
        for (n, p) in positions.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(&p.to_string());
        }
    }
    out
}

/// Rows whose words one statement of [`rebuild_keyword_words`] rewrites.
const KEYWORD_REBUILD_BATCH: i64 = 500;

/// Builds again, from the stored bodies, the `search_tsv` of every row written before schema
/// version 14, when that migration recorded the need; then removes the record. Batches of
/// [`KEYWORD_REBUILD_BATCH`] rows in their own transactions, each row only if its body is still
/// the one read (a concurrent write has set its own words). Idempotent: several processes
/// opening at once may all rebuild, and an interrupted rebuild starts again at the next open.
fn rebuild_keyword_words(pool: &Pool) -> Result<(), MemoryError> {
    let mut client = pool.get().map_err(db_error)?;
    let pending = client
        .query_opt("SELECT 1 FROM memory_keyword_rebuild WHERE id = 1", &[])
        .map_err(pg_error)?;
    if pending.is_none() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut rebuilt = 0u64;
    let (mut thread_id, mut seq) = (i64::MIN, i64::MIN);
    loop {
        let rows = client
            .query(
                "SELECT thread_id, seq, body FROM memory_messages
                 WHERE (thread_id, seq) > ($1, $2) ORDER BY thread_id, seq LIMIT $3",
                &[&thread_id, &seq, &KEYWORD_REBUILD_BATCH],
            )
            .map_err(pg_error)?;
        let Some(last) = rows.last() else { break };
        thread_id = last.try_get(0).map_err(pg_error)?;
        seq = last.try_get(1).map_err(pg_error)?;
        let (mut threads, mut seqs, mut bodies, mut texts) = (vec![], vec![], vec![], vec![]);
        for row in &rows {
            let body: String = row.try_get(2).map_err(pg_error)?;
            // A body that does not parse keeps the words it has.
            let Ok(parsed) = serde_json::from_str::<Value>(&body) else {
                continue;
            };
            let content = parsed.get("content").unwrap_or(&Value::Null);
            texts.push(keyword_tsvector(&content_words(content)));
            threads.push(row.try_get::<_, i64>(0).map_err(pg_error)?);
            seqs.push(row.try_get::<_, i64>(1).map_err(pg_error)?);
            bodies.push(body);
        }
        rebuilt += client
            .execute(
                "UPDATE memory_messages m
                 SET search_tsv = t.w::tsvector
                 FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::text[])
                   AS t(th, s, b, w)
                 WHERE m.thread_id = t.th AND m.seq = t.s AND m.body = t.b",
                &[&threads, &seqs, &bodies, &texts],
            )
            .map_err(pg_error)?;
    }
    client
        .execute("DELETE FROM memory_keyword_rebuild", &[])
        .map_err(pg_error)?;
    tracing::info!(
        target: "mnemon_memory::postgres",
        database = pool.target(),
        rows = rebuilt,
        seconds = started.elapsed().as_secs_f64(),
        "keyword search: rebuilt the words of the messages written before schema version 15"
    );
    Ok(())
}

/// Version 12: where a thread's rows waiting for the background indexer can be
/// (docs/postgres.md#the-pending-watermark). Every pending row of a thread has a `seq` above its
/// `pending_from`, so a recall through the index reads the pending rows' partial index from
/// there on, and not over the dead entries the moved rows left below it until a `VACUUM` (382
/// pages, 0.8 ms a recall, after a bulk load of 100,000 messages). Appends only add rows above
/// `next_seq`, so they leave it; every other write (an updated embedding can make an old row
/// pending again, a replacing load starts again from `seq` 1) sets it to 0 and bumps
/// `pending_epoch`; the indexer raises it after moving rows, only if the epoch it read is still
/// the thread's (`postgres/indexer.rs`). 0 for existing threads: their whole range is read, as
/// before.
const SCHEMA_V12: &str = "
ALTER TABLE memory_threads ADD COLUMN IF NOT EXISTS pending_from BIGINT NOT NULL DEFAULT 0;
ALTER TABLE memory_threads ADD COLUMN IF NOT EXISTS pending_epoch BIGINT NOT NULL DEFAULT 0;
";

/// Version 13: a message row no longer names its thread through a foreign key
/// (docs/postgres.md#no-foreign-key-per-message). The key's check ran once per inserted row (a
/// lookup and a share lock of the thread's row, about 4 µs each: a fifth of a batch insert's
/// time on the server) to prove what every write already guarantees: each insert into
/// `memory_messages` holds its thread's row locked (`lock_thread`), so the thread exists when
/// it commits, and every delete of a thread locks it and deletes its messages first in the
/// same transaction ([`delete_threads`]). The cascade it provided is that explicit delete.
/// Found by catalogue, not by name, whatever the server named it.
const SCHEMA_V13: &str = "
DO $drop$
DECLARE c name;
BEGIN
  FOR c IN SELECT conname FROM pg_constraint
           WHERE conrelid = 'memory_messages'::regclass
             AND confrelid = 'memory_threads'::regclass AND contype = 'f'
  LOOP
    EXECUTE format('ALTER TABLE memory_messages DROP CONSTRAINT %I', c);
  END LOOP;
END
$drop$;
";

/// Version 11: `search_tsv` is a plain column that every write fills, no longer a generated one
/// (issue 13's batched adds). Computing it from the body cost one `memory_message_text` call per
/// written row (a SQL function the planner does not inline into a generated column, over up to
/// three `jsonb` parses of the body): more than half of a batch insert's time on the server
/// (about 11 of 24 ms per 1,000 plain messages; the GIN insertions are 2 to 3 more). A write now
/// sends each message's text, which the writer already has in its parsed message
/// ([`keyword_text`]: the same text as the function gives, for every content that is a string,
/// a list of blocks or null), and the server only runs `to_tsvector('simple', …)` over it; for
/// any other content (a number, a boolean, an object) it sends none and the server computes the
/// text from the body as before ([`search_tsv_sql`]). The stored values are kept (dropping the
/// expression rewrites nothing); `NOT NULL` makes a write that forgot the column fail instead
/// of leaving a message out of keyword search. `memory_message_text` stays: it is that fallback,
/// and what the tests compare every row's `search_tsv` with.
const SCHEMA_V11: &str = "
ALTER TABLE memory_messages ALTER COLUMN search_tsv DROP EXPRESSION IF EXISTS;
ALTER TABLE memory_messages ALTER COLUMN search_tsv SET NOT NULL;
";

/// The `search_tsv` of a written row (schema version 11) from its text `text` (a `text`
/// expression: [`keyword_text`], or NULL) and its body `body`: the text's `simple` words, or
/// when no text was sent the words of `memory_message_text(body)`.
macro_rules! search_tsv_sql {
    ($text:literal, $body:literal) => {
        concat!(
            "CASE WHEN ",
            $text,
            " IS NULL THEN to_tsvector('simple'::regconfig, memory_message_text(",
            $body,
            ")) ELSE (",
            $text,
            ")::tsvector END"
        )
    };
}

/// The `tsvector` keyword search indexes for `msg` (schema version 15), as its input text: the
/// words of its content ([`content_words`]) as they are ([`keyword_tsvector`]). Always `Some`:
/// the server's own fallback ([`search_tsv_sql`]) is for rows of older writers.
fn keyword_text(msg: &Msg) -> Option<String> {
    Some(keyword_tsvector(&content_words(msg.content())))
}

/// The words keyword search matches in a message's `content`, folded and joined by spaces, as
/// the SQLite memory's FTS5 table reads them from the same content
/// (docs/reference/memory.md#keyword-and-hybrid-search): the string itself; the `text` of the
/// blocks of a list that have a string one; nothing for null; `1` or `0` for a boolean (SQLite's
/// text of a JSON boolean); the JSON text of anything else.
fn content_words(content: &Value) -> String {
    match content {
        Value::String(s) => words::indexed_text(s),
        Value::Array(blocks) => {
            let mut text = String::new();
            for block in blocks {
                if let Some(Value::String(t)) = block.get("text") {
                    let block_words = words::indexed_text(t);
                    if !block_words.is_empty() {
                        if !text.is_empty() {
                            text.push(' ');
                        }
                        text.push_str(&block_words);
                    }
                }
            }
            text
        }
        Value::Null => String::new(),
        Value::Bool(b) => (if *b { "1" } else { "0" }).to_owned(),
        other => words::indexed_text(&other.to_string()),
    }
}

/// Version 10: `memory_body_jsonb(body)`, a message body as `jsonb` whatever it holds: the body
/// itself, or when it has a `\u0000` escape (which `jsonb` refuses) a copy whose NUL escapes are
/// spaces, escaped backslashes set aside first. Filters read bodies through it (their `jsonb`
/// cast failed every filtered search that met a message with a NUL), and
/// `memory_message_text` becomes plain SQL over it again: [`SCHEMA_V9`]'s exception block cost
/// a subtransaction per written row. One `strpos` per body when there is no NUL, and the
/// planner can inline both.
const SCHEMA_V10: &str = r#"
CREATE OR REPLACE FUNCTION memory_body_jsonb(body text) RETURNS jsonb
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
  SELECT CASE WHEN strpos(body, '\u0000') = 0 THEN body::jsonb
    ELSE replace(replace(replace(body, '\\', E'\x01'), '\u0000', ' '), E'\x01', '\\')::jsonb
  END
$f$;
CREATE OR REPLACE FUNCTION memory_message_text(body text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
  SELECT CASE jsonb_typeof(memory_body_jsonb(body) -> 'content')
    WHEN 'string' THEN memory_body_jsonb(body) ->> 'content'
    WHEN 'array' THEN COALESCE((SELECT string_agg(b ->> 'text', ' ')
                                FROM jsonb_array_elements(memory_body_jsonb(body) -> 'content') AS b
                                WHERE jsonb_typeof(b -> 'text') = 'string'), '')
    WHEN 'null' THEN ''
    ELSE COALESCE((memory_body_jsonb(body) -> 'content')::text, '')
  END
$f$;
"#;

/// Version 9: [`SCHEMA_V7`]'s `memory_message_text` cast the body to `jsonb`, which cannot hold
/// U+0000 (JSON text can, as the escape `\u0000`), so every write of a message with a NUL
/// anywhere in it failed ("unsupported Unicode escape sequence"). The text is now read from
/// the body as it is, and only when that fails from a copy whose `\u0000` escapes are spaces
/// (escaped backslashes are set aside first, so `\\u0000` stays as it is); a body that is not
/// JSON at all gives no words. The body itself is never changed. The generated column keeps
/// its values: a message stored before could not have had a NUL.
const SCHEMA_V9: &str = r#"
CREATE OR REPLACE FUNCTION memory_message_text(body text) RETURNS text
  LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $f$
DECLARE
  doc jsonb;
BEGIN
  BEGIN
    doc := body::jsonb;
  EXCEPTION WHEN others THEN
    BEGIN
      doc := replace(replace(replace(body, '\\', E'\x01'), '\u0000', ' '), E'\x01', '\\')::jsonb;
    EXCEPTION WHEN others THEN
      RETURN '';
    END;
  END;
  RETURN CASE jsonb_typeof(doc -> 'content')
    WHEN 'string' THEN doc ->> 'content'
    WHEN 'array' THEN COALESCE((SELECT string_agg(b ->> 'text', ' ')
                                FROM jsonb_array_elements(doc -> 'content') AS b
                                WHERE jsonb_typeof(b -> 'text') = 'string'), '')
    WHEN 'null' THEN ''
    ELSE COALESCE((doc -> 'content')::text, '')
  END;
END
$f$;
"#;

/// Version 8: embedding models (docs/reference/memory.md#embedding-models), as SQLite's
/// version 6: a message's `embedding_model` names the model that made its stored embedding
/// (NULL: not known), and the partial index answers "has this thread an embedding of another
/// model" with two index range probes. Existing embeddings are of unknown models.
const SCHEMA_V8: &str = "
ALTER TABLE memory_messages ADD COLUMN IF NOT EXISTS embedding_model TEXT;
CREATE INDEX IF NOT EXISTS memory_messages_model ON memory_messages (thread_id, embedding_model)
  WHERE embedding_model IS NOT NULL;
";

/// [`MemoryError::EmbeddingModelMismatch`] when another model than `requested` was found.
pub(crate) fn model_mismatch(other: Option<String>, requested: &str) -> Result<(), MemoryError> {
    match other {
        Some(stored) => Err(MemoryError::EmbeddingModelMismatch {
            stored,
            requested: requested.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The server's clock in milliseconds since the Unix epoch: every write's activity time
/// (schema version 5). `clock_timestamp()` rather than `now()`, the transaction's start, so that
/// a write that waited for a thread's lock is not dated before the write it waited for.
macro_rules! now_ms_sql {
    () => {
        "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    };
}

/// Ends a write of a thread: the activity time that every statement bumping `rev` also sets;
/// a server clock stepping back never lowers it.
macro_rules! touch_sql {
    () => {
        concat!(
            "last_active_ms = GREATEST(last_active_ms, ",
            now_ms_sql!(),
            ")"
        )
    };
}

const SCHEMA_V1: &str = "
CREATE TABLE memory_threads (
  thread_id BIGSERIAL PRIMARY KEY,
  user_id TEXT NOT NULL, agent_id TEXT NOT NULL, session_id TEXT NOT NULL,
  rev BIGINT NOT NULL DEFAULT 0, created_at TEXT NOT NULL,
  UNIQUE (user_id, agent_id, session_id));
CREATE TABLE memory_messages (
  thread_id BIGINT NOT NULL REFERENCES memory_threads ON DELETE CASCADE,
  seq BIGINT NOT NULL, msg_id TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
  embedding BYTEA,
  PRIMARY KEY (thread_id, seq), UNIQUE (thread_id, msg_id));
CREATE TABLE memory_marks (
  thread_id BIGINT NOT NULL, msg_id TEXT NOT NULL, pos BIGINT NOT NULL, mark TEXT NOT NULL,
  PRIMARY KEY (thread_id, msg_id, mark),
  FOREIGN KEY (thread_id, msg_id) REFERENCES memory_messages (thread_id, msg_id)
    ON DELETE CASCADE);
";

/// Version 2, as on SQLite: every thread belongs to a namespace, and a scope is unique within
/// its namespace; existing threads get the default namespace.
const SCHEMA_V2: &str = "
ALTER TABLE memory_threads ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE memory_threads ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE memory_threads DROP CONSTRAINT memory_threads_user_id_agent_id_session_id_key;
ALTER TABLE memory_threads ADD CONSTRAINT memory_threads_scope_key
  UNIQUE (namespace, user_id, agent_id, session_id);
";

/// Version 3 (PostgreSQL only; SQLite's numbering stops at 2): the counters that let a recall
/// through the HNSW index do no work proportional to the thread's size.
///
/// - `next_seq`: the next message's `seq`, so seqs are never reused (until a replace empties
///   the thread) and a removed one stays a gap;
/// - `live`: how many messages the thread holds;
/// - `memory_gaps`: the removed seqs above the thread's smallest live one, so that a message's
///   index is `seq − min(seq) − #gaps between the two` (an index lookup and a count over the
///   gaps only, never over the messages). Gaps below the smallest live seq are pruned: trimming
///   the oldest messages, the common removal, leaves none.
///
/// The data migration computes all three exactly from the stored messages.
const SCHEMA_V3: &str = "
ALTER TABLE memory_threads ADD COLUMN next_seq BIGINT NOT NULL DEFAULT 1,
  ADD COLUMN live BIGINT NOT NULL DEFAULT 0;
CREATE TABLE memory_gaps (
  thread_id BIGINT NOT NULL REFERENCES memory_threads ON DELETE CASCADE,
  seq BIGINT NOT NULL,
  PRIMARY KEY (thread_id, seq));
UPDATE memory_threads t SET next_seq = c.hi + 1, live = c.n
  FROM (SELECT thread_id, max(seq) AS hi, count(*) AS n FROM memory_messages
        GROUP BY thread_id) c
  WHERE c.thread_id = t.thread_id;
INSERT INTO memory_gaps (thread_id, seq)
  SELECT c.thread_id, s
  FROM (SELECT thread_id, min(seq) AS lo, max(seq) AS hi FROM memory_messages
        GROUP BY thread_id) c
  CROSS JOIN LATERAL generate_series(c.lo + 1, c.hi - 1) AS s
  WHERE NOT EXISTS (SELECT 1 FROM memory_messages m
                    WHERE m.thread_id = c.thread_id AND m.seq = s);
";

/// Version 4 (PostgreSQL only): a message's embedding is stored once. `embedding_form` says
/// where its numbers are:
///
/// - 0 ([`FORM_IN_BODY`], every row before version 4): in the JSON `body`, as decimals;
/// - 1 ([`FORM_WIDENED`]): the body's `embedding` extra is a `null` placeholder, and the
///   numbers are the stored `f32`s widened to `f64` (what a message built from `f32`s holds);
/// - 2 ([`FORM_SHORTEST`]): the placeholder too, and each number is the `f64` read from its
///   `f32`'s shortest decimal (what a file written from `f32`s holds).
///
/// The `f32`s are in `embedding_v` when the row has one, in the `embedding` bytes otherwise. At
/// 1,536 dimensions the decimals were about 30 KB of JSON per message beside the `f32`s, written,
/// compressed and parsed again by every read; the forms rebuild the very same numbers, so
/// exports stay byte-identical (`split_numbers`, `join_numbers`).
const SCHEMA_V4: &str = "
ALTER TABLE memory_messages ADD COLUMN IF NOT EXISTS embedding_form SMALLINT NOT NULL DEFAULT 0;
";

/// Version 5: the thread summaries (docs/reference/memory.md#thread-summaries), as SQLite's
/// version 3: `last_active_ms`, set by every write in its own transaction beside `live`
/// (version 3), and the index that lists a namespace's threads by activity without reading a
/// message. Existing threads get the migration's time (a message's `timestamp` is free text in
/// the writer's local time, not a reliable clock): they tie, and list newest-created first,
/// until they are written again. Like version 4 it adds only what is missing, so that a
/// database whose recorded version was set back migrates again without failing.
const SCHEMA_V5: &str = concat!(
    "ALTER TABLE memory_threads ADD COLUMN IF NOT EXISTS last_active_ms BIGINT NOT NULL
       DEFAULT 0;
     UPDATE memory_threads SET last_active_ms = ",
    now_ms_sql!(),
    " WHERE last_active_ms = 0;
     CREATE INDEX IF NOT EXISTS memory_threads_activity
       ON memory_threads (namespace, last_active_ms DESC, thread_id DESC);"
);

/// Version 6: expiry (docs/reference/memory.md#expiry), as SQLite's version 4: a message's
/// `expires_at` (milliseconds since the Unix epoch by the store's clock; NULL: never) hides it
/// from every read from that instant on, and a thread's `next_expiry` is at most the smallest
/// `expires_at` of its messages (lowered by every add, recomputed when expired messages are
/// removed). Reads of a thread whose `next_expiry` has passed leave the HNSW and counter paths
/// for the exact ones; writes and `gc` remove the expired rows through the same statements as a
/// delete, so the counters stay exact. Both indexes are partial: rows that never expire cost
/// nothing. Only what is missing is added, as in version 5.
const SCHEMA_V6: &str = "
ALTER TABLE memory_messages ADD COLUMN IF NOT EXISTS expires_at BIGINT;
ALTER TABLE memory_threads ADD COLUMN IF NOT EXISTS next_expiry BIGINT;
CREATE INDEX IF NOT EXISTS memory_messages_expiry ON memory_messages (thread_id, expires_at)
  WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_threads_expiry ON memory_threads (namespace, next_expiry)
  WHERE next_expiry IS NOT NULL;
";

/// Version 7: keyword search (docs/reference/memory.md#keyword-and-hybrid-search), as SQLite's
/// version 5. `memory_message_text(body)` is a message's text (its content when a string, the
/// `text` of its blocks when a list, else the content's JSON); `search_tsv`, a stored generated
/// column, is its `simple` `tsvector` (lower-cased words, no stemming: a keyword means the
/// same on both backends), so no write path can leave it behind, and adding it fills it for
/// every stored message (rewriting the table once). The GIN index answers `@@` queries. Only
/// what is missing is added, as in version 5.
const SCHEMA_V7: &str = "
CREATE OR REPLACE FUNCTION memory_message_text(body text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
  SELECT CASE jsonb_typeof(body::jsonb -> 'content')
    WHEN 'string' THEN body::jsonb ->> 'content'
    WHEN 'array' THEN COALESCE((SELECT string_agg(b ->> 'text', ' ')
                                FROM jsonb_array_elements(body::jsonb -> 'content') AS b
                                WHERE jsonb_typeof(b -> 'text') = 'string'), '')
    WHEN 'null' THEN ''
    ELSE COALESCE((body::jsonb -> 'content')::text, '')
  END
$f$;
ALTER TABLE memory_messages ADD COLUMN IF NOT EXISTS search_tsv tsvector
  GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, memory_message_text(body))) STORED;
CREATE INDEX IF NOT EXISTS memory_messages_search ON memory_messages USING gin (search_tsv);
";

/// `embedding_form` 0: the numbers are in the body (see [`SCHEMA_V4`]).
const FORM_IN_BODY: i16 = 0;
/// `embedding_form` 1: the numbers are the stored `f32`s, widened.
const FORM_WIDENED: i16 = 1;
/// `embedding_form` 2: the numbers are the `f64`s of the stored `f32`s' shortest decimals.
const FORM_SHORTEST: i16 = 2;

/// The `f64` that the shortest decimal of `f` reads as: Rust prints an `f32` with the fewest
/// digits that read back as the same `f32`, and parsing is correctly rounded, so this is a
/// function of `f` alone.
fn shortest_f64(f: f32, buffer: &mut String) -> f64 {
    use std::fmt::Write as _;
    buffer.clear();
    // Writing to a String cannot fail; were it to, the number would not match and the
    // embedding would stay in the body.
    let _ = write!(buffer, "{f}");
    buffer.parse().unwrap_or(f64::NAN)
}

/// How `numbers` (an embedding moved out of its message) can be stored as `f32`s and rebuilt
/// bit for bit: the form and the `f32`s, or `None` when neither form reproduces every number
/// (they then stay in the body).
fn split_numbers(numbers: &[f64]) -> Option<(i16, Vec<f32>)> {
    let floats: Vec<f32> = numbers.iter().map(|&x| x as f32).collect();
    let same = |a: f64, b: f64| a.to_bits() == b.to_bits();
    if numbers
        .iter()
        .zip(&floats)
        .all(|(&x, &f)| same(f64::from(f), x))
    {
        return Some((FORM_WIDENED, floats));
    }
    let mut buffer = String::new();
    numbers
        .iter()
        .zip(&floats)
        .all(|(&x, &f)| f.is_finite() && same(shortest_f64(f, &mut buffer), x))
        .then_some((FORM_SHORTEST, floats))
}

/// The numbers that `split_numbers` stored as `form` and `floats`; `None` for an unknown form.
fn join_numbers(form: i16, floats: &[f32]) -> Option<Box<[f64]>> {
    match form {
        FORM_WIDENED => Some(floats.iter().map(|&f| f64::from(f)).collect()),
        FORM_SHORTEST => {
            let mut buffer = String::new();
            Some(
                floats
                    .iter()
                    .map(|&f| shortest_f64(f, &mut buffer))
                    .collect(),
            )
        }
        _ => None,
    }
}

/// A message as a row stores it: the body, where its embedding's numbers are, and its
/// embedding as the `f32`s recall scores (see [`SCHEMA_V4`]).
struct StoredMessage {
    body: String,
    form: i16,
    embedding: Option<Vec<f32>>,
    /// The text keyword search indexes ([`keyword_text`]; schema version 11).
    text: Option<String>,
}

impl StoredMessage {
    fn of(entry: &Entry) -> Result<StoredMessage, MemoryError> {
        match entry.numbers().and_then(split_numbers) {
            Some((form, floats)) => Ok(StoredMessage {
                body: serde_json::to_string(entry.msg_without_embedding())
                    .map_err(|e| corrupt(e.to_string()))?,
                form,
                embedding: Some(floats),
                text: keyword_text(entry.msg_without_embedding()),
            }),
            None => Ok(StoredMessage {
                body: serde_json::to_string(&*entry.full()).map_err(|e| corrupt(e.to_string()))?,
                form: FORM_IN_BODY,
                embedding: entry.embedding(),
                text: keyword_text(entry.msg_without_embedding()),
            }),
        }
    }
}

/// The pgvector column, in a schema of its own because it exists only where the extension does.
static VECTOR_SCHEMA: Schema = Schema {
    component: "memory vectors",
    table: "memory_vector_schema",
    key_column: "id",
    migrations: &[
        Migration {
            version: 1,
            // `embedding_dim` is the dimension of an `embedding_v` the HNSW indexes can hold
            // (finite, non-zero), NULL otherwise; each partial index is over one of its values.
            sql: "ALTER TABLE memory_messages ADD COLUMN embedding_v vector,
                    ADD COLUMN embedding_dim INTEGER;",
        },
        Migration {
            version: 2,
            // How many of a thread's messages have each `embedding_dim`, kept by every write
            // in its own transaction: a recall knows that every message is indexable at the
            // query's dimension (`n` equals the thread's `live`) without counting them.
            sql: "CREATE TABLE memory_dims (
                    thread_id BIGINT NOT NULL REFERENCES memory_threads ON DELETE CASCADE,
                    dim INTEGER NOT NULL, n BIGINT NOT NULL,
                    PRIMARY KEY (thread_id, dim));
                  INSERT INTO memory_dims (thread_id, dim, n)
                    SELECT thread_id, embedding_dim, count(*) FROM memory_messages
                    WHERE embedding_dim IS NOT NULL GROUP BY thread_id, embedding_dim;",
        },
        Migration {
            version: 3,
            // Deferred HNSW maintenance (`postgres/indexer.rs`): a row written once its
            // dimension's index exists has `pending_dim` set and `embedding_dim` NULL (outside
            // the partial indexes) until the background indexer moves it in. `memory_dims`
            // counts a row by whichever of the two is set. The partial index finds a thread's
            // pending rows, which a recall scores exactly.
            sql: "ALTER TABLE memory_messages ADD COLUMN IF NOT EXISTS pending_dim INTEGER;
                  CREATE INDEX IF NOT EXISTS memory_messages_pending
                    ON memory_messages (thread_id, seq) WHERE pending_dim IS NOT NULL;",
        },
    ],
};

/// [`PostgresMemoryOptions::hnsw_ef_search`]'s default.
const DEFAULT_EF_SEARCH: usize = 40;

/// The default of [`PostgresMemoryOptions::indexer_movers`]: a lead and a helper index a
/// backlog about twice as fast as one mover on the 2-core development machine
/// (docs/postgres.md#moving-pending-rows).
const DEFAULT_INDEXER_MOVERS: usize = 2;

/// How many candidates beyond `top_k` (at least; `top_k` more when larger) an HNSW recall
/// re-scores exactly: see `retrieve_from_index`.
const RESCORE_MARGIN: usize = 10;

/// A recall through the index, first statement: the thread with its counters (schema version 3),
/// also setting the index query's settings for the transaction only: the shortlist's length,
/// and no sequential scan or sort, so that the planner takes the HNSW index (the only plan left
/// that orders by distance) even before the table's first `ANALYZE`, when it would otherwise
/// prefer to scan and sort the thread exactly.
const RECALL_THREAD_SQL: &str = "SELECT t.thread_id, t.live, t.rev,
        COALESCE((SELECT d.n FROM memory_dims d
                  WHERE d.thread_id = t.thread_id AND d.dim = $5), 0),
        set_config('hnsw.ef_search', $6, true),
        set_config('enable_seqscan', 'off', true),
        set_config('enable_sort', 'off', true),
        t.next_expiry, t.pending_from
 FROM memory_threads t
 WHERE t.namespace = $1 AND t.user_id = $2 AND t.agent_id = $3 AND t.session_id = $4";

/// A recall through the index, the shortlist: the thread's (`$1`; marked `$2` when given)
/// indexed candidates closest to `$3` through the HNSW index of `dim`, the closest `$4`
/// by pgvector's distance, and then every candidate that waits for the background indexer
/// (`postgres/indexer.rs`), outside the index, read from above the thread's pending watermark
/// `$5` (schema version 12), all to be scored exactly (up to
/// [`PENDING_SCAN_MAX`] of them; one more says there are too many). Each row: seq, id,
/// `embedding` (the vector, or NULL when the mirror has them; always NULL for a pending row,
/// read afterwards only when there are few enough of them to score: a thread whose embeddings
/// were just stored may have tens of thousands pending, and reading each one's vector only to
/// give up cost more than the exact scan), whether it is pending. The dimension is formatted
/// into the text: the partial index is chosen only when its predicate appears literally.
fn shortlist_sql(dim: usize, embedding: &str) -> &'static str {
    let scan_limit = PENDING_SCAN_MAX + 1;
    interned(format!(
        "(SELECT m.seq, m.msg_id, {embedding}, false FROM memory_messages m
          WHERE m.thread_id = $1 AND m.embedding_dim = {dim}
            AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM memory_marks k
                 WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id AND k.mark = $2))
          ORDER BY m.embedding_v::vector({dim}) <=> $3::vector({dim})
          LIMIT $4)
         UNION ALL
         (SELECT m.seq, m.msg_id, NULL::vector, true FROM memory_messages m
          WHERE m.thread_id = $1 AND m.seq > $5 AND m.pending_dim = {dim}
            AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM memory_marks k
                 WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id AND k.mark = $2))
          LIMIT {scan_limit})"
    ))
}

/// The most pending rows (see `postgres/indexer.rs`) a recall through the index scores
/// exactly beside the index's shortlist; a thread with more takes the exact path.
const PENDING_SCAN_MAX: usize = 4096;

/// pgvector's longest HNSW shortlist (`hnsw.ef_search`).
const HNSW_MAX_EF_SEARCH: usize = 1000;

/// pgvector's largest dimension for an HNSW index on `vector`.
const HNSW_MAX_DIM: usize = 2000;

/// Options of [`PostgresMemoryStore::open`].
#[derive(Debug, Clone)]
pub struct PostgresMemoryOptions {
    /// How hard a commit is pushed to disk: [`Durability::Full`] keeps `synchronous_commit`
    /// on, [`Durability::Normal`] turns it off (see `mnemon_db::postgres`).
    pub durability: Durability,
    /// The most connections the store holds open.
    pub pool_size: usize,
    /// The tenant the store is opened for: see the module docs.
    pub namespace: Namespace,
    /// Keep embeddings in a pgvector column with HNSW indexes when the `vector` extension is
    /// available (default on). Off, the store neither creates the extension nor adds the
    /// column: the "without pgvector" configuration the tests also run. A database whose column
    /// another store already added keeps it filled either way, so that it never goes stale.
    pub vector_index: bool,
    /// With the index, a recall cut to `top_k` by cosine over at least this many candidates
    /// shortlists through HNSW instead of reading the whole thread (default 10,000); smaller
    /// threads, and every other recall, score every candidate exactly. See the module docs
    /// for what the HNSW path guarantees.
    pub hnsw_min_messages: usize,
    /// The HNSW shortlist (`hnsw.ef_search`) of a cut through the index: default 40,
    /// pgvector's own (what LangGraph's `PostgresStore` and most pgvector users search with); at
    /// least `top_k + max(top_k, 10)` (the candidates re-scored exactly), at most 1,000
    /// (pgvector's limit). A longer shortlist finds more of the exact top `k` and costs latency;
    /// `mnemon serve --recall-index-ef` sets it. Measured on a 2-core machine with
    /// 1,536-dimensional vectors, pgvector's default index parameters, and top 10 (issue 13's
    /// figures tests in tests/tests/memory_postgres.rs and `cargo xtask bench stores`;
    /// docs/postgres.md has the tables): on clustered data (about 50 per cluster, the shape of
    /// real embeddings) at 100,000 messages, recall@10 was 0.960–1.000 at 40 (0.989–0.991 in the
    /// benchmark's runs), 0.998–1.000 at 60 and 0.999–1.000 at 80, for a search p50 of 1.8, 2.6
    /// and 3.4 ms (benchmark, after a bulk load); at 20,000 it was 1.000 for every value from 40
    /// to 800. On uniformly random vectors, the pathological case where no neighbour is much
    /// nearer than any other, recall@10 at 20,000 was 0.33 at 40, 0.43 at 100, 0.67 at 400 and
    /// 0.86 at 800. Raise it when your embeddings are less clustered than that and recall
    /// matters more than latency.
    pub hnsw_ef_search: usize,
    /// Defer HNSW maintenance to a background indexer (default on; `postgres/indexer.rs`):
    /// once a dimension's index exists, a write stores its vectors outside the index and is
    /// acknowledged after its durable commit, without the index insertions (milliseconds per
    /// vector); the store's indexer threads ([`indexer_movers`](Self::indexer_movers)), on
    /// connections that are not the store's ([`indexer_pool`](Self::indexer_pool)), then
    /// move them into
    /// the index in small batches. Until then a recall scores them exactly beside the index's
    /// shortlist, so every written message is found as before. Off, every write inserts into
    /// the index before it commits.
    pub background_indexing: bool,
    /// The pool the background indexer's movers take a connection from for each batch they
    /// move. `None` (the default): a pool of its own, one connection per mover, opened when
    /// there is work and closed after two seconds without. A pool shared by the stores of several
    /// namespaces bounds how many connections all their indexers hold together (what
    /// `mnemon_ops` does for a server's tenants: docs/postgres.md#one-pool-per-database).
    pub indexer_pool: Option<Pool>,
    /// How many movers the background indexer runs (default 2; 1 to 16, outside taken as the
    /// nearest), each on a connection of its own (of [`indexer_pool`](Self::indexer_pool)
    /// when given, else of a pool of this many). The first moves every write's rows; the
    /// others join it only for a backlog (a batch that comes back full), moving disjoint
    /// batches beside it. An HNSW insertion is CPU work of one server process, so one mover
    /// uses one of the server's cores: on 2 cores at 1,536 dimensions, one moved about 300
    /// rows a second into a 100,000-row index and a lead with a helper 580 to 640
    /// (docs/postgres.md#moving-pending-rows).
    /// More movers index a backlog sooner and take more of the server's cores from the
    /// requests meanwhile.
    pub indexer_movers: usize,
    /// How long a message added with [`Expiry::Default`](mnemon_db::Expiry::Default) (every
    /// plain add and load) lives: the default time-to-live of this handle's namespace.
    /// Default: `None`, forever.
    pub default_ttl: Option<std::time::Duration>,
    /// The clock that stamps expiries and decides what has expired
    /// (docs/reference/memory.md#expiry). Default: the system clock.
    pub clock: Arc<dyn mnemon_db::Clock>,
}

impl Default for PostgresMemoryOptions {
    /// The defaults every Mnemon store shares (`mnemon_db::postgres::Settings`).
    fn default() -> Self {
        let shared = Settings::default();
        PostgresMemoryOptions {
            durability: shared.durability,
            pool_size: shared.pool_size,
            namespace: Namespace::default(),
            vector_index: true,
            hnsw_min_messages: 10_000,
            hnsw_ef_search: DEFAULT_EF_SEARCH,
            background_indexing: true,
            indexer_pool: None,
            indexer_movers: DEFAULT_INDEXER_MOVERS,
            default_ttl: None,
            clock: Arc::new(mnemon_db::SystemClock),
        }
    }
}

/// How a store keeps embeddings for the database's own vector search.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VectorMode {
    /// In a pgvector `vector` column too, with a partial HNSW index per dimension.
    Pgvector {
        /// The extension's version.
        version: String,
    },
    /// Only as exact bytes; recall scores exactly (as it always does).
    Exact {
        /// Why not pgvector: turned off, or the extension's reason.
        reason: String,
    },
}

/// An open PostgreSQL database of memory threads for one namespace; share it with `Arc`.
pub struct PostgresMemoryStore {
    pool: Pool,
    factory: MsgFactory,
    namespace: Namespace,
    vector: VectorMode,
    /// The dimensions whose HNSW index this store has seen exist.
    indexed: Mutex<HashSet<usize>>,
    /// When this store last tried to create each dimension's index that it has not seen exist
    /// (see `index_dims`).
    index_attempts: Mutex<HashMap<usize, std::time::Instant>>,
    /// [`PostgresMemoryOptions::hnsw_min_messages`].
    hnsw_min_messages: usize,
    /// [`PostgresMemoryOptions::hnsw_ef_search`].
    hnsw_ef_search: usize,
    /// How many recalls the HNSW path answered.
    index_recalls: AtomicU64,
    /// Whether a search has looked for the planner's statistics of the messages (and asked
    /// for them when there were none): `postgres/search.rs`.
    statistics_checked: std::sync::atomic::AtomicBool,
    /// The background indexer, with [`PostgresMemoryOptions::background_indexing`] and
    /// pgvector.
    indexer: Option<indexer::Indexer>,
    /// [`PostgresMemoryOptions::default_ttl`].
    default_ttl: Option<std::time::Duration>,
    /// [`PostgresMemoryOptions::clock`].
    clock: Arc<dyn mnemon_db::Clock>,
    /// The threads' stored vectors for the exact scan of a search across sessions, shared
    /// by this store's handles (`crate::vector_scan`).
    vectors: crate::vector_scan::VectorCache,
}

impl std::fmt::Debug for PostgresMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresMemoryStore")
            .field("target", &self.pool.target())
            .field("namespace", &self.namespace)
            .field("vector", &self.vector)
            .finish_non_exhaustive()
    }
}

impl PostgresMemoryStore {
    /// Connects to the database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`)
    /// and brings the memory tables to the current version.
    pub fn open(
        url: &str,
        options: PostgresMemoryOptions,
    ) -> Result<Arc<PostgresMemoryStore>, MemoryError> {
        PostgresMemoryStore::open_with_factory(url, options, default_factory())
    }

    /// As [`open`](Self::open), with the factory that fills in missing ids and timestamps.
    pub fn open_with_factory(
        url: &str,
        options: PostgresMemoryOptions,
        factory: MsgFactory,
    ) -> Result<Arc<PostgresMemoryStore>, MemoryError> {
        let settings = Settings {
            durability: options.durability,
            pool_size: options.pool_size,
            ..Settings::default()
        };
        let pool = Pool::connect(url, settings).map_err(db_error)?;
        PostgresMemoryStore::open_on_with_factory(&pool, options, factory)
    }

    /// As [`open`](Self::open), on a pool other stores may share (one pool for every store
    /// and namespace of a process: docs/postgres.md#one-pool-per-database). The pool's
    /// settings apply: `options.durability` and `options.pool_size` are not used.
    pub fn open_on(
        pool: &Pool,
        options: PostgresMemoryOptions,
    ) -> Result<Arc<PostgresMemoryStore>, MemoryError> {
        PostgresMemoryStore::open_on_with_factory(pool, options, default_factory())
    }

    /// As [`open_on`](Self::open_on), with the factory that fills in missing ids and
    /// timestamps.
    pub fn open_on_with_factory(
        pool: &Pool,
        options: PostgresMemoryOptions,
        factory: MsgFactory,
    ) -> Result<Arc<PostgresMemoryStore>, MemoryError> {
        // Migrated as every PostgreSQL store is (`mnemon_db::postgres::migrate_all`); the
        // vector schema follows only where pgvector is, or its column already exists.
        pg::migrate_all(pool, &[&SCHEMA]).map_err(db_error)?;
        rebuild_keyword_words(pool)?;
        let pool = pool.clone();
        let vector = if options.vector_index {
            match pool.vector_support().map_err(db_error)? {
                VectorSupport::Available { version } => {
                    pool.migrate(&VECTOR_SCHEMA).map_err(db_error)?;
                    VectorMode::Pgvector { version }
                }
                unavailable => VectorMode::Exact {
                    reason: unavailable.to_string(),
                },
            }
        } else if vector_column_exists(&pool)? {
            // Another store filled the column: it must not go stale behind this one's writes,
            // nor its counts (the later versions need no extension to be created).
            pool.migrate(&VECTOR_SCHEMA).map_err(db_error)?;
            VectorMode::Pgvector {
                version: "(already installed)".into(),
            }
        } else {
            VectorMode::Exact {
                reason: "the vector index is turned off (PostgresMemoryOptions::vector_index)"
                    .into(),
            }
        };
        match &vector {
            VectorMode::Pgvector { version } => tracing::info!(
                target: "mnemon_memory::postgres",
                database = pool.target(),
                "memory embeddings: pgvector {version} column with HNSW indexes; recall scores exactly"
            ),
            VectorMode::Exact { reason } => tracing::info!(
                target: "mnemon_memory::postgres",
                database = pool.target(),
                "memory embeddings: exact scoring only ({reason})"
            ),
        }
        let indexer = match (&vector, options.background_indexing) {
            (VectorMode::Pgvector { .. }, true) => Some(indexer::Indexer::start(
                options.indexer_pool.clone().unwrap_or_else(|| {
                    pool.sibling(options.indexer_movers.clamp(1, indexer::MAX_MOVERS))
                }),
                options.namespace.clone(),
                options.indexer_movers,
            )?),
            _ => None,
        };
        Ok(Arc::new(PostgresMemoryStore {
            pool,
            factory,
            namespace: options.namespace,
            vector,
            indexed: Mutex::new(HashSet::new()),
            index_attempts: Mutex::new(HashMap::new()),
            hnsw_min_messages: options.hnsw_min_messages,
            hnsw_ef_search: options.hnsw_ef_search,
            index_recalls: AtomicU64::new(0),
            statistics_checked: std::sync::atomic::AtomicBool::new(false),
            indexer,
            default_ttl: options.default_ttl,
            clock: options.clock,
            vectors: crate::vector_scan::VectorCache::default(),
        }))
    }

    /// The namespace (tenant) the store was opened for.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Whether embeddings also go to a pgvector column (see the module docs).
    pub fn vector_mode(&self) -> &VectorMode {
        &self.vector
    }

    /// The HNSW shortlist of a recall cut through the index: [`PostgresMemoryOptions::hnsw_ef_search`]
    /// as opened, within pgvector's 1 to 1,000 (a recall widens it to the candidates it
    /// re-scores, `top_k + max(top_k, 10)`, when that is more).
    pub fn hnsw_ef_search(&self) -> usize {
        self.hnsw_ef_search.clamp(1, HNSW_MAX_EF_SEARCH)
    }

    /// How many recalls through this store's memories, and searches across its sessions
    /// ([`search`](Self::search)), the HNSW index shortlisted (the others scored every
    /// candidate): for monitoring, and for tests to know which path ran.
    pub fn index_recalls(&self) -> u64 {
        self.index_recalls.load(Ordering::Relaxed)
    }

    /// How many messages of the store's namespace wait for the background indexer (see
    /// [`PostgresMemoryOptions::background_indexing`]); they are found by every recall
    /// meanwhile.
    pub fn pending_index(&self) -> Result<u64, MemoryError> {
        if !matches!(self.vector, VectorMode::Pgvector { .. }) {
            return Ok(0);
        }
        indexer::count_pending(&mut *self.client()?, &self.namespace)
    }

    /// Moves every pending message of the store's namespace into the HNSW indexes now, on the
    /// caller's thread (the background indexer may be moving some at the same time); returns
    /// how many this call moved. For a bulk load that wants its index complete before it
    /// returns, tests, and benchmarks.
    pub fn flush_index(&self) -> Result<u64, MemoryError> {
        if !matches!(self.vector, VectorMode::Pgvector { .. }) {
            return Ok(0);
        }
        let mut client = self.client()?;
        let mut moved = 0;
        let started = std::time::Instant::now();
        let mut cursor = indexer::Cursor::START;
        loop {
            let n = indexer::move_next(&mut client, &self.namespace, &mut cursor, &|| {})?;
            moved += n;
            if n > 0 {
                continue;
            }
            // Rows another indexer holds are moved once it commits: wait for them too, but
            // not forever behind writers that keep adding.
            if indexer::count_pending(&mut client, &self.namespace)? == 0 {
                return Ok(moved);
            }
            if started.elapsed() > std::time::Duration::from_secs(60) {
                return Err(MemoryError::Storage {
                    detail: "messages are still waiting for the HNSW index after 60 s: another \
                             process's indexer holds them, or writers keep adding"
                        .into(),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The dimensions a write now stores outside their HNSW index, for the background indexer:
    /// those whose index this store has seen exist.
    fn deferred_dims(&self) -> HashSet<i32> {
        if self.indexer.is_none() {
            return HashSet::new();
        }
        let indexed = self.indexed.lock().unwrap_or_else(PoisonError::into_inner);
        indexed
            .iter()
            .filter_map(|&d| i32::try_from(d).ok())
            .collect()
    }

    /// After a committed write: creates missing indexes, and wakes the indexer when the write
    /// left rows pending.
    fn after_write(&self, dims: &[usize], pending: bool) {
        self.index_dims(dims);
        if pending && let Some(indexer) = &self.indexer {
            indexer.wake();
        }
    }

    /// Makes sure every dimension in `dims` (up to pgvector's HNSW limit) has its index. It
    /// runs after the write committed: a failure only leaves that dimension unindexed (the
    /// next write of it tries again), and is logged rather than failing a stored write.
    fn index_dims(&self, dims: &[usize]) {
        let mut wanted: Vec<usize> = dims
            .iter()
            .copied()
            .filter(|&d| d > 0 && d <= HNSW_MAX_DIM)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        wanted.retain(|d| {
            !self
                .indexed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(d)
        });
        // One attempt per dimension at a time, and none within `INDEX_RETRY` of the last
        // (under way, or failed): each writer of a new dimension used to try, each taking a
        // connection, and each try queues a lock request that every writer waits behind.
        let now = std::time::Instant::now();
        wanted.retain(|d| {
            let mut attempts = self
                .index_attempts
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match attempts.get(d) {
                Some(at) if now.duration_since(*at) < INDEX_RETRY => false,
                _ => {
                    attempts.insert(*d, now);
                    true
                }
            }
        });
        // Not under the `indexed` mutex: creating an index may wait for table locks that
        // writers hold, and writers take the mutex (`deferred_dims`); held here, the two waited
        // on each other for good, out of PostgreSQL's sight (half of the cycle is this mutex).
        for dim in wanted {
            let created = self
                .client()
                .and_then(|mut c| create_hnsw_index(&mut c, dim));
            match created {
                Ok(true) => {
                    self.indexed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(dim);
                    self.index_attempts
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&dim);
                }
                // Another process is building it: a later write of the dimension finds it.
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    target: "mnemon_memory::postgres",
                    database = self.pool.target(),
                    "cannot create the HNSW index of {dim}-dimensional memory embeddings: {e}"
                ),
            }
        }
    }

    fn client(&self) -> Result<pg::PooledClient, MemoryError> {
        self.pool.get().map_err(db_error)
    }

    /// The memory of one thread, creating the thread if needed.
    pub fn memory(self: &Arc<Self>, scope: Scope) -> Result<PostgresMemory, MemoryError> {
        scope.columns()?;
        {
            let mut client = self.client()?;
            let mut tx = client.transaction_cached().map_err(pg_error)?;
            lock_thread(&mut tx, &self.namespace, &scope, &self.factory)?;
            tx.commit().map_err(pg_error)?;
        }
        Ok(self.handle(scope))
    }

    /// The memory of one thread, without reading or creating it yet: the thread is created by
    /// the first write through the memory, inside that write's transaction.
    pub fn memory_created_on_write(
        self: &Arc<Self>,
        scope: Scope,
    ) -> Result<PostgresMemory, MemoryError> {
        scope.columns()?;
        Ok(self.handle(scope))
    }

    /// The memory of one thread if the thread exists in the store's namespace, without
    /// creating it.
    pub fn existing_memory(
        self: &Arc<Self>,
        scope: Scope,
    ) -> Result<Option<PostgresMemory>, MemoryError> {
        let mut client = self.client()?;
        let [user, agent, session] = scope.columns()?;
        // One statement, atomic by itself: no transaction around it, which would cost two
        // round trips more (the service asks this before every read of a session).
        let statement = client.prepare_cached(THREAD_ROW_SQL).map_err(pg_error)?;
        let found = client
            .query_opt(
                &statement,
                &[&self.namespace.as_str(), &user, &agent, &session],
            )
            .map_err(pg_error)?
            .is_some();
        Ok(found.then(|| self.handle(scope)))
    }

    fn handle(self: &Arc<Self>, scope: Scope) -> PostgresMemory {
        PostgresMemory {
            store: Arc::clone(self),
            scope,
            mirror: Mutex::new(Mirror::default()),
        }
    }

    /// Every thread's scope in the store's namespace, oldest first.
    pub fn threads(&self) -> Result<Vec<Scope>, MemoryError> {
        let mut client = self.client()?;
        let rows = client
            .query(
                "SELECT user_id, agent_id, session_id FROM memory_threads WHERE namespace = $1
                 ORDER BY thread_id",
                &[&self.namespace.as_str()],
            )
            .map_err(pg_error)?;
        rows.iter()
            .map(|r| {
                Ok(Scope::from_columns(
                    r.try_get(0).map_err(pg_error)?,
                    r.try_get(1).map_err(pg_error)?,
                    r.try_get(2).map_err(pg_error)?,
                ))
            })
            .collect()
    }

    /// One page of the namespace's threads in creation order (oldest first, as
    /// [`threads`](Self::threads) lists them), each with its summary as
    /// [`thread_summaries`](Self::thread_summaries) gives it; at most `limit`, after the
    /// thread `after` (a previous page's [`ThreadPage::next`]) names, or from the start for
    /// `None`. One index range read per page (schema version 16), whatever the number of
    /// threads. A thread created while pages are read comes last, with one exception: ids are
    /// taken from a sequence before the creating transactions commit, so a thread whose
    /// creation commits after a page listed a later-created one is missed by that walk (the
    /// next listing has it). A malformed `after` is [`MemoryError::InvalidCursor`].
    pub fn threads_page(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<ThreadPage, MemoryError> {
        let after = after.map(decode_created).transpose()?.unwrap_or(0);
        let mut client = self.client()?;
        let rows = client
            .query(
                "SELECT thread_id, user_id, agent_id, session_id,
                   live - (SELECT count(*) FROM memory_messages m
                           WHERE m.thread_id = memory_threads.thread_id AND m.expires_at <= $1),
                   last_active_ms FROM memory_threads
                 WHERE namespace = $2 AND thread_id > $3
                 ORDER BY thread_id LIMIT $4",
                &[
                    &self.now(),
                    &self.namespace.as_str(),
                    &after,
                    &fetch_count(limit),
                ],
            )
            .map_err(pg_error)?;
        let rows = rows
            .iter()
            .map(summary_row)
            .collect::<Result<Vec<_>, MemoryError>>()?;
        Ok(created_page(rows, limit))
    }

    /// One page of the namespace's threads with their message counts and last activity,
    /// the most recently written first (ties: the newest-created first); at most `limit`,
    /// after the thread that `after` (a previous page's [`ThreadPage::next`]) points at, or
    /// from the start for `None`. Both numbers are kept in the thread's row by every write
    /// (`live`, schema version 3; `last_active_ms`, version 5), so a page is one index range
    /// read, never a count or a scan of the messages. A thread written while pages are being
    /// read moves to the front, so the pages that follow do not list it again (or at all, if
    /// it had not been listed yet). See docs/reference/memory.md#thread-summaries.
    ///
    /// A malformed `after` is [`MemoryError::InvalidCursor`].
    pub fn thread_summaries(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<ThreadPage, MemoryError> {
        let after = after.map(Cursor::decode).transpose()?;
        let mut client = self.client()?;
        let namespace = self.namespace.as_str();
        let count = fetch_count(limit);
        // A thread's count leaves out its expired messages not yet removed (`$1`: the clock's
        // now): a probe of the partial expiry index, empty for a thread whose messages never
        // expire.
        const COLUMNS: &str = "SELECT thread_id, user_id, agent_id, session_id,
                live - (SELECT count(*) FROM memory_messages m
                        WHERE m.thread_id = memory_threads.thread_id AND m.expires_at <= $1),
                last_active_ms FROM memory_threads";
        let now = self.now();
        let rows = match after {
            Some(cursor) => client.query(
                &format!(
                    "{COLUMNS} WHERE namespace = $2 AND (last_active_ms, thread_id) < ($3, $4)
                     ORDER BY last_active_ms DESC, thread_id DESC LIMIT $5"
                ),
                &[
                    &now,
                    &namespace,
                    &cursor.last_active_ms,
                    &cursor.thread_id,
                    &count,
                ],
            ),
            None => client.query(
                &format!(
                    "{COLUMNS} WHERE namespace = $2
                     ORDER BY last_active_ms DESC, thread_id DESC LIMIT $3"
                ),
                &[&now, &namespace, &count],
            ),
        }
        .map_err(pg_error)?;
        let rows = rows
            .iter()
            .map(summary_row)
            .collect::<Result<Vec<_>, MemoryError>>()?;
        Ok(page(rows, limit))
    }

    /// Deletes a thread of the store's namespace with its messages and marks; returns whether
    /// it existed. The thread is locked first, as every writer locks it
    /// (docs/postgres.md#no-foreign-key-per-message).
    pub fn drop_thread(&self, scope: &Scope) -> Result<bool, MemoryError> {
        let [user, agent, session] = scope.columns()?;
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(pg_error)?;
        let ids: Vec<i64> = tx
            .query(
                "SELECT thread_id FROM memory_threads
                 WHERE namespace = $1 AND user_id = $2 AND agent_id = $3 AND session_id = $4
                 FOR UPDATE",
                &[&self.namespace.as_str(), &user, &agent, &session],
            )
            .map_err(pg_error)?
            .iter()
            .map(|r| r.try_get(0).map_err(pg_error))
            .collect::<Result<_, _>>()?;
        delete_threads(&mut tx, &ids)?;
        tx.commit().map_err(pg_error)?;
        Ok(!ids.is_empty())
    }

    /// In exact mode, refuses to write once another process has given the database pgvector's
    /// column (after this store opened, when it had none): this store's writes leave the
    /// column and its counts alone, so a message it added would be missing from recalls through
    /// the index, and an embedding it replaced would be recalled in its old form. A catalog
    /// lookup per write transaction, in exact mode only.
    fn exact_mode_still_holds(&self, tx: &mut Transaction<'_>) -> Result<(), MemoryError> {
        if !matches!(self.vector, VectorMode::Exact { .. }) {
            return Ok(());
        }
        let appeared: bool = tx
            // The column, as `open` judges the mode by it (`vector_column_exists`): a
            // database whose extension was dropped keeps the version table, not the column.
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = to_regclass('memory_messages') AND attname = 'embedding_v'
                     AND NOT attisdropped)",
                &[],
            )
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        if appeared {
            return Err(MemoryError::Storage {
                detail: "another process turned on pgvector's embedding column in this \
                         database after this memory store opened without it: restart this \
                         process (it then keeps the column and its counts); until then its \
                         memory writes are refused"
                    .into(),
            });
        }
        Ok(())
    }

    /// The store clock's time: what decides which messages have expired.
    fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// Removes every expired message of the store's namespace (docs/reference/memory.md#expiry)
    /// and returns how many. They were already invisible to every read; this reclaims their
    /// rows (marks, index entries and counters included). One transaction; only the threads
    /// whose `next_expiry` has passed are visited (an index range), each locked as a writer
    /// locks it and cleared of its expired rows by the statements of a delete.
    pub fn gc(&self) -> Result<u64, MemoryError> {
        let now = self.now();
        let vectors = matches!(self.vector, VectorMode::Pgvector { .. });
        let mut client = self.client()?;
        let mut tx = client.transaction_cached().map_err(pg_error)?;
        self.exact_mode_still_holds(&mut tx)?;
        let rows = tx
            .query(
                "SELECT thread_id, rev, next_seq, next_expiry FROM memory_threads
                 WHERE namespace = $1 AND next_expiry <= $2
                 ORDER BY thread_id FOR UPDATE",
                &[&self.namespace.as_str(), &now],
            )
            .map_err(pg_error)?;
        let mut removed = 0;
        for row in &rows {
            let thread = LockedThread {
                id: row.try_get(0).map_err(pg_error)?,
                rev: row.try_get(1).map_err(pg_error)?,
                next_seq: row.try_get(2).map_err(pg_error)?,
                next_expiry: row.try_get(3).map_err(pg_error)?,
            };
            removed += purge_expired(&mut tx, thread, now, vectors)?;
        }
        tx.commit().map_err(pg_error)?;
        Ok(removed)
    }

    /// Re-embeds with `embedder` every live message of the threads `within` selects whose
    /// embedding was not made by `embedder`'s model (none, another model, or one of unknown
    /// origin), `batch` messages at a time, each batch embedded outside any transaction and
    /// stored in one that records the model and keeps the vector column, its HNSW index and
    /// the dimension counts in step (docs/reference/memory.md#embedding-models).
    /// `progress(done, total)` follows every stored batch; `total` is counted at the start.
    /// Returns how many messages were re-embedded. Resumable: a run cut short (a kill, an
    /// embedder error, which is returned) keeps its stored batches, and the next run picks only
    /// the messages still without the model.
    pub fn reembed(
        self: &Arc<Self>,
        within: &ScopeFilter,
        embedder: &dyn mnemon_types::Embedder,
        batch: usize,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<u64, MemoryError> {
        let [user, agent, session] = within.columns()?;
        let model = embedder.model();
        let now = self.now();
        let rows = {
            let mut client = self.client()?;
            client
                .query(
                    "SELECT t.user_id, t.agent_id, t.session_id,
                       (SELECT count(*) FROM memory_messages m
                        WHERE m.thread_id = t.thread_id
                          AND m.embedding_model IS DISTINCT FROM $5
                          AND (m.expires_at IS NULL OR m.expires_at > $6))
                     FROM memory_threads t
                     WHERE t.namespace = $1 AND ($2::text IS NULL OR t.user_id = $2)
                       AND ($3::text IS NULL OR t.agent_id = $3)
                       AND ($4::text IS NULL OR t.session_id = $4)
                     ORDER BY t.user_id, t.agent_id, t.session_id",
                    &[
                        &self.namespace.as_str(),
                        &user,
                        &agent,
                        &session,
                        &model,
                        &now,
                    ],
                )
                .map_err(pg_error)?
        };
        let mut scopes = Vec::with_capacity(rows.len());
        let mut total = 0u64;
        for row in &rows {
            scopes.push(Scope::from_columns(
                row.try_get(0).map_err(pg_error)?,
                row.try_get(1).map_err(pg_error)?,
                row.try_get(2).map_err(pg_error)?,
            ));
            total += u64::try_from(row.try_get::<_, i64>(3).map_err(pg_error)?).unwrap_or(0);
        }
        let mut done = 0u64;
        for scope in scopes {
            let Some(memory) = self.existing_memory(scope)? else {
                continue;
            };
            crate::ops::reembed_thread(&memory, embedder, batch, &mut |n| {
                done += n;
                progress(done, total);
            })?;
        }
        Ok(done)
    }

    /// Forgets a subject (docs/reference/memory.md#forget): deletes every thread of the store's
    /// namespace that `within` selects ([`ScopeFilter::all`]: the whole namespace, never
    /// another), with all their messages, marks, gaps, dimension counts and index entries, in
    /// one transaction; returns the counts. The threads are locked first (`FOR UPDATE`, as
    /// every writer of a thread does), so no write slips in between the count and the deletes;
    /// the deletes are set-based (one statement per table over the locked thread ids), so
    /// 100,000 messages go in seconds. A handle already open on a forgotten thread finds the
    /// thread gone at its next call and reads an empty memory.
    pub fn forget(&self, within: &ScopeFilter) -> Result<Forgotten, MemoryError> {
        let [user, agent, session] = within.columns()?;
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(pg_error)?;
        let ids: Vec<i64> = tx
            .query(
                "SELECT thread_id FROM memory_threads
                 WHERE namespace = $1 AND ($2::text IS NULL OR user_id = $2)
                   AND ($3::text IS NULL OR agent_id = $3)
                   AND ($4::text IS NULL OR session_id = $4)
                 ORDER BY thread_id FOR UPDATE",
                &[&self.namespace.as_str(), &user, &agent, &session],
            )
            .map_err(pg_error)?
            .iter()
            .map(|r| r.try_get(0).map_err(pg_error))
            .collect::<Result<_, _>>()?;
        if ids.is_empty() {
            tx.commit().map_err(pg_error)?;
            return Ok(Forgotten::default());
        }
        let messages: i64 = tx
            .query_one(
                "SELECT count(*) FROM memory_messages WHERE thread_id = ANY($1)",
                &[&ids],
            )
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        delete_threads(&mut tx, &ids)?;
        tx.commit().map_err(pg_error)?;
        Ok(Forgotten {
            threads: u64::try_from(ids.len()).unwrap_or(u64::MAX),
            messages: u64::try_from(messages).unwrap_or(0),
        })
    }
}

fn vector_column_exists(pool: &Pool) -> Result<bool, MemoryError> {
    let mut client = pool.get().map_err(db_error)?;
    let row = client
        .query_opt(
            "SELECT 1 FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = 'memory_messages'
               AND column_name = 'embedding_v'",
            &[],
        )
        .map_err(pg_error)?;
    Ok(row.is_some())
}

/// The memory error for a setup or connection failure: a newer schema keeps its own variant;
/// the others keep `mnemon-db`'s message, which says what to fix.
fn db_error(error: DbError) -> MemoryError {
    match error {
        DbError::PgSchemaTooNew {
            found, supported, ..
        } => MemoryError::SchemaVersion { found, supported },
        other => MemoryError::Storage {
            detail: other.to_string(),
        },
    }
}

/// A statement's error, classified by `mnemon-db` (server gone, query error with its code).
fn pg_error(error: postgres::Error) -> MemoryError {
    db_error(pg::error(
        &error,
        "the memory database",
        "running a memory statement",
    ))
}

fn corrupt(detail: String) -> MemoryError {
    MemoryError::Storage {
        detail: format!("corrupt memory row: {detail}"),
    }
}

/// The statement of [`thread_row`]: `$1` the namespace, `$2`–`$4` the scope's columns.
const THREAD_ROW_SQL: &str = "SELECT thread_id, rev FROM memory_threads
     WHERE namespace = $1 AND user_id = $2 AND agent_id = $3 AND session_id = $4";

/// The thread's `(thread_id, rev)` in `namespace`, without locking it. Prepared once per
/// connection: every read of a handle starts here.
fn thread_row(
    tx: &mut CachedTransaction<'_>,
    namespace: &Namespace,
    scope: &Scope,
) -> Result<Option<(i64, i64)>, MemoryError> {
    let [user, agent, session] = scope.columns()?;
    let statement = tx.prepare_cached(THREAD_ROW_SQL).map_err(pg_error)?;
    let row = tx
        .query_opt(&statement, &[&namespace.as_str(), &user, &agent, &session])
        .map_err(pg_error)?;
    row.map(|r| {
        Ok((
            r.try_get(0).map_err(pg_error)?,
            r.try_get(1).map_err(pg_error)?,
        ))
    })
    .transpose()
}

/// Deletes the threads `ids`, which the transaction holds locked (`FOR UPDATE`), with
/// everything of theirs. Their messages are deleted here, not by a cascade: no foreign key ties
/// a message to its thread (schema version 13), and this delete is what keeps every message's
/// thread in existence. Children first, set-based, so that the cascades left from messages
/// (marks) and from threads (gaps) find nothing to do row by row; `memory_dims`, which exists
/// only with pgvector, is left to its cascade from the threads (a row per dimension in use).
fn delete_threads(tx: &mut Transaction<'_>, ids: &[i64]) -> Result<(), MemoryError> {
    if ids.is_empty() {
        return Ok(());
    }
    for sql in [
        "DELETE FROM memory_marks WHERE thread_id = ANY($1)",
        "DELETE FROM memory_messages WHERE thread_id = ANY($1)",
        "DELETE FROM memory_gaps WHERE thread_id = ANY($1)",
        "DELETE FROM memory_threads WHERE thread_id = ANY($1)",
    ] {
        tx.execute(sql, &[&ids]).map_err(pg_error)?;
    }
    Ok(())
}

/// A thread's row as a write sees it, locked.
#[derive(Debug, Clone, Copy)]
struct LockedThread {
    id: i64,
    rev: i64,
    /// The `seq` the next appended message gets (schema version 3).
    next_seq: i64,
    /// At most the earliest `expires_at` of its messages (schema version 6).
    next_expiry: Option<i64>,
}

/// The thread's row in `namespace`, created (with `factory`'s clock) when missing, and locked
/// until the transaction ends: the writers of one thread take turns here.
fn lock_thread(
    tx: &mut CachedTransaction<'_>,
    namespace: &Namespace,
    scope: &Scope,
    factory: &MsgFactory,
) -> Result<LockedThread, MemoryError> {
    let [user, agent, session] = scope.columns()?;
    const SELECT: &str = "SELECT thread_id, rev, next_seq, next_expiry FROM memory_threads
                  WHERE namespace = $1 AND user_id = $2 AND agent_id = $3 AND session_id = $4
                  FOR UPDATE";
    let params: [&(dyn postgres::types::ToSql + Sync); 4] =
        [&namespace.as_str(), &user, &agent, &session];
    // Prepared once per connection: every write starts here.
    let select = tx.prepare_cached(SELECT).map_err(pg_error)?;
    // Two processes may create it at once: the loser's insert does nothing, and its select
    // then waits for the winner's commit. A delete of the thread can commit between that
    // insert and the select, which then finds nothing: the next round creates it again.
    // Each round selects, then inserts; the round after the last insert only selects.
    for round in 0..=LOCK_THREAD_ROUNDS {
        if let Some(row) = tx.query_opt(&select, &params).map_err(pg_error)? {
            return Ok(LockedThread {
                id: row.try_get(0).map_err(pg_error)?,
                rev: row.try_get(1).map_err(pg_error)?,
                next_seq: row.try_get(2).map_err(pg_error)?,
                next_expiry: row.try_get(3).map_err(pg_error)?,
            });
        }
        if round == LOCK_THREAD_ROUNDS {
            break;
        }
        let insert = tx
            .prepare_cached(
                // A new thread's creation is its first activity.
                concat!(
                    "INSERT INTO memory_threads
                       (namespace, user_id, agent_id, session_id, created_at, last_active_ms)
                     VALUES ($1, $2, $3, $4, $5, ",
                    now_ms_sql!(),
                    ") ON CONFLICT (namespace, user_id, agent_id, session_id) DO NOTHING"
                ),
            )
            .map_err(pg_error)?;
        tx.execute(
            &insert,
            &[&namespace.as_str(), &user, &agent, &session, &factory.now()],
        )
        .map_err(pg_error)?;
    }
    Err(MemoryError::Storage {
        detail: format!(
            "session {scope:?} was deleted {LOCK_THREAD_ROUNDS} times while this write was \
             creating it; retry the write"
        ),
    })
}

/// How many times [`lock_thread`] looks for, or creates, a thread that concurrent deletes keep
/// removing before it gives up.
const LOCK_THREAD_ROUNDS: usize = 8;

/// Empties a locked thread: its messages (their marks cascade), gaps and dimension counts, and
/// restarts its seqs at 1 (no message is left to be confused with a reused seq).
fn clear_thread(
    tx: &mut CachedTransaction<'_>,
    thread_id: i64,
    vectors: bool,
) -> Result<(), MemoryError> {
    let mut statements = vec![
        "DELETE FROM memory_messages WHERE thread_id = $1",
        "DELETE FROM memory_gaps WHERE thread_id = $1",
    ];
    if vectors {
        statements.push("DELETE FROM memory_dims WHERE thread_id = $1");
    }
    // Seqs start again from 1: the pending watermark (schema version 12) too.
    statements.push(
        "UPDATE memory_threads SET next_seq = 1, live = 0, pending_from = 0,
           pending_epoch = pending_epoch + 1
         WHERE thread_id = $1",
    );
    for sql in statements {
        let statement = tx.prepare_cached(sql).map_err(pg_error)?;
        tx.execute(&statement, &[&thread_id]).map_err(pg_error)?;
    }
    Ok(())
}

/// Moves the thread's counts of messages per dimension (`memory_dims`) by the messages `added`
/// and `removed` (one entry per message, `None` for one without an indexable embedding), in one
/// statement at most.
fn count_dims(
    tx: &mut CachedTransaction<'_>,
    thread_id: i64,
    added: &[Option<i32>],
    removed: &[Option<i32>],
) -> Result<(), MemoryError> {
    let (keys, values) = dim_counts(added, removed);
    if keys.is_empty() {
        return Ok(());
    }
    let statement = tx
        .prepare_cached(
            "INSERT INTO memory_dims (thread_id, dim, n)
             SELECT $1, d, n FROM UNNEST($2::integer[], $3::bigint[]) AS t(d, n)
             ON CONFLICT (thread_id, dim) DO UPDATE SET n = memory_dims.n + excluded.n",
        )
        .map_err(pg_error)?;
    tx.execute(&statement, &[&thread_id, &keys, &values])
        .map_err(pg_error)?;
    Ok(())
}

/// How the counts of `memory_dims` move for the messages `added` and `removed` (one entry per
/// message, `None` for one without an indexable embedding): the dimensions and their changes,
/// none zero.
fn dim_counts(added: &[Option<i32>], removed: &[Option<i32>]) -> (Vec<i32>, Vec<i64>) {
    let mut counts: HashMap<i32, i64> = HashMap::new();
    for d in added.iter().flatten() {
        *counts.entry(*d).or_default() += 1;
    }
    for d in removed.iter().flatten() {
        *counts.entry(*d).or_default() -= 1;
    }
    counts.retain(|_, n| *n != 0);
    counts.into_iter().unzip()
}

/// The in-memory copy of a thread's live messages, valid for `(thread_id, rev)` until the
/// earliest expiry among them.
#[derive(Debug, Default)]
struct Mirror {
    thread_id: Option<i64>,
    rev: i64,
    state: ThreadState,
    /// The earliest `expires_at` of the mirrored messages: from then on the mirror holds an
    /// expired message and must be reloaded (no write moves `rev` when time passes).
    earliest: Option<i64>,
}

impl Mirror {
    /// Whether the mirror holds the committed thread `(thread_id, rev)` as it reads at `now`.
    fn current(&self, thread_id: i64, rev: i64, now: i64) -> bool {
        self.thread_id == Some(thread_id)
            && self.rev == rev
            && mnemon_db::expiry::is_live(self.earliest, now)
    }

    /// Whether the mirror can answer a read whose snapshot saw the thread at `(thread_id,
    /// rev)`: it holds that rev or a later one (every write bumps `rev`, so a later rev is a
    /// thread committed after the snapshot was taken, which a read may return). A read that
    /// took its snapshot just before this handle's own add committed finds the mirror one rev
    /// ahead; taking it as stale made that read load the whole thread back to the older rev,
    /// and the next add load it again (docs/postgres.md#mirrors-under-concurrency).
    fn holds(&self, thread_id: i64, rev: i64, now: i64) -> bool {
        self.thread_id == Some(thread_id)
            && self.rev >= rev
            && mnemon_db::expiry::is_live(self.earliest, now)
    }

    /// Brings the mirror up to date with the committed thread at `now`.
    fn sync(
        &mut self,
        tx: &mut CachedTransaction<'_>,
        thread: Option<(i64, i64)>,
        factory: &MsgFactory,
        vectors: bool,
        now: i64,
    ) -> Result<(), MemoryError> {
        match thread {
            None => {
                if self.thread_id.is_some() || self.state.len() > 0 {
                    *self = Mirror::default();
                }
            }
            Some((id, rev)) => {
                if !self.holds(id, rev, now) {
                    self.state = load_thread(tx, id, factory, vectors, now)?;
                    self.earliest = earliest_of(self.state.entries());
                    self.thread_id = Some(id);
                    self.rev = rev;
                }
            }
        }
        Ok(())
    }
}

/// The earliest expiry of `entries`, for a mirror holding them.
fn earliest_of<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Option<i64> {
    entries.into_iter().filter_map(|e| e.expires_at).min()
}

/// A message row (alias `m`) is visible at `now` (bound as `$N`): the one rule of
/// `mnemon_db::expiry`, an expired row being one with `expires_at <= now`.
macro_rules! live_sql {
    ($param:literal) => {
        concat!(
            "(m.expires_at IS NULL OR m.expires_at > ",
            $param,
            "::bigint)"
        )
    };
}

/// The first model other than `$2` among the stored embeddings of thread `$1`'s messages live
/// at `$3` (the store clock's now), if any: two ranges of [`SCHEMA_V8`]'s index. An expired
/// message not yet removed is invisible to every read, so its embedding's model must not refuse
/// a recall either; the index finds the rows of other models and only those are checked for
/// expiry.
pub(crate) const OTHER_MODEL_SQL: &str = concat!(
    "SELECT m.embedding_model FROM memory_messages m
 WHERE m.thread_id = $1 AND m.embedding_model IS NOT NULL
   AND (m.embedding_model < $2 OR m.embedding_model > $2) AND ",
    live_sql!("$3"),
    " LIMIT 1"
);

/// Every mark of the thread, per message, in the order given.
fn thread_marks(
    tx: &mut CachedTransaction<'_>,
    thread_id: i64,
) -> Result<HashMap<String, Vec<String>>, MemoryError> {
    let statement = tx
        .prepare_cached(
            "SELECT msg_id, mark FROM memory_marks WHERE thread_id = $1 ORDER BY msg_id, pos",
        )
        .map_err(pg_error)?;
    let rows = tx.query(&statement, &[&thread_id]).map_err(pg_error)?;
    let mut marks: HashMap<String, Vec<String>> = HashMap::new();
    for row in rows {
        marks
            .entry(row.try_get(0).map_err(pg_error)?)
            .or_default()
            .push(row.try_get(1).map_err(pg_error)?);
    }
    Ok(marks)
}

/// The thread's messages live at `now`, with their marks and expiries.
fn load_thread(
    tx: &mut CachedTransaction<'_>,
    thread_id: i64,
    factory: &MsgFactory,
    vectors: bool,
    now: i64,
) -> Result<ThreadState, MemoryError> {
    let mut marks = thread_marks(tx, thread_id)?;
    let statement = tx
        .prepare_cached(live_rows_sql(vectors))
        .map_err(pg_error)?;
    let rows = tx
        .query(&statement, &[&thread_id, &now])
        .map_err(pg_error)?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let id: &str = row.try_get(0).map_err(pg_error)?;
        let marks = marks.remove(id).unwrap_or_default();
        let expires_at: Option<i64> = row.try_get(6).map_err(pg_error)?;
        let model: Option<String> = row.try_get(7).map_err(pg_error)?;
        entries.push(
            row_entry(factory, row, entries.len(), marks)?
                .expiring(expires_at)
                .embedded_by(model),
        );
    }
    Ok(ThreadState::from_entries(entries))
}

/// The thread's messages live at `now`, in order, with their expiries and embedding models
/// (`$1` the thread, `$2` the clock's now): the statement of [`load_thread`] and of the portal
/// of a scan (its text depends on the vector column).
fn live_rows_sql(vectors: bool) -> &'static str {
    interned(format!(
        "SELECT {}, m.expires_at, m.embedding_model FROM memory_messages m
         WHERE m.thread_id = $1 AND {} ORDER BY m.seq",
        message_columns(vectors),
        live_sql!("$2")
    ))
}

/// The columns of a message row (table alias `m`) that [`row_entry`] reads, in its order: the
/// id, kind and body, and the embedding's form with its `f32`s (schema version 4), which are
/// read only when the body does not hold the numbers.
fn message_columns(vectors: bool) -> &'static str {
    if vectors {
        "m.msg_id, m.kind, m.body, m.embedding_form,
         CASE WHEN m.embedding_form = 0 THEN NULL ELSE m.embedding_v END,
         CASE WHEN m.embedding_form = 0 THEN NULL ELSE m.embedding END"
    } else {
        "m.msg_id, m.kind, m.body, m.embedding_form, NULL::bytea,
         CASE WHEN m.embedding_form = 0 THEN NULL ELSE m.embedding END"
    }
}

/// The entry of a row of [`message_columns`] (later columns are ignored), with `marks`; `p` is
/// its position in the result, for error messages.
fn row_entry(
    factory: &MsgFactory,
    row: &Row,
    p: usize,
    marks: Vec<String>,
) -> Result<Entry, MemoryError> {
    row_entry_given(factory, row, p, marks, None)
}

/// [`row_entry`], with the embedding's `f32`s already read by an earlier statement of the same
/// snapshot (`given`): the row's own vector columns are then not looked at, so a statement that
/// left them out (`message_columns(false)` reads `NULL` for the pgvector column) still makes the
/// whole entry.
fn row_entry_given(
    factory: &MsgFactory,
    row: &Row,
    p: usize,
    marks: Vec<String>,
    given: Option<Vec<f32>>,
) -> Result<Entry, MemoryError> {
    let id: &str = row.try_get(0).map_err(pg_error)?;
    let kind: &str = row.try_get(1).map_err(pg_error)?;
    let body: &str = row.try_get(2).map_err(pg_error)?;
    let form: i16 = row.try_get(3).map_err(pg_error)?;
    let value: Value =
        serde_json::from_str(body).map_err(|e| corrupt(format!("message {id}: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| corrupt(format!("message {id} is not an object")))?;
    let msg = factory
        .from_object(object, MsgKind::from_marker(kind).unwrap_or_default(), p)
        .map_err(|e| corrupt(format!("message {id}: {e}")))?;
    if form == FORM_IN_BODY {
        return Ok(Entry::new(msg, marks));
    }
    let floats = match given {
        Some(given) => Some(given),
        None => match row
            .try_get::<_, Option<StoredFloats>>(4)
            .map_err(pg_error)?
        {
            Some(v) => Some(v.0),
            None => row
                .try_get::<_, Option<StoredFloats>>(5)
                .map_err(pg_error)?
                .map(|v| v.0),
        },
    };
    let numbers = floats.and_then(|f| join_numbers(form, &f)).ok_or_else(|| {
        corrupt(format!(
            "message {id}: embedding form {form} without its numbers (a store that opened in \
             exact mode reads no pgvector column: if another process has added one since, \
             restart this one)"
        ))
    })?;
    Entry::from_parts(msg, numbers, marks)
        .ok_or_else(|| corrupt(format!("message {id}: no placeholder for its embedding")))
}

/// Stored `f32`s read back: a pgvector `vector` in its binary form (`vector_send`: the
/// dimension and a zero as big-endian `i16`s, then big-endian `f32`s) or the `embedding`
/// bytes (little-endian `f32`s).
#[derive(Debug, Clone, PartialEq)]
struct StoredFloats(Vec<f32>);

impl<'a> postgres::types::FromSql<'a> for StoredFloats {
    fn from_sql(
        ty: &postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        if *ty == postgres::types::Type::BYTEA {
            if !raw.len().is_multiple_of(4) {
                return Err(format!("{} embedding bytes are not f32s", raw.len()).into());
            }
            return Ok(StoredFloats(
                raw.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ));
        }
        let (head, rest) = raw
            .split_at_checked(4)
            .ok_or("a vector shorter than its header")?;
        let dim = usize::from(u16::from_be_bytes([head[0], head[1]]));
        if rest.len() != dim * 4 {
            return Err(format!("a vector of {dim} dimensions in {} bytes", rest.len()).into());
        }
        Ok(StoredFloats(
            rest.chunks_exact(4)
                .map(|c| f32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::BYTEA || ty.name() == "vector"
    }
}

/// The last `n` messages of the thread passing the mark filters, in index order, reading only
/// those rows.
fn recent_rows(
    tx: &mut CachedTransaction<'_>,
    thread_id: i64,
    factory: &MsgFactory,
    (mark, exclude_mark): (Option<&str>, Option<&str>),
    n: usize,
    vectors: bool,
    now: i64,
) -> Result<Vec<Msg>, MemoryError> {
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    // Prepared once per connection (see `interned`).
    let statement = tx
        .prepare_cached(interned(format!(
            "SELECT {} FROM memory_messages m
             WHERE m.thread_id = $1 AND {}
               AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM memory_marks k
                    WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id AND k.mark = $2))
               AND ($3::text IS NULL OR NOT EXISTS (SELECT 1 FROM memory_marks k
                    WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id AND k.mark = $3))
             ORDER BY m.seq DESC LIMIT $4",
            message_columns(vectors),
            live_sql!("$5")
        )))
        .map_err(pg_error)?;
    let rows = tx
        .query(
            &statement,
            &[&thread_id, &mark, &exclude_mark, &limit, &now],
        )
        .map_err(pg_error)?;
    let mut messages = Vec::with_capacity(rows.len());
    for row in &rows {
        messages.push(row_entry(factory, row, messages.len(), Vec::new())?.message());
    }
    messages.reverse();
    Ok(messages)
}

fn embedding_bytes(embedding: Option<&[f32]>) -> Option<Vec<u8>> {
    embedding.map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// The `embedding_dim` of a row: the dimension when the HNSW indexes can hold its vector
/// (`representable`: a `vector` can hold it, see [`PgVector::new`], and its norm is not zero:
/// cosine distance to a zero vector is undefined), `None` otherwise.
fn indexable_dim(embedding: Option<&[f32]>, representable: bool) -> Option<i32> {
    let v = embedding?;
    if !representable {
        return None;
    }
    (exact::norm(v) > 0.0)
        .then(|| i32::try_from(v.len()).ok())
        .flatten()
}

/// A `seq` as the tie-break key of `rank` (seqs order messages as their indices do).
fn seq_key(seq: i64) -> usize {
    usize::try_from(seq).unwrap_or(usize::MAX)
}

/// An embedding in pgvector's binary form (`vector_recv`: the dimension and a zero as
/// big-endian `i16`s, then each component as a big-endian `f32`), bound as a `vector`
/// parameter. Sent this way, a 1,536-dimensional vector is 6 KiB that the server copies, instead
/// of about 18 KiB of text that the client formats and the server parses float by float.
#[derive(Debug, Clone, PartialEq)]
struct PgVector(Vec<u8>);

impl PgVector {
    /// The binary form of what a `vector` can hold (finite components, 1 to 16,000 of
    /// them), `None` otherwise.
    fn new(embedding: Option<&[f32]>) -> Option<PgVector> {
        let v = embedding?;
        if v.is_empty() || v.len() > 16_000 || v.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let dim = i16::try_from(v.len()).ok()?;
        let mut bytes = Vec::with_capacity(4 + 4 * v.len());
        bytes.extend_from_slice(&dim.to_be_bytes());
        bytes.extend_from_slice(&0_i16.to_be_bytes());
        for x in v {
            bytes.extend_from_slice(&x.to_be_bytes());
        }
        Some(PgVector(bytes))
    }
}

impl postgres::types::ToSql for PgVector {
    fn to_sql(
        &self,
        _ty: &postgres::types::Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(postgres::types::IsNull::No)
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        ty.name() == "vector"
    }

    postgres::types::to_sql_checked!();
}

/// The stored columns of one message row (schema version 4): its embedding is stored once, in
/// the `vector` column when the store has one and it can hold the embedding, else as the
/// `embedding` bytes.
struct RowValues {
    body: String,
    /// The text keyword search indexes (see [`StoredMessage`]).
    text: Option<String>,
    form: i16,
    bytes: Option<Vec<u8>>,
    vector: Option<PgVector>,
    /// The dimension the row is indexable at (see [`indexable_dim`]), what `memory_dims`
    /// counts; `None` without the vector column.
    dim: Option<i32>,
    /// Whether `dim` is deferred to the background indexer: then the row's `pending_dim` is
    /// set instead of its `embedding_dim` (vector schema version 3).
    pending: bool,
}

impl RowValues {
    /// The row's columns; `deferred`: the dimensions written outside their index.
    fn of(stored: StoredMessage, vectors: bool, deferred: &HashSet<i32>) -> RowValues {
        let embedding = stored.embedding.as_deref();
        let vector = if vectors {
            PgVector::new(embedding)
        } else {
            None
        };
        let dim = if vectors {
            indexable_dim(embedding, vector.is_some())
        } else {
            None
        };
        RowValues {
            bytes: match vector {
                Some(_) => None,
                None => embedding_bytes(embedding),
            },
            body: stored.body,
            text: stored.text,
            form: stored.form,
            vector,
            pending: dim.is_some_and(|d| deferred.contains(&d)),
            dim,
        }
    }

    /// The row's `embedding_dim` (in the index) and `pending_dim` (waiting for it).
    fn index_columns(&self) -> (Option<i32>, Option<i32>) {
        if self.pending {
            (None, self.dim)
        } else {
            (self.dim, None)
        }
    }
}

/// The rows of one batch insert, column by column (the `UNNEST` arrays).
#[derive(Default)]
struct Batch {
    seqs: Vec<i64>,
    ids: Vec<String>,
    kinds: Vec<&'static str>,
    bodies: Vec<String>,
    /// Each row's keyword text, for `search_tsv` (schema version 11).
    texts: Vec<Option<String>>,
    forms: Vec<i16>,
    embeddings: Vec<Option<Vec<u8>>>,
    vectors: Vec<Option<PgVector>>,
    /// Each row's indexable dimension, for `memory_dims`.
    vector_dims: Vec<Option<i32>>,
    /// Each row's `embedding_dim` and `pending_dim` columns.
    indexed_dims: Vec<Option<i32>>,
    pending_dims: Vec<Option<i32>>,
    /// The dimensions written outside their index (see [`RowValues::of`]).
    deferred: HashSet<i32>,
    dims: Vec<usize>,
    mark_ids: Vec<String>,
    mark_pos: Vec<i64>,
    marks: Vec<String>,
    /// Each row's `expires_at` (schema version 6).
    expires: Vec<Option<i64>>,
    /// Each row's `embedding_model` (schema version 8).
    models: Vec<Option<String>>,
}

impl Batch {
    fn push(&mut self, seq: i64, entry: &Entry, vectors: bool) -> Result<(), MemoryError> {
        self.push_row(
            seq,
            entry.id(),
            entry.msg_without_embedding().kind(),
            StoredMessage::of(entry)?,
            vectors,
        );
        self.expires.push(entry.expires_at);
        self.models.push(entry.embedding_model.clone());
        self.push_marks(entry.id(), &entry.marks);
        Ok(())
    }

    /// One row; its embedding is stored once (schema version 4): in the `vector` column when
    /// there is one and it can hold the embedding, else as the `embedding` bytes.
    fn push_row(
        &mut self,
        seq: i64,
        id: &str,
        kind: MsgKind,
        stored: StoredMessage,
        vectors: bool,
    ) {
        let row = RowValues::of(stored, vectors, &self.deferred);
        let (indexed, pending) = row.index_columns();
        self.seqs.push(seq);
        self.ids.push(id.to_owned());
        self.kinds.push(kind.as_str());
        self.bodies.push(row.body);
        self.texts.push(row.text);
        self.forms.push(row.form);
        self.embeddings.push(row.bytes);
        if vectors {
            if let Some(d) = row.dim.and_then(|d| usize::try_from(d).ok()) {
                self.dims.push(d);
            }
            self.vector_dims.push(row.dim);
            self.indexed_dims.push(indexed);
            self.pending_dims.push(pending);
            self.vectors.push(row.vector);
        }
    }

    fn push_marks(&mut self, id: &str, marks: &[String]) {
        for (pos, mark) in (0_i64..).zip(marks) {
            self.mark_ids.push(id.to_owned());
            self.mark_pos.push(pos);
            self.marks.push(mark.clone());
        }
    }

    /// Appends the rows to the locked thread, with their dimension counts (`memory_dims`), the
    /// thread's `live` (moved by `added`), `next_seq` and a new rev, in one statement: a
    /// durable put is then four round trips and the commit. Marks follow in one more.
    fn append(
        &self,
        tx: &mut CachedTransaction<'_>,
        thread_id: i64,
        vectors: bool,
        added: i64,
        next_seq: i64,
    ) -> Result<(), MemoryError> {
        // The thread's `next_expiry` is lowered to the batch's earliest (LEAST skips NULLs).
        let earliest = self.expires.iter().flatten().min().copied();
        if vectors {
            let (keys, values) = dim_counts(&self.vector_dims, &[]);
            let statement = tx
                .prepare_cached(concat!(
                    "WITH ins AS (
                       INSERT INTO memory_messages (thread_id, seq, msg_id, kind, body,
                         embedding, embedding_v, embedding_dim, embedding_form, pending_dim,
                         expires_at, embedding_model, search_tsv)
                       SELECT $1, s, i, k, b, e, v, d, f, p, x, o, ",
                    search_tsv_sql!("w", "b"),
                    "
                       FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::text[],
                                   $6::bytea[], $7::vector[], $8::integer[], $9::smallint[],
                                   $10::integer[], $15::bigint[], $17::text[], $18::text[])
                         AS t(s, i, k, b, e, v, d, f, p, x, o, w)),
                     dims AS (
                       INSERT INTO memory_dims (thread_id, dim, n)
                       SELECT $1, d, n FROM UNNEST($11::integer[], $12::bigint[]) AS t(d, n)
                       ON CONFLICT (thread_id, dim) DO UPDATE SET n = memory_dims.n + excluded.n)
                     UPDATE memory_threads SET rev = rev + 1, live = live + $13, next_seq = $14,
                       next_expiry = LEAST(next_expiry, $16::bigint), ",
                    touch_sql!(),
                    " WHERE thread_id = $1"
                ))
                .map_err(pg_error)?;
            tx.execute(
                &statement,
                &[
                    &thread_id,
                    &self.seqs,
                    &self.ids,
                    &self.kinds,
                    &self.bodies,
                    &self.embeddings,
                    &self.vectors,
                    &self.indexed_dims,
                    &self.forms,
                    &self.pending_dims,
                    &keys,
                    &values,
                    &added,
                    &next_seq,
                    &self.expires,
                    &earliest,
                    &self.models,
                    &self.texts,
                ],
            )
            .map_err(pg_error)?;
        } else {
            let statement = tx
                .prepare_cached(concat!(
                    "WITH ins AS (
                       INSERT INTO memory_messages
                         (thread_id, seq, msg_id, kind, body, embedding, embedding_form,
                          expires_at, embedding_model, search_tsv)
                       SELECT $1, s, i, k, b, e, f, x, o, ",
                    search_tsv_sql!("w", "b"),
                    "
                       FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::text[],
                                   $6::bytea[], $7::smallint[], $10::bigint[], $12::text[],
                                   $13::text[])
                         AS t(s, i, k, b, e, f, x, o, w))
                     UPDATE memory_threads SET rev = rev + 1, live = live + $8, next_seq = $9,
                       next_expiry = LEAST(next_expiry, $11::bigint), ",
                    touch_sql!(),
                    " WHERE thread_id = $1"
                ))
                .map_err(pg_error)?;
            tx.execute(
                &statement,
                &[
                    &thread_id,
                    &self.seqs,
                    &self.ids,
                    &self.kinds,
                    &self.bodies,
                    &self.embeddings,
                    &self.forms,
                    &added,
                    &next_seq,
                    &self.expires,
                    &earliest,
                    &self.models,
                    &self.texts,
                ],
            )
            .map_err(pg_error)?;
        }
        insert_marks(tx, thread_id, &self.mark_ids, &self.mark_pos, &self.marks)
    }
}

fn insert_marks(
    tx: &mut CachedTransaction<'_>,
    thread_id: i64,
    ids: &[String],
    positions: &[i64],
    marks: &[String],
) -> Result<(), MemoryError> {
    if ids.is_empty() {
        return Ok(());
    }
    let statement = tx
        .prepare_cached(
            "INSERT INTO memory_marks (thread_id, msg_id, pos, mark)
             SELECT $1, i, p, m FROM UNNEST($2::text[], $3::bigint[], $4::text[]) AS t(i, p, m)",
        )
        .map_err(pg_error)?;
    tx.execute(&statement, &[&thread_id, &ids, &positions, &marks])
        .map_err(pg_error)?;
    Ok(())
}

/// Creates the partial HNSW index of `dim` unless it exists, in a transaction of its own (never
/// inside a write: taking the index's lock after a write's insert could deadlock with another
/// such writer) that first takes a transaction-level advisory lock, so that two processes
/// never build the same index. Whether the index exists now: `false` when another process
/// holds the lock (building). The dimension is a number formatted into the statement, never
/// text from a message.
fn create_hnsw_index(client: &mut pg::PooledClient, dim: usize) -> Result<bool, MemoryError> {
    let name = format!("memory_messages_hnsw_{dim}");
    // An index that exists is found in the catalog. `CREATE INDEX IF NOT EXISTS` alone takes
    // the table's SHARE lock before it looks, so each process's first write of a dimension
    // waited behind every open write transaction on `memory_messages` (a long document load)
    // while every later writer, of every namespace, queued behind its request.
    if index_exists(&mut **client, &name)? {
        return Ok(true);
    }
    let mut tx = client.transaction().map_err(pg_error)?;
    // Not waited for: the process holding it is building an index (a bulk build can take
    // minutes), and this write is done anyway.
    let locked: bool = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&HNSW_LOCK_KEY])
        .map_err(pg_error)?
        .try_get(0)
        .map_err(pg_error)?;
    if !locked {
        return Ok(false);
    }
    // Another process may have built it before this one took the lock.
    if index_exists(&mut tx, &name)? {
        tx.commit().map_err(pg_error)?;
        return Ok(true);
    }
    // The index is created after the first write of its dimension committed, so a first large
    // load is indexed in bulk, which pgvector does several times faster than row by row
    // (1,536-dimensional vectors: 10,000 built in about 17 s, against 110 to 120 per second
    // inserted into a built index; issue 13's figures tests), as long as the graph fits in
    // `maintenance_work_mem`: such a vector alone is 6 KiB, so the server's default 64 MB holds
    // fewer than 11,000. Raised only for this transaction, one build at a time (the lock).
    // The build itself still needs the SHARE lock, and writers queue behind its request: it
    // waits for open write transactions at most `HNSW_LOCK_TIMEOUT`, then gives up (logged;
    // a write of the dimension tries again after `INDEX_RETRY`).
    tx.batch_execute(&format!(
        "SET LOCAL maintenance_work_mem = '512MB';
         SET LOCAL lock_timeout = '{HNSW_LOCK_TIMEOUT}';
         CREATE INDEX IF NOT EXISTS {name} ON memory_messages
         USING hnsw ((embedding_v::vector({dim})) vector_cosine_ops)
         WHERE embedding_dim = {dim}"
    ))
    .map_err(pg_error)?;
    tx.commit().map_err(pg_error)?;
    Ok(true)
}

/// Whether the relation `name` exists (a catalog lookup: no lock on any table).
fn index_exists(
    client: &mut impl postgres::GenericClient,
    name: &str,
) -> Result<bool, MemoryError> {
    client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .map_err(pg_error)?
        .try_get::<_, bool>(0)
        .map_err(pg_error)
}

/// How long an HNSW index's creation waits for the table lock (see `create_hnsw_index`).
const HNSW_LOCK_TIMEOUT: &str = "5s";

/// How long a store waits before it tries again to create an index it could not (see
/// `index_dims`).
const INDEX_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// The advisory lock under which HNSW indexes are created: any fixed key other than
/// `mnemon-db`'s migration keys (FNV-1a hashes of schema table names).
const HNSW_LOCK_KEY: i64 = 0x6d6e_656d_6f6e_4857;

/// Writes `change` (planned against `state`) into the open transaction, keeps the thread's
/// counters (schema version 3: `next_seq`, `live`, the gaps and, with vectors, the dimension
/// counts) and bumps the rev; returns the dimensions of the vectors written, for
/// [`PostgresMemoryStore::index_dims`], and whether rows were left for the background indexer
/// (the dimensions in `deferred` are written outside their index).
/// Which rows of a locked thread [`delete_rows`] deletes.
enum Doomed<'a> {
    /// Those with these ids.
    Ids(&'a [String]),
    /// Those expired at this instant (`expires_at <= now`).
    ExpiredAt(i64),
}

/// Deletes rows of a locked thread (their marks cascade), keeping its gaps (schema version 3)
/// and dimension counts exact; returns how many went, by which the caller moves `live`.
fn delete_rows(
    tx: &mut CachedTransaction<'_>,
    thread_id: i64,
    vectors: bool,
    doomed: Doomed<'_>,
) -> Result<i64, MemoryError> {
    let returning = if vectors {
        "RETURNING seq, COALESCE(embedding_dim, pending_dim)"
    } else {
        "RETURNING seq, NULL::integer"
    };
    // Prepared once per connection (see `interned`): four texts.
    let removed = match doomed {
        Doomed::Ids(ids) => tx
            .prepare_cached(interned(format!(
                "DELETE FROM memory_messages WHERE thread_id = $1 AND msg_id = ANY($2) {returning}"
            )))
            .and_then(|statement| tx.query(&statement, &[&thread_id, &ids])),
        Doomed::ExpiredAt(now) => tx
            .prepare_cached(interned(format!(
                "DELETE FROM memory_messages WHERE thread_id = $1 AND expires_at <= $2 {returning}"
            )))
            .and_then(|statement| tx.query(&statement, &[&thread_id, &now])),
    }
    .map_err(pg_error)?;
    let mut seqs = Vec::with_capacity(removed.len());
    let mut removed_dims = Vec::with_capacity(removed.len());
    for row in &removed {
        seqs.push(row.try_get::<_, i64>(0).map_err(pg_error)?);
        removed_dims.push(row.try_get::<_, Option<i32>>(1).map_err(pg_error)?);
    }
    if seqs.is_empty() {
        return Ok(0);
    }
    // The removed seqs become gaps; then the gaps below the smallest live seq, which no
    // position counts, are pruned (all of them when the thread is now empty).
    let add_gaps = tx
        .prepare_cached(
            "INSERT INTO memory_gaps (thread_id, seq)
             SELECT $1, s FROM UNNEST($2::bigint[]) AS s ON CONFLICT DO NOTHING",
        )
        .map_err(pg_error)?;
    tx.execute(&add_gaps, &[&thread_id, &seqs])
        .map_err(pg_error)?;
    let prune_gaps = tx
        .prepare_cached(
            "DELETE FROM memory_gaps WHERE thread_id = $1
               AND seq < COALESCE((SELECT min(seq) FROM memory_messages WHERE thread_id = $1),
                                  9223372036854775807)",
        )
        .map_err(pg_error)?;
    tx.execute(&prune_gaps, &[&thread_id]).map_err(pg_error)?;
    if vectors {
        count_dims(tx, thread_id, &[], &removed_dims)?;
    }
    Ok(i64::try_from(seqs.len()).unwrap_or(i64::MAX))
}

/// Removes the locked thread's expired messages (those with `expires_at <= now`) when its
/// `next_expiry` says some may have expired, as a delete does (gaps, dimension counts, marks);
/// moves its count and `rev` (every mirror of it reloads) and recomputes `next_expiry`.
/// Returns how many went. Not activity: `last_active_ms` stays. Every write of a thread starts
/// here, so that an expired row never holds an id a new message may take again.
fn purge_expired(
    tx: &mut CachedTransaction<'_>,
    thread: LockedThread,
    now: i64,
    vectors: bool,
) -> Result<u64, MemoryError> {
    if mnemon_db::expiry::is_live(thread.next_expiry, now) {
        return Ok(0);
    }
    let removed = delete_rows(tx, thread.id, vectors, Doomed::ExpiredAt(now))?;
    let update = tx
        .prepare_cached(
            "UPDATE memory_threads SET live = live - $2,
               rev = rev + CASE WHEN $2 > 0 THEN 1 ELSE 0 END,
               next_expiry = (SELECT min(expires_at) FROM memory_messages
                              WHERE thread_id = $1 AND expires_at IS NOT NULL)
             WHERE thread_id = $1",
        )
        .map_err(pg_error)?;
    tx.execute(&update, &[&thread.id, &removed])
        .map_err(pg_error)?;
    Ok(u64::try_from(removed).unwrap_or(0))
}

fn persist(
    tx: &mut CachedTransaction<'_>,
    thread: LockedThread,
    state: &ThreadState,
    change: &Change,
    vectors: bool,
    deferred: HashSet<i32>,
) -> Result<(Vec<usize>, bool), MemoryError> {
    let thread_id = thread.id;
    let mut dims = Vec::new();
    let mut pending = false;
    // The thread's count moves in the one statement that bumps its rev, at the end (an append
    // does all of it in its one statement: `Batch::append`).
    let mut live_delta: i64 = 0;
    let id_at = |i: usize| {
        state
            .entries()
            .get(i)
            .map(|e| e.id().to_owned())
            .ok_or_else(|| corrupt(format!("no message at index {i}")))
    };
    match change {
        Change::Append(entries) | Change::Replace(entries) => {
            let next = if matches!(change, Change::Replace(_)) {
                clear_thread(tx, thread_id, vectors)?;
                1
            } else {
                thread.next_seq
            };
            let mut batch = Batch {
                deferred,
                ..Batch::default()
            };
            for (seq, entry) in (next..).zip(entries) {
                batch.push(seq, entry, vectors)?;
            }
            // Appends only ever add to the counters; the rows, the dimension counts and the
            // thread's counters and rev go in one statement (its marks in one more).
            let added = i64::try_from(batch.seqs.len()).unwrap_or(i64::MAX);
            batch.append(tx, thread_id, vectors, added, next.saturating_add(added))?;
            pending = batch.pending_dims.iter().any(Option::is_some);
            dims.extend(batch.dims);
            return Ok((dims, pending));
        }
        Change::Remove(indices) => {
            let ids = indices
                .iter()
                .map(|&i| id_at(i))
                .collect::<Result<Vec<_>, _>>()?;
            live_delta = -delete_rows(tx, thread_id, vectors, Doomed::Ids(&ids))?;
        }
        Change::SetMarks(updates) => {
            let mut ids = Vec::with_capacity(updates.len());
            let mut batch = Batch::default();
            for (i, marks) in updates {
                let id = id_at(*i)?;
                batch.push_marks(&id, marks);
                ids.push(id);
            }
            let unmark = tx
                .prepare_cached(
                    "DELETE FROM memory_marks WHERE thread_id = $1 AND msg_id = ANY($2)",
                )
                .map_err(pg_error)?;
            tx.execute(&unmark, &[&thread_id, &ids]).map_err(pg_error)?;
            insert_marks(
                tx,
                thread_id,
                &batch.mark_ids,
                &batch.mark_pos,
                &batch.marks,
            )?;
        }
        Change::SetMessages(updates, model) => {
            let mut batch = Batch {
                deferred,
                ..Batch::default()
            };
            for (i, msg) in updates {
                let stored = StoredMessage::of(&Entry::new(msg.clone(), Vec::new()))?;
                batch.push_row(0, &id_at(*i)?, msg.kind(), stored, vectors);
            }
            if vectors {
                // The old dimensions of the updated rows come back from the statement's own
                // snapshot of them (`o`), the new ones are the batch's: the counts move by the
                // difference, without a count over the thread.
                let update = tx
                    .prepare_cached(concat!(
                        "UPDATE memory_messages m SET body = t.b, embedding = t.e,
                           embedding_v = t.v, embedding_dim = t.d, embedding_form = t.f,
                           pending_dim = t.p,
                           embedding_model = CASE WHEN t.e IS NULL AND t.v IS NULL
                                                  THEN NULL ELSE $9::text END,
                           search_tsv = ",
                        search_tsv_sql!("t.w", "t.b"),
                        "
                         FROM UNNEST($2::text[], $3::text[], $4::bytea[], $5::vector[],
                                     $6::integer[], $7::smallint[], $8::integer[], $10::text[])
                                AS t(i, b, e, v, d, f, p, w),
                              memory_messages o
                         WHERE m.thread_id = $1 AND m.msg_id = t.i
                           AND o.thread_id = m.thread_id AND o.seq = m.seq
                         RETURNING COALESCE(o.embedding_dim, o.pending_dim)"
                    ))
                    .map_err(pg_error)?;
                let old = tx
                    .query(
                        &update,
                        &[
                            &thread_id,
                            &batch.ids,
                            &batch.bodies,
                            &batch.embeddings,
                            &batch.vectors,
                            &batch.indexed_dims,
                            &batch.forms,
                            &batch.pending_dims,
                            model,
                            &batch.texts,
                        ],
                    )
                    .map_err(pg_error)?;
                let old_dims = old
                    .iter()
                    .map(|r| r.try_get::<_, Option<i32>>(0).map_err(pg_error))
                    .collect::<Result<Vec<_>, _>>()?;
                count_dims(tx, thread_id, &batch.vector_dims, &old_dims)?;
                pending = batch.pending_dims.iter().any(Option::is_some);
                dims.extend(batch.dims);
            } else {
                let update = tx
                    .prepare_cached(concat!(
                        "UPDATE memory_messages m SET body = t.b, embedding = t.e,
                       embedding_form = t.f,
                       embedding_model = CASE WHEN t.e IS NULL THEN NULL ELSE $6::text END,
                       search_tsv = ",
                        search_tsv_sql!("t.w", "t.b"),
                        "
                     FROM UNNEST($2::text[], $3::text[], $4::bytea[], $5::smallint[], $7::text[])
                       AS t(i, b, e, f, w)
                     WHERE m.thread_id = $1 AND m.msg_id = t.i"
                    ))
                    .map_err(pg_error)?;
                tx.execute(
                    &update,
                    &[
                        &thread_id,
                        &batch.ids,
                        &batch.bodies,
                        &batch.embeddings,
                        &batch.forms,
                        model,
                        &batch.texts,
                    ],
                )
                .map_err(pg_error)?;
            }
        }
    }
    // Not an append: an updated embedding may have made an older row pending again, so the
    // pending watermark (schema version 12) goes back to the start, under a new epoch.
    let bump = tx
        .prepare_cached(concat!(
            "UPDATE memory_threads SET rev = rev + 1, live = live + $2, pending_from = 0,
               pending_epoch = pending_epoch + 1, ",
            touch_sql!(),
            " WHERE thread_id = $1"
        ))
        .map_err(pg_error)?;
    tx.execute(&bump, &[&thread_id, &live_delta])
        .map_err(pg_error)?;
    Ok((dims, pending))
}

/// The statement of [`read_retrieved`] (its text depends on the vector column): `$1` the
/// thread, `$2` the seqs, `$3` the clock's now (the expired rows before a message, still stored,
/// do not count in its index).
fn retrieved_sql(vectors: bool) -> &'static str {
    interned(format!(
        "SELECT {}, m.seq, {}
         FROM (SELECT min(seq) AS lo FROM memory_messages WHERE thread_id = $1) f,
              memory_messages m
         WHERE m.thread_id = $1 AND m.seq = ANY($2)",
        message_columns(vectors),
        index_sql("$1")
    ))
}

/// A message row `m`'s index in its thread `thread` (an SQL expression: a parameter or a
/// column), given `f.lo`, the thread's lowest stored seq, and `$3`, the clock's now: its seq
/// from `lo`, less the removed seqs (`memory_gaps`) and the expired rows still stored before
/// it. The one definition of a stored message's index, for every statement that reads one.
fn index_sql(thread: &str) -> String {
    format!(
        "m.seq - f.lo - (SELECT count(*) FROM memory_gaps g
                         WHERE g.thread_id = {thread} AND g.seq > f.lo AND g.seq < m.seq)
           - (SELECT count(*) FROM memory_messages x
              WHERE x.thread_id = {thread} AND x.expires_at <= $3 AND x.seq < m.seq)"
    )
}

/// `sql` as a `&'static str`, the key of a connection's statement cache
/// (`PooledClient::prepare_cached`), so that a recall's statements whose text holds a number
/// (the dimension, which the partial indexes need literally) are prepared once per connection
/// instead of on every recall. Each distinct text is kept for the life of the process; the texts
/// vary only with the dimension (at most [`HNSW_MAX_DIM`] on the index path) and two switches,
/// so a few thousand at most, about a kilobyte each.
fn interned(sql: String) -> &'static str {
    static INTERNED: std::sync::OnceLock<Mutex<HashSet<&'static str>>> = std::sync::OnceLock::new();
    let mut set = INTERNED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(&known) = set.get(sql.as_str()) {
        return known;
    }
    let leaked: &'static str = Box::leak(sql.into_boxed_str());
    set.insert(leaked);
    leaked
}

/// The retrieved messages of `scored` (`(score, seq, embedding)`, in the order given), read
/// from the snapshot with their indices: a message's index is its seq's distance from the
/// thread's smallest seq less the removed seqs (gaps) in between (schema version 3) and less the
/// rows before it that had expired at `now` but are still stored (schema version 6): index
/// lookups and counts over gaps and expired rows only, never over the messages. An embedding
/// given (the HNSW shortlist read it to score the message) is used as read: `statement` may then
/// leave the vector column out, which would otherwise be read a second time. `None` when a row
/// is missing.
fn read_retrieved(
    tx: &mut Transaction<'_>,
    statement: &postgres::Statement,
    thread_id: i64,
    factory: &MsgFactory,
    scored: Vec<(f64, i64, Option<Vec<f32>>)>,
    now: i64,
    with_embeddings: bool,
) -> Result<Option<Vec<Retrieved>>, MemoryError> {
    let seqs: Vec<i64> = scored.iter().map(|&(_, seq, _)| seq).collect();
    let bodies = tx
        .query(statement, &[&thread_id, &seqs, &now])
        .map_err(pg_error)?;
    let mut by_seq = HashMap::with_capacity(bodies.len());
    for row in &bodies {
        by_seq.insert(row.try_get::<_, i64>(6).map_err(pg_error)?, row);
    }
    let mut found = Vec::with_capacity(scored.len());
    for (score, seq, given) in scored {
        let Some(row) = by_seq.get(&seq) else {
            return Ok(None);
        };
        let index: i64 = row.try_get(7).map_err(pg_error)?;
        let index = usize::try_from(index)
            .map_err(|_| corrupt(format!("message at seq {seq} has index {index}")))?;
        let message =
            row_entry_given(factory, row, index, Vec::new(), given)?.message_for(with_embeddings);
        found.push(Retrieved {
            score,
            index,
            message,
        });
    }
    Ok(Some(found))
}

/// One thread of a [`PostgresMemoryStore`]; implements [`Memory`](crate::Memory) with the same
/// semantics as [`InMemoryMemory`](crate::InMemoryMemory).
pub struct PostgresMemory {
    store: Arc<PostgresMemoryStore>,
    scope: Scope,
    mirror: Mutex<Mirror>,
}

impl std::fmt::Debug for PostgresMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresMemory")
            .field("target", &self.store.pool.target())
            .field("namespace", &self.store.namespace)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl PostgresMemory {
    /// The HNSW path of [`Backend::retrieve_from_index`]: `None` when the index cannot answer.
    fn retrieve_through_hnsw(
        &self,
        query: &[f32],
        options: &RetrieveOptions,
    ) -> Result<Option<Vec<Retrieved>>, MemoryError> {
        let (Some(k), Metric::Cosine, true) = (options.top_k, &options.metric, self.vectors())
        else {
            return Ok(None);
        };
        let dim = query.len();
        let query_norm = exact::norm(query);
        let Some(vector) = PgVector::new(Some(query)) else {
            return Ok(None);
        };
        // The index searches `ef` candidates (that is what finds the true neighbours), but only
        // the closest `rescored` of them by pgvector's own cosine distance are read and
        // re-scored exactly. pgvector computes that distance over the same `f32`s, only with
        // another summation (f32 accumulators), so the two orders differ only between
        // candidates whose distances are within rounding of each other (relative 1e-6 or so at
        // 1,536 dimensions): a margin of `k` more, at least [`RESCORE_MARGIN`], holds every
        // candidate that can move into the exact top `k`. Each row read is a 6 KiB embedding at
        // 1,536 dimensions, so reading all `ef` of them would cost more than the search.
        let rescored = k.saturating_add(k.max(RESCORE_MARGIN));
        // `ef_search` bounds the shortlist, so it is at least `rescored`; pgvector accepts 1 to
        // 1,000.
        let ef = self
            .store
            .hnsw_ef_search
            .max(rescored)
            .clamp(1, HNSW_MAX_EF_SEARCH);
        let rescored = rescored.min(ef);
        if k == 0 || k > ef || dim > HNSW_MAX_DIM || query_norm == 0.0 {
            return Ok(None);
        }
        if self.store.hnsw_min_messages == usize::MAX {
            return Ok(None);
        }
        let [user, agent, session] = self.scope.columns()?;
        let mark = options.mark.as_deref();
        let dim_i32 = i32::try_from(dim).unwrap_or(i32::MAX);
        let mut client = self.store.client()?;
        // The recall's statements, prepared once per connection (see `interned`): the
        // shortlist with the candidates' embeddings and without (the mirror has them).
        let prepared = (|| {
            Ok::<_, postgres::Error>((
                client.prepare_cached(RECALL_THREAD_SQL)?,
                client.prepare_cached(shortlist_sql(dim, "m.embedding_v"))?,
                client.prepare_cached(shortlist_sql(dim, "NULL::vector"))?,
                // The winners' messages without their vectors: the shortlist read them.
                client.prepare_cached(retrieved_sql(false))?,
            ))
        })();
        let (thread_statement, with_embeddings, without_embeddings, retrieved) =
            prepared.map_err(pg_error)?;
        let mut tx = snapshot_cached(&mut client)?;
        let thread = tx
            .query_opt(
                &thread_statement,
                &[
                    &self.store.namespace.as_str(),
                    &user,
                    &agent,
                    &session,
                    &dim_i32,
                    &ef.to_string(),
                ],
            )
            .map_err(pg_error)?;
        let Some(thread) = thread else {
            return Ok(None);
        };
        let thread_id: i64 = thread.try_get(0).map_err(pg_error)?;
        let rev: i64 = thread.try_get(2).map_err(pg_error)?;
        let now = self.store.now();
        let next_expiry: Option<i64> = thread.try_get(7).map_err(pg_error)?;
        // Every pending row of the thread is above it (schema version 12).
        let pending_from: i64 = thread.try_get(8).map_err(pg_error)?;
        if !mnemon_db::expiry::is_live(next_expiry, now) {
            // Expired rows not yet removed: the counters count them, the index holds them.
            // The mirror path reads the live messages only.
            return Ok(None);
        }
        let (total, usable): (i64, i64) = match mark {
            // Every message is a candidate: the counters say how many, and how many have an
            // indexable embedding of the query's dimension.
            None => (
                thread.try_get(1).map_err(pg_error)?,
                thread.try_get(3).map_err(pg_error)?,
            ),
            // Filtered by a mark, the rarer recall: the candidates are counted.
            Some(mark) => {
                let count = tx
                    .prepare_cached(
                        "SELECT count(*), count(*) FILTER (WHERE m.embedding_dim = $3)
                         FROM memory_marks k JOIN memory_messages m
                           ON m.thread_id = k.thread_id AND m.msg_id = k.msg_id
                         WHERE k.thread_id = $1 AND k.mark = $2",
                    )
                    .map_err(pg_error)?;
                let counts = tx
                    .query_one(&count, &[&thread_id, &mark, &dim_i32])
                    .map_err(pg_error)?;
                (
                    counts.try_get(0).map_err(pg_error)?,
                    counts.try_get(1).map_err(pg_error)?,
                )
            }
        };
        // Every candidate must have an indexable embedding of the query's dimension (a missing
        // one, another dimension or a zero vector takes the exact path, with its errors and
        // scores).
        let total = usize::try_from(total).unwrap_or(0);
        if i64::try_from(total).ok() != Some(usable)
            || total < self.store.hnsw_min_messages
            || k >= total
        {
            return Ok(None);
        }
        // With the handle's mirror current (the snapshot's thread and rev), the candidates'
        // embeddings, indices and messages come from it, and the database only shortlists:
        // no embedding or body is read, no JSON parsed. Held to the end, so that it stays
        // current. Otherwise they are read from the snapshot.
        let mirror = self.mirror();
        let mirror = mirror.current(thread_id, rev, now).then_some(mirror);
        let shortlist = if mirror.is_some() {
            without_embeddings
        } else {
            // An indexable row's embedding is its vector (schema version 4 stores it once).
            with_embeddings
        };
        let rescored_i64 = i64::try_from(rescored).unwrap_or(i64::MAX);
        // How many rows came from the index; `None` when the pending ones are too many.
        let from_index = |rows: &[Row]| -> Result<Option<usize>, MemoryError> {
            let mut pending = 0;
            for row in rows {
                if row.try_get::<_, bool>(3).map_err(pg_error)? {
                    pending += 1;
                }
            }
            Ok((pending <= PENDING_SCAN_MAX).then(|| rows.len() - pending))
        };
        // The index must give at least `k` of the thread's indexed candidates (all of them
        // when fewer): the pending ones complete the exact top `k` only with those.
        let enough =
            |indexed: usize, rows: usize| indexed >= k.min(total.saturating_sub(rows - indexed));
        let mut rows = tx
            .query(
                &shortlist,
                &[&thread_id, &mark, &vector, &rescored_i64, &pending_from],
            )
            .map_err(pg_error)?;
        let Some(mut indexed) = from_index(&rows)? else {
            return Ok(None);
        };
        if !enough(indexed, rows.len()) && ef < HNSW_MAX_EF_SEARCH {
            // The index holds every thread's vectors of this dimension and filters the `ef` it
            // found to this thread (and mark): other threads' neighbours crowded this one's
            // out. Once more with pgvector's longest shortlist before the exact scan.
            let widen = tx
                .prepare_cached("SELECT set_config('hnsw.ef_search', $1, true)")
                .map_err(pg_error)?;
            tx.execute(&widen, &[&HNSW_MAX_EF_SEARCH.to_string()])
                .map_err(pg_error)?;
            rows = tx
                .query(
                    &shortlist,
                    &[&thread_id, &mark, &vector, &rescored_i64, &pending_from],
                )
                .map_err(pg_error)?;
            let Some(again) = from_index(&rows)? else {
                return Ok(None);
            };
            indexed = again;
        }
        if !enough(indexed, rows.len()) || rows.len() < k {
            // The index's filtered shortlist came up short: score everything instead.
            return Ok(None);
        }
        // The pending rows' vectors, when the mirror does not have them: now that there are
        // few enough of them to score.
        let mut pending_vectors: HashMap<i64, Vec<f32>> = HashMap::new();
        if mirror.is_none() {
            let mut pending_seqs = Vec::new();
            for row in &rows {
                if row.try_get::<_, bool>(3).map_err(pg_error)? {
                    pending_seqs.push(row.try_get::<_, i64>(0).map_err(pg_error)?);
                }
            }
            if !pending_seqs.is_empty() {
                let pending_rows = tx
                    .prepare_cached(
                        "SELECT seq, embedding_v FROM memory_messages
                         WHERE thread_id = $1 AND seq = ANY($2)",
                    )
                    .map_err(pg_error)?;
                for row in tx
                    .query(&pending_rows, &[&thread_id, &pending_seqs])
                    .map_err(pg_error)?
                {
                    let stored: Option<StoredFloats> = row.try_get(1).map_err(pg_error)?;
                    if let Some(stored) = stored {
                        pending_vectors.insert(row.try_get(0).map_err(pg_error)?, stored.0);
                    }
                }
            }
        }
        // Exact scores; ties and order by `seq`, which orders messages as their indices do.
        let mut scored = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq: i64 = row.try_get(0).map_err(pg_error)?;
            let (embedding, index) = match &mirror {
                Some(mirror) => {
                    let id: &str = row.try_get(1).map_err(pg_error)?;
                    let index = mirror.state.position(id);
                    let embedding = index
                        .and_then(|i| mirror.state.entries().get(i))
                        .and_then(Entry::embedding);
                    (embedding, index)
                }
                None if row.try_get::<_, bool>(3).map_err(pg_error)? => {
                    (pending_vectors.remove(&seq), None)
                }
                None => {
                    let stored: Option<StoredFloats> = row.try_get(2).map_err(pg_error)?;
                    (stored.map(|v| v.0), None)
                }
            };
            let Some(embedding) = embedding.filter(|e| e.len() == dim) else {
                return Ok(None);
            };
            let score = exact::cosine_with_norms(
                exact::dot(query, &embedding),
                query_norm,
                exact::norm(&embedding),
            );
            // Without the mirror, the vector read here is the message's embedding: kept, so
            // that reading the winners' messages does not fetch their 6 KiB vectors again.
            let kept = mirror.is_none().then_some(embedding);
            scored.push((score, seq, index, kept));
        }
        scored.sort_by(|a, b| rank(&(a.0, seq_key(a.1)), &(b.0, seq_key(b.1))));
        scored.truncate(k);
        if options.preserve_order {
            scored.sort_by_key(|&(_, seq, _, _)| seq);
        }
        let found = match &mirror {
            Some(mirror) => scored
                .into_iter()
                .map(|(score, _, index, _)| {
                    let entry = index.and_then(|i| Some((i, mirror.state.entries().get(i)?)));
                    entry.map(|(index, entry)| Retrieved {
                        score,
                        index,
                        message: entry.message_for(options.with_embeddings),
                    })
                })
                .collect::<Option<Vec<_>>>(),
            None => {
                let scored: Vec<(f64, i64, Option<Vec<f32>>)> = scored
                    .into_iter()
                    .map(|(score, seq, _, kept)| (score, seq, kept))
                    .collect();
                read_retrieved(
                    &mut tx,
                    &retrieved,
                    thread_id,
                    &self.store.factory,
                    scored,
                    now,
                    options.with_embeddings,
                )?
            }
        };
        drop(mirror);
        let Some(found) = found else {
            return Ok(None);
        };
        tx.commit().map_err(pg_error)?;
        self.store.index_recalls.fetch_add(1, Ordering::Relaxed);
        Ok(Some(found))
    }

    /// The answer without the index, in one snapshot. With the handle's mirror current and
    /// every candidate embedded, the mirror's matrix scores it at once: the same scores the
    /// generic path (`ops.rs`: embed what is missing, then read and score) would give, without
    /// its two more transactions, each reading the thread's row again. Otherwise, for a cut to
    /// `top_k` without a mark when the mirror is not current (a handle opened per request):
    /// every live message's stored vector from the store's cache at the thread's rev, or read
    /// into it (`crate::vector_scan`), scored exactly with the metric, and only the winners'
    /// bodies read. `None` (the generic path, which embeds or gives the error) when a candidate
    /// has no vector or one of another length.
    fn retrieve_from_cache(
        &self,
        query: &[f32],
        options: &RetrieveOptions,
    ) -> Result<Option<Vec<Retrieved>>, MemoryError> {
        let mut client = self.store.client()?;
        let mut tx = snapshot_cached(&mut client)?;
        let Some((thread_id, rev)) = thread_row(&mut tx, &self.store.namespace, &self.scope)?
        else {
            return Ok(None);
        };
        let now = self.store.now();
        {
            let mirror = self.mirror();
            if mirror.holds(thread_id, rev, now) {
                tx.commit().map_err(pg_error)?;
                drop(client);
                if !retrieval::missing_embeddings(&mirror.state, options.mark.as_deref()).is_empty()
                {
                    return Ok(None);
                }
                return retrieval::score(&mirror.state, query, options, None).map(Some);
            }
        }
        let (Some(k), None) = (options.top_k, &options.mark) else {
            return Ok(None);
        };
        let scan_start = self.store.vectors.start();
        let vectors = self
            .store
            .thread_vectors(&mut tx, thread_id, rev, scan_start)?;
        let query_norm = exact::norm(query);
        let score = |row: &[f32], norm: f64| match &options.metric {
            Metric::Cosine => exact::cosine_with_norms(exact::dot(query, row), query_norm, norm),
            Metric::Dot => exact::dot(query, row),
            Metric::NegEuclidean => -exact::squared_l2(query, row).sqrt(),
            Metric::Custom(f) => f(query, row),
        };
        let mut top = crate::search::TopK::new(k);
        let mut complete = true;
        vectors.scan(now, query.len(), score, |position, seq, found| {
            match found {
                crate::vector_scan::Scored::Score(score) => {
                    top.offer(crate::search::Candidate {
                        score,
                        thread: 0,
                        index: position,
                        seq,
                    });
                }
                _ => complete = false,
            }
            Ok::<(), MemoryError>(())
        })?;
        if !complete {
            return Ok(None);
        }
        let scored: Vec<(f64, i64, Option<Vec<f32>>)> = top
            .into_sorted()
            .into_iter()
            .map(|c| (c.score, c.seq, None))
            .collect();
        let statement = tx
            .prepare_cached(retrieved_sql(self.vectors()))
            .map_err(pg_error)?;
        let Some(mut found) = read_retrieved(
            &mut tx,
            &statement,
            thread_id,
            &self.store.factory,
            scored,
            now,
            options.with_embeddings,
        )?
        else {
            return Ok(None);
        };
        tx.commit().map_err(pg_error)?;
        if options.preserve_order {
            found.sort_by_key(|r| r.index);
        }
        Ok(Some(found))
    }

    /// The thread's scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The store holding the thread.
    pub fn store(&self) -> &Arc<PostgresMemoryStore> {
        &self.store
    }

    fn mirror(&self) -> MutexGuard<'_, Mirror> {
        self.mirror.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn vectors(&self) -> bool {
        matches!(self.store.vector, VectorMode::Pgvector { .. })
    }
}

/// Starts a read-only transaction whose reads all see one snapshot, in which statements are
/// prepared into the connection's cache (as [`snapshot`]).
fn snapshot_cached(client: &mut pg::PooledClient) -> Result<CachedTransaction<'_>, MemoryError> {
    client
        .build_transaction_cached(IsolationLevel::RepeatableRead, true)
        .map_err(pg_error)
}

/// Starts a read-only transaction whose reads all see one snapshot.
fn snapshot(client: &mut pg::PooledClient) -> Result<Transaction<'_>, MemoryError> {
    client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(pg_error)
}

impl Backend for PostgresMemory {
    fn factory(&self) -> &MsgFactory {
        &self.store.factory
    }

    fn deadline(&self, expiry: mnemon_db::Expiry) -> Result<Option<i64>, MemoryError> {
        Ok(expiry.deadline(self.store.now(), self.store.default_ttl))
    }

    fn check_model(&self, model: &str) -> Result<(), MemoryError> {
        // Only live messages count (an expired one not yet removed is invisible to every
        // read), judged at the store clock's reading, as each read judges at its own.
        let now = self.store.now();
        let mut client = self.store.client()?;
        let mut tx = snapshot_cached(&mut client)?;
        let Some((thread_id, _)) = thread_row(&mut tx, &self.store.namespace, &self.scope)? else {
            return Ok(());
        };
        let other_model = tx.prepare_cached(OTHER_MODEL_SQL).map_err(pg_error)?;
        let other: Option<String> = tx
            .query_opt(&other_model, &[&thread_id, &model, &now])
            .map_err(pg_error)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(pg_error)?;
        tx.commit().map_err(pg_error)?;
        model_mismatch(other, model)
    }

    fn read<R>(&self, f: impl FnOnce(&ThreadState) -> R) -> Result<R, MemoryError> {
        let now = self.store.now();
        let mut client = self.store.client()?;
        let mut tx = snapshot_cached(&mut client)?;
        let thread = thread_row(&mut tx, &self.store.namespace, &self.scope)?;
        let mut mirror = self.mirror();
        mirror.sync(&mut tx, thread, &self.store.factory, self.vectors(), now)?;
        tx.commit().map_err(pg_error)?;
        drop(client);
        Ok(f(&mirror.state))
    }

    fn write<R>(
        &self,
        f: impl FnOnce(&ThreadState) -> Result<(Option<Change>, R), MemoryError>,
    ) -> Result<R, MemoryError> {
        // Read before any statement: the store's `indexed` mutex must never be waited for by a
        // transaction holding table locks (see `index_dims`).
        let deferred = self.store.deferred_dims();
        let mut client = self.store.client()?;
        let mut tx = client.transaction_cached().map_err(pg_error)?;
        self.store.exact_mode_still_holds(&mut tx)?;
        let mut thread = lock_thread(
            &mut tx,
            &self.store.namespace,
            &self.scope,
            &self.store.factory,
        )?;
        // The clock is read once the thread is locked: a write that waited behind another
        // judges expiry at the instant it plans, never at one before the wait.
        let now = self.store.now();
        let purged = purge_expired(&mut tx, thread, now, self.vectors())? > 0;
        if purged {
            thread.rev += 1;
        }
        let mut mirror = self.mirror();
        // After a purge, the mirror takes this transaction's view as rev + 1: a failure from
        // here on rolls the transaction back, so the mirror must not keep a rev that was never
        // committed — another process's next commit gets that number, and the mirror would
        // pass for it, missing what that write added. (Without a purge the mirror holds the
        // committed thread, which a failed write leaves as it was.)
        let outcome = (|| {
            mirror.sync(
                &mut tx,
                Some((thread.id, thread.rev)),
                &self.store.factory,
                self.vectors(),
                now,
            )?;
            let (change, result) = f(&mirror.state)?;
            let Some(change) = change else {
                tx.commit().map_err(pg_error)?;
                return Ok((result, None));
            };
            let (dims, pending) = persist(
                &mut tx,
                thread,
                &mirror.state,
                &change,
                self.vectors(),
                deferred,
            )?;
            tx.commit().map_err(pg_error)?;
            let earliest = match &change {
                Change::Append(entries) => earliest_of(entries.iter())
                    .into_iter()
                    .chain(mirror.earliest)
                    .min(),
                Change::Replace(entries) => earliest_of(entries.iter()),
                _ => mirror.earliest,
            };
            mirror.state.apply(change);
            mirror.rev = thread.rev + 1;
            mirror.earliest = earliest;
            Ok((result, Some((dims, pending))))
        })();
        match outcome {
            Err(error) => {
                if purged {
                    *mirror = Mirror::default();
                }
                Err(error)
            }
            Ok((result, written)) => {
                drop(mirror);
                drop(client);
                if let Some((dims, pending)) = written {
                    self.store.after_write(&dims, pending);
                }
                Ok(result)
            }
        }
    }

    fn scan(
        &self,
        with_marks: bool,
        f: &mut dyn FnMut(&Entry) -> Result<(), MemoryError>,
    ) -> Result<usize, MemoryError> {
        let now = self.store.now();
        let mut client = self.store.client()?;
        let mut tx = snapshot_cached(&mut client)?;
        let Some((thread_id, rev)) = thread_row(&mut tx, &self.store.namespace, &self.scope)?
        else {
            return Ok(0);
        };
        let mirror = self.mirror();
        if mirror.holds(thread_id, rev, now) {
            mirror.state.entries().iter().try_for_each(&mut *f)?;
            return Ok(mirror.state.len());
        }
        drop(mirror);
        // Rows stream through a portal, a bounded number at a time, and are never mirrored.
        let mut marks = if with_marks {
            thread_marks(&mut tx, thread_id)?
        } else {
            HashMap::new()
        };
        let select = tx
            .prepare_cached(live_rows_sql(self.vectors()))
            .map_err(pg_error)?;
        let portal = tx.bind(&select, &[&thread_id, &now]).map_err(pg_error)?;
        let mut count = 0;
        loop {
            let rows = tx.query_portal(&portal, 512).map_err(pg_error)?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let id: &str = row.try_get(0).map_err(pg_error)?;
                let marks = marks.remove(id).unwrap_or_default();
                // The stored fields ride along, as the mirror's entries carry them, for the
                // `AgentScope00Stored` export.
                let expires_at: Option<i64> = row.try_get(6).map_err(pg_error)?;
                let model: Option<String> = row.try_get(7).map_err(pg_error)?;
                let entry = row_entry(&self.store.factory, row, count, marks)?
                    .expiring(expires_at)
                    .embedded_by(model);
                f(&entry)?;
                count += 1;
            }
        }
        tx.commit().map_err(pg_error)?;
        Ok(count)
    }

    fn select_recent(
        &self,
        mark: Option<&str>,
        exclude_mark: Option<&str>,
        n: usize,
    ) -> Result<Vec<Msg>, MemoryError> {
        let now = self.store.now();
        let mut client = self.store.client()?;
        let mut tx = snapshot_cached(&mut client)?;
        let Some((thread_id, rev)) = thread_row(&mut tx, &self.store.namespace, &self.scope)?
        else {
            return Ok(Vec::new());
        };
        let mirror = self.mirror();
        let selected = if mirror.holds(thread_id, rev, now) {
            mirror.state.select(mark, exclude_mark, Some(n))
        } else {
            drop(mirror);
            recent_rows(
                &mut tx,
                thread_id,
                &self.store.factory,
                (mark, exclude_mark),
                n,
                self.vectors(),
                now,
            )?
        };
        tx.commit().map_err(pg_error)?;
        Ok(selected)
    }

    /// A cut to `top_k` through the HNSW index when it can answer (see the module docs), else
    /// from the thread's stored vectors in the store's cache ([`Self::retrieve_from_cache`]),
    /// else `None`: the mirror.
    fn retrieve_from_index(
        &self,
        query: &[f32],
        options: &RetrieveOptions,
    ) -> Result<Option<Vec<Retrieved>>, MemoryError> {
        // A thread the mirror holds with fewer messages than the index path needs skips the
        // index's transaction. The mirror may be behind another process's writes: then the
        // thread is scored exactly (and the mirror brought up to date), which is never wrong,
        // only slower once; the next recall sees the thread's size.
        let small = {
            let mirror = self.mirror();
            mirror.thread_id.is_some() && mirror.state.len() < self.store.hnsw_min_messages
        };
        if !small && let Some(found) = self.retrieve_through_hnsw(query, options)? {
            return Ok(Some(found));
        }
        self.retrieve_from_cache(query, options)
    }

    fn load_document(&self, source: LoadSource, overwrite: bool) -> Result<AddReport, MemoryError> {
        let factory = &self.store.factory;
        let vectors = self.vectors();
        // Read before any statement, as in `write`.
        let deferred = self.store.deferred_dims();
        let mut client = self.store.client()?;
        // One transaction for the whole document, the thread's creation included: a document
        // that fails anywhere rolls all of it back.
        let mut tx = client.transaction_cached().map_err(pg_error)?;
        self.store.exact_mode_still_holds(&mut tx)?;
        let thread = lock_thread(&mut tx, &self.store.namespace, &self.scope, factory)?;
        let thread_id = thread.id;
        let now = self.store.now();
        // An expired row must not keep a loaded message's id from being stored again.
        purge_expired(&mut tx, thread, now, vectors)?;
        // Every loaded message gets the handle's default time-to-live.
        let deadline = mnemon_db::Expiry::Default.deadline(now, self.store.default_ttl);
        let mut seq = if overwrite {
            clear_thread(&mut tx, thread_id, vectors)?;
            1
        } else {
            thread.next_seq
        };
        let insert = tx
            .prepare(if vectors {
                concat!(
                    "INSERT INTO memory_messages (thread_id, seq, msg_id, kind, body, embedding,
                   embedding_form, embedding_v, embedding_dim, pending_dim, expires_at,
                   embedding_model, search_tsv)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8::vector, $9, $10, $11, $12, ",
                    search_tsv_sql!("$13::text", "$5::text"),
                    ")
                 ON CONFLICT (thread_id, msg_id) DO NOTHING"
                )
            } else {
                concat!(
                    "INSERT INTO memory_messages
                   (thread_id, seq, msg_id, kind, body, embedding, embedding_form, expires_at,
                    embedding_model, search_tsv)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, ",
                    search_tsv_sql!("$10::text", "$5::text"),
                    ")
                 ON CONFLICT (thread_id, msg_id) DO NOTHING"
                )
            })
            .map_err(pg_error)?;
        let mut report = AddReport::default();
        let mut marks = Batch::default();
        let mut dims = Vec::new();
        // The dimension of each inserted row, for the counts of `memory_dims`.
        let mut inserted_dims = Vec::new();
        let mut pending = false;
        // The earliest expiry among the inserted rows, for the thread's `next_expiry`.
        let mut earliest: Option<i64> = None;
        // A stored id (or one earlier in the document) is skipped, as `plan_add` does: the
        // unique (thread_id, msg_id) index answers instead of a mirror of every id.
        decode_stream(factory, source, &mut |entry| {
            // One row as `Batch` writes it: the embedding stored once (schema version 4).
            let row = RowValues::of(StoredMessage::of(&entry)?, vectors, &deferred);
            let (body, form, bytes, dim) = (&row.body, &row.form, &row.bytes, row.dim);
            let (indexed_dim, pending_dim) = row.index_columns();
            let kind = entry.msg_without_embedding().kind().as_str();
            // A document's own expiry (an `AgentScope00Stored` export; `null`: never) wins over
            // the handle's default.
            let expires_at = entry.loaded_expiry(deadline);
            let model = &entry.embedding_model;
            if let Some(d) = dim.and_then(|d| usize::try_from(d).ok()) {
                dims.push(d);
            }
            let inserted = if vectors {
                tx.execute(
                    &insert,
                    &[
                        &thread_id,
                        &seq,
                        &entry.id(),
                        &kind,
                        body,
                        bytes,
                        form,
                        &row.vector,
                        &indexed_dim,
                        &pending_dim,
                        &expires_at,
                        model,
                        &row.text,
                    ],
                )
            } else {
                tx.execute(
                    &insert,
                    &[
                        &thread_id,
                        &seq,
                        &entry.id(),
                        &kind,
                        body,
                        bytes,
                        form,
                        &expires_at,
                        model,
                        &row.text,
                    ],
                )
            }
            .map_err(pg_error)?;
            if inserted == 0 {
                report.skipped_duplicates.push(entry.id().to_owned());
                return Ok(());
            }
            marks.push_marks(entry.id(), &entry.marks);
            earliest = match (earliest, expires_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            inserted_dims.push(dim);
            pending |= pending_dim.is_some();
            seq += 1;
            report.added += 1;
            Ok(())
        })?;
        insert_marks(
            &mut tx,
            thread_id,
            &marks.mark_ids,
            &marks.mark_pos,
            &marks.marks,
        )?;
        if overwrite || report.added > 0 {
            // The counters move by what was inserted; the new rev makes every mirror of the
            // thread (this one included) reload.
            let added = i64::try_from(report.added).unwrap_or(i64::MAX);
            tx.execute(
                concat!(
                    "UPDATE memory_threads SET rev = rev + 1, next_seq = $2, live = live + $3,
                       next_expiry = LEAST(next_expiry, $4::bigint), ",
                    touch_sql!(),
                    " WHERE thread_id = $1"
                ),
                &[&thread_id, &seq, &added, &earliest],
            )
            .map_err(pg_error)?;
            if vectors {
                count_dims(&mut tx, thread_id, &inserted_dims, &[])?;
            }
        }
        tx.commit().map_err(pg_error)?;
        drop(client);
        self.store.after_write(&dims, pending);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The `tsvector` input: each word once (in order of first occurrence), quoted, with its
    /// positions from 1; positions past PostgreSQL's highest read as it, once; words past its
    /// lexeme limit left out.
    #[test]
    fn keyword_tsvectors_are_written_as_their_input_text() {
        assert_eq!(keyword_tsvector(""), "");
        assert_eq!(keyword_tsvector("b a b x²"), "'b':1,3 'a':2 'x²':4");
        let long = "l".repeat(MAX_LEXEME_BYTES + 1);
        let fits = "f".repeat(MAX_LEXEME_BYTES);
        assert_eq!(
            keyword_tsvector(&format!("{long} {fits}")),
            format!("'{fits}':2")
        );
        let many = format!("{} z z z", vec!["a"; MAX_POSITION].join(" "));
        let written = keyword_tsvector(&many);
        assert!(
            written.ends_with(&format!(" 'z':{MAX_POSITION}")),
            "{written:.40}"
        );
        // Distinct words past the tsvector's room are left out, repeats of kept ones not: each
        // of these takes 8 bytes, 2 for its count of positions and 2 for its one position (the
        // first, 4 more for its second).
        let distinct: Vec<String> = (0..200_000).map(|i| format!("w{i:07}")).collect();
        let written = keyword_tsvector(&format!("{} w0000000", distinct.join(" ")));
        let kept = (MAX_TSVECTOR_LEXEME_BYTES - 2) / 12;
        assert_eq!(written.matches('\'').count(), 2 * kept);
        assert!(written.starts_with("'w0000000':1,16383 "), "{written:.40}");
        // At most 256 positions of a word.
        let written = keyword_tsvector(&vec!["r"; 300].join(" "));
        assert_eq!(written.matches(',').count(), 255);
    }

    /// A mirror one rev ahead of a read's snapshot (the handle's own add committed after the
    /// read took it) answers the read: it is not stale, and treating it as stale reloaded the
    /// whole thread at every such read, and again at the next add. A mirror behind the
    /// snapshot, of another thread, or holding an expired message does not.
    #[test]
    fn a_mirror_ahead_of_the_snapshot_answers_reads() {
        let mirror = Mirror {
            thread_id: Some(7),
            rev: 12,
            state: ThreadState::default(),
            earliest: Some(1_000),
        };
        assert!(mirror.holds(7, 12, 10));
        assert!(mirror.holds(7, 11, 10));
        assert!(!mirror.current(7, 11, 10));
        assert!(!mirror.holds(7, 13, 10));
        assert!(!mirror.holds(8, 12, 10));
        assert!(!mirror.holds(7, 12, 1_000));
    }

    /// pgvector's `vector_recv` reading of a binary vector: the components, or why not.
    fn vector_recv(bytes: &[u8]) -> Result<Vec<f32>, String> {
        let (head, rest) = bytes.split_at_checked(4).ok_or("no header")?;
        let dim = i16::from_be_bytes([head[0], head[1]]);
        let unused = i16::from_be_bytes([head[2], head[3]]);
        if unused != 0 || dim < 1 || rest.len() != usize::try_from(dim).unwrap_or(0) * 4 {
            return Err(format!("dim {dim}, unused {unused}, {} bytes", rest.len()));
        }
        Ok(rest
            .chunks_exact(4)
            .map(|c| f32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    proptest! {
        /// Every finite embedding of 1 to 16,000 components is sent bit for bit as pgvector
        /// reads it.
        #[test]
        fn binary_vectors_carry_every_finite_embedding_exactly(
            v in proptest::collection::vec(
                any::<f32>().prop_filter("finite", |x| x.is_finite()), 1..2100)
        ) {
            let sent = PgVector::new(Some(&v)).expect("a finite embedding is representable");
            let back = vector_recv(&sent.0).expect("well-formed");
            prop_assert_eq!(back.len(), v.len());
            for (a, b) in back.iter().zip(&v) {
                prop_assert_eq!(a.to_bits(), b.to_bits());
            }
        }

        /// What a `vector` cannot hold is not sent as one (the row keeps only its exact bytes).
        #[test]
        fn unrepresentable_embeddings_have_no_binary_vector(
            mut v in proptest::collection::vec(-1.0f32..1.0, 1..64),
            at in any::<prop::sample::Index>(),
            bad in prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY)],
        ) {
            let i = at.index(v.len());
            v[i] = bad;
            prop_assert!(PgVector::new(Some(&v)).is_none());
            prop_assert!(PgVector::new(Some(&[])).is_none());
            prop_assert!(PgVector::new(None).is_none());
        }
    }

    /// A message with `numbers` as its embedding, as ingest builds it from a JSON value.
    fn message_with(numbers: &[f64]) -> Msg {
        let factory = crate::clock::test_factory();
        let embedding: Vec<Value> = numbers
            .iter()
            .map(|&x| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number))
            .collect();
        factory
            .msg("n", "c")
            .extra("before", 1)
            .extra(mnemon_types::msg::EMBEDDING_KEY, Value::Array(embedding))
            .extra("after", true)
            .build()
            .expect("a valid message")
    }

    /// What a row stores of `entry` and reads back: the body through `from_object`, and the
    /// numbers through their form (without the database, which only keeps the `f32`s).
    fn stored_and_read(entry: &Entry) -> (i16, Entry) {
        let stored = StoredMessage::of(entry).expect("stored");
        let factory = crate::clock::test_factory();
        let value: Value = serde_json::from_str(&stored.body).expect("json");
        let object = value.as_object().expect("object");
        let msg = factory
            .from_object(object, entry.msg_without_embedding().kind(), 0)
            .expect("message");
        let read = if stored.form == FORM_IN_BODY {
            Entry::new(msg, entry.marks.clone())
        } else {
            let floats = stored.embedding.expect("the f32s");
            let numbers = join_numbers(stored.form, &floats).expect("a known form");
            Entry::from_parts(msg, numbers, entry.marks.clone()).expect("a placeholder")
        };
        (stored.form, read)
    }

    proptest! {
        /// Every embedding comes back bit for bit and the message's JSON byte for byte,
        /// whichever form stores it: `f32`s widened, `f32`s written as their shortest
        /// decimals, and any other `f64`s (kept in the body).
        #[test]
        fn stored_embeddings_rebuild_the_same_message(
            floats in proptest::collection::vec(
                any::<f32>().prop_filter("finite", |x| x.is_finite()), 1..64),
            wide in proptest::collection::vec(-1.0e300f64..1.0e300, 1..64),
            how in 0..3u8,
        ) {
            let numbers: Vec<f64> = match how {
                0 => floats.iter().map(|&f| f64::from(f)).collect(),
                1 => floats.iter().map(|f| f.to_string().parse().expect("f64")).collect(),
                _ => wide,
            };
            let msg = message_with(&numbers);
            let entry = Entry::new(msg.clone(), vec!["m".into()]);
            let (form, read) = stored_and_read(&entry);
            prop_assert_eq!(
                serde_json::to_string(&read.message()).expect("json"),
                serde_json::to_string(&msg).expect("json")
            );
            prop_assert_eq!(read.message(), msg);
            prop_assert_eq!(read.embedding(), entry.embedding());
            prop_assert_eq!(&read.marks, &entry.marks);
            let expected = match how {
                0 => FORM_WIDENED,
                // A shortest decimal may also be an `f32` widened (0.5, 0.25, …).
                1 if form == FORM_WIDENED => FORM_WIDENED,
                1 => FORM_SHORTEST,
                _ => form,
            };
            prop_assert_eq!(form, expected);
        }
    }

    #[test]
    fn each_form_is_chosen_where_it_applies() {
        let widened = f64::from(0.1_f32);
        assert_eq!(
            split_numbers(&[widened, 0.5]).map(|s| s.0),
            Some(FORM_WIDENED)
        );
        assert_eq!(split_numbers(&[0.1, 0.5]).map(|s| s.0), Some(FORM_SHORTEST));
        // More digits than an f32 holds, and beyond an f32's range: kept in the body.
        assert_eq!(split_numbers(&[0.123_456_789_012_345]), None);
        assert_eq!(split_numbers(&[1.0e300]), None);
        // A message without an embedding, or with an integer in it, keeps its body as it is.
        let factory = crate::clock::test_factory();
        for extra in [Value::Null, serde_json::json!([1, 2.5])] {
            let msg = factory
                .msg("n", "c")
                .extra(mnemon_types::msg::EMBEDDING_KEY, extra)
                .build()
                .expect("valid");
            let (form, read) = stored_and_read(&Entry::new(msg.clone(), vec![]));
            assert_eq!(form, FORM_IN_BODY);
            assert_eq!(read.message(), msg);
        }
    }

    #[test]
    fn stored_floats_read_both_columns() {
        use postgres::types::{FromSql, Type};
        let v = [0.25_f32, -1.5, 3.0e-7];
        let sent = PgVector::new(Some(&v)).expect("representable");
        let vector_type = Type::new(
            "vector".into(),
            0,
            postgres::types::Kind::Simple,
            "public".into(),
        );
        assert!(StoredFloats::accepts(&vector_type));
        assert_eq!(
            StoredFloats::from_sql(&vector_type, &sent.0)
                .expect("a vector")
                .0,
            v
        );
        let bytes = embedding_bytes(Some(&v)).expect("bytes");
        assert_eq!(
            StoredFloats::from_sql(&Type::BYTEA, &bytes)
                .expect("bytes")
                .0,
            v
        );
        assert!(StoredFloats::from_sql(&Type::BYTEA, &bytes[1..]).is_err());
        assert!(StoredFloats::from_sql(&vector_type, &sent.0[..6]).is_err());
        assert!(StoredFloats::from_sql(&vector_type, &[0]).is_err());
    }

    #[test]
    fn more_than_16000_dimensions_are_not_a_vector() {
        assert!(PgVector::new(Some(&vec![0.5; 16_000])).is_some());
        assert!(PgVector::new(Some(&vec![0.5; 16_001])).is_none());
    }
}
