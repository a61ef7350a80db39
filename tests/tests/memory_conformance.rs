//! The `Memory` conformance suite against every implementation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mnemon_memory::Memory;

mod in_memory {
    use super::*;
    use mnemon_memory::InMemoryMemory;
    use mnemon_tests::memory_conformance::test_factory;

    fn maker() -> impl Fn() -> Box<dyn Memory> {
        || Box::new(InMemoryMemory::with_factory(test_factory()))
    }

    mnemon_tests::memory_conformance_tests!(maker());
}

mod sqlite {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use mnemon_memory::{Scope, SqliteMemoryOptions, SqliteMemoryStore};
    use mnemon_tests::memory_conformance::test_factory;

    fn maker() -> impl Fn() -> Box<dyn Memory> {
        maker_with(SqliteMemoryOptions::default())
    }

    /// Every memory is a new thread of one store, opened with `options`, in a temporary
    /// directory the maker owns.
    pub(super) fn maker_with(options: SqliteMemoryOptions) -> impl Fn() -> Box<dyn Memory> {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<SqliteMemoryStore> = SqliteMemoryStore::open_with_factory(
            dir.path().join("mnemon.sqlite3"),
            options,
            test_factory(),
        )
        .unwrap();
        let next = AtomicUsize::new(0);
        move || {
            let _keep = &dir;
            let n = next.fetch_add(1, Ordering::Relaxed);
            Box::new(store.memory(Scope::session(format!("s{n}"))).unwrap())
        }
    }

    mnemon_tests::memory_conformance_tests!(maker());
}

/// The suite again with the recall index on from the first message, built inside the recall,
/// with a beam covering every thread the suite makes: each cosine top-k recall goes through
/// the index (docs/reference/memory.md#the-recall-index), and must give the exact scan's answer.
fn index_everything() -> mnemon_memory::RecallIndexOptions {
    mnemon_memory::RecallIndexOptions {
        min_messages: 0,
        ef: Some(100_000),
        background: false,
    }
}

mod in_memory_indexed {
    use super::*;
    use mnemon_memory::InMemoryMemory;
    use mnemon_tests::memory_conformance::test_factory;

    fn maker() -> impl Fn() -> Box<dyn Memory> {
        || {
            Box::new(
                InMemoryMemory::with_factory(test_factory()).with_recall_index(index_everything()),
            )
        }
    }

    mnemon_tests::memory_conformance_tests!(maker());
}

mod sqlite_indexed {
    use super::*;
    use mnemon_memory::SqliteMemoryOptions;

    fn maker() -> impl Fn() -> Box<dyn Memory> {
        super::sqlite::maker_with(SqliteMemoryOptions {
            recall_index: index_everything(),
            ..SqliteMemoryOptions::default()
        })
    }

    mnemon_tests::memory_conformance_tests!(maker());
}

/// The suite again, with every read served by a second handle: another `SqliteMemoryStore` (its own
/// connection and mirror) opened on the same file. Writes go through the first handle, so each
/// read after a write reloads the thread from the database rather than from the writer's
/// in-memory mirror; exports and `get_memory` are also checked against the first handle.
mod sqlite_second_handle {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use mnemon_memory::{
        AddOptions, AddReport, DeleteByIdReport, DeleteReport, ExportOptions, ExportTarget,
        Exported, LoadSource, MemoryError, MemoryQuery, RetrievalQuery, RetrieveOptions, Retrieved,
        Scope, SqliteMemory, SqliteMemoryOptions, SqliteMemoryStore,
    };
    use mnemon_tests::memory_conformance::test_factory;
    use mnemon_types::{Embedder, Msg};

    /// Writes through `writer`, reads through `reader`: two handles on one thread.
    struct Split {
        writer: SqliteMemory,
        reader: SqliteMemory,
    }

    impl Memory for Split {
        fn get_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<Msg>, MemoryError> {
            let read = self.reader.get_memory(query);
            assert_eq!(read, self.writer.get_memory(query), "{query:?}");
            read
        }

        fn for_each_message(
            &self,
            query: &MemoryQuery<'_>,
            f: &mut dyn FnMut(Msg) -> bool,
        ) -> Result<usize, MemoryError> {
            self.reader.for_each_message(query, f)
        }

        fn add_with(
            &self,
            items: Vec<mnemon_memory::MsgInput>,
            options: &AddOptions,
        ) -> Result<AddReport, MemoryError> {
            self.writer.add_with(items, options)
        }

        fn add_with_model(
            &self,
            items: Vec<mnemon_memory::MsgInput>,
            options: &AddOptions,
            embedding_model: &str,
        ) -> Result<AddReport, MemoryError> {
            self.writer.add_with_model(items, options, embedding_model)
        }

        fn delete(&self, indices: &[usize]) -> Result<DeleteReport, MemoryError> {
            self.writer.delete(indices)
        }

        fn delete_by_id(&self, ids: &[&str]) -> Result<DeleteByIdReport, MemoryError> {
            self.writer.delete_by_id(ids)
        }

        fn load(&self, source: LoadSource, overwrite: bool) -> Result<AddReport, MemoryError> {
            self.writer.load(source, overwrite)
        }

        fn export(
            &self,
            target: ExportTarget,
            options: &ExportOptions,
        ) -> Result<Exported, MemoryError> {
            let exported = self.reader.export(target.clone(), options)?;
            let first = match &target {
                ExportTarget::File(_) => ExportTarget::Json,
                other => other.clone(),
            };
            let written = match (&exported, self.writer.export(first, options)?) {
                (Exported::File { path, .. }, Exported::Json(text)) => {
                    assert_eq!(std::fs::read_to_string(path).unwrap(), text);
                    None
                }
                (_, other) => Some(other),
            };
            if let Some(written) = written {
                assert_eq!(exported, written, "the two handles export differently");
            }
            Ok(exported)
        }

        fn clear(&self) -> Result<(), MemoryError> {
            self.writer.clear()
        }

        fn size(&self) -> Result<usize, MemoryError> {
            self.reader.size()
        }

        fn retrieve_by_embedding(
            &self,
            query: RetrievalQuery,
            options: &RetrieveOptions,
            embedder: Option<&dyn Embedder>,
        ) -> Result<Vec<Retrieved>, MemoryError> {
            self.reader.retrieve_by_embedding(query, options, embedder)
        }

        fn get_embeddings(
            &self,
            embedder: Option<&dyn Embedder>,
        ) -> Result<Vec<Vec<f32>>, MemoryError> {
            self.reader.get_embeddings(embedder)
        }

        fn mark(&self, ids: &[&str], mark: &str) -> Result<usize, MemoryError> {
            self.writer.mark(ids, mark)
        }

        fn unmark(&self, ids: Option<&[&str]>, mark: &str) -> Result<usize, MemoryError> {
            self.writer.unmark(ids, mark)
        }

        fn marks_of(&self, id: &str) -> Result<Option<Vec<String>>, MemoryError> {
            let read = self.reader.marks_of(id);
            assert_eq!(read, self.writer.marks_of(id), "marks of {id}");
            read
        }

        fn delete_by_mark(&self, mark: &str) -> Result<DeleteByIdReport, MemoryError> {
            self.writer.delete_by_mark(mark)
        }
    }

    fn maker() -> impl Fn() -> Box<dyn Memory> {
        maker_with(mnemon_memory::RecallIndexOptions::default())
    }

    fn maker_with(recall_index: mnemon_memory::RecallIndexOptions) -> impl Fn() -> Box<dyn Memory> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let open = || -> Arc<SqliteMemoryStore> {
            SqliteMemoryStore::open_with_factory(
                &path,
                SqliteMemoryOptions {
                    recall_index: recall_index.clone(),
                    ..SqliteMemoryOptions::default()
                },
                test_factory(),
            )
            .unwrap()
        };
        let (first, second) = (open(), open());
        let next = AtomicUsize::new(0);
        move || {
            let _keep = &dir;
            let scope = Scope::session(format!("s{}", next.fetch_add(1, Ordering::Relaxed)));
            Box::new(Split {
                writer: first.memory(scope.clone()).unwrap(),
                reader: second.memory(scope).unwrap(),
            })
        }
    }

    mnemon_tests::memory_conformance_tests!(maker());

    /// Again with the recall index on from the first message: the second handle's top-k
    /// recalls stream the stored vectors through the store's recall indexes.
    mod indexed {
        use super::*;

        mnemon_tests::memory_conformance_tests!(maker_with(super::super::index_everything()));
    }
}

/// The tenant-isolation check (issue 13, item 3) against the SQLite memory: one file, a store
/// per namespace.
mod sqlite_tenants {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use mnemon_memory::{Memory, Namespace, Scope, SqliteMemoryOptions, SqliteMemoryStore};
    use mnemon_tests::memory_conformance::{TenantStores, tenant_isolation, test_factory};

    struct Stores {
        path: PathBuf,
        open: Mutex<HashMap<String, Arc<SqliteMemoryStore>>>,
    }

    impl Stores {
        fn store(&self, namespace: &str) -> Arc<SqliteMemoryStore> {
            let mut open = self.open.lock().unwrap();
            Arc::clone(open.entry(namespace.to_owned()).or_insert_with(|| {
                let options = SqliteMemoryOptions {
                    namespace: Namespace::new(namespace).unwrap(),
                    ..SqliteMemoryOptions::default()
                };
                SqliteMemoryStore::open_with_factory(&self.path, options, test_factory()).unwrap()
            }))
        }
    }

    impl TenantStores for Stores {
        fn memory(&self, namespace: &str, session: &str) -> Box<dyn Memory> {
            Box::new(
                self.store(namespace)
                    .memory(Scope::session(session))
                    .unwrap(),
            )
        }

        fn existing(&self, namespace: &str, session: &str) -> Option<Box<dyn Memory>> {
            let found = self
                .store(namespace)
                .existing_memory(Scope::session(session));
            found.unwrap().map(|m| Box::new(m) as Box<dyn Memory>)
        }

        fn sessions(&self, namespace: &str) -> Vec<String> {
            let threads = self.store(namespace).threads().unwrap();
            threads.into_iter().filter_map(|s| s.session_id).collect()
        }

        fn drop_session(&self, namespace: &str, session: &str) -> bool {
            let dropped = self.store(namespace).drop_thread(&Scope::session(session));
            dropped.unwrap()
        }
    }

    #[test]
    fn tenant_isolation_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        tenant_isolation(&Stores {
            path: dir.path().join("mnemon.sqlite3"),
            open: Mutex::new(HashMap::new()),
        });
    }
}

/// The suite and the tenant check against the PostgreSQL memory on the tests' own server
/// (docs/postgres.md), a fresh database per test: with pgvector (embeddings also in a `vector`
/// column with HNSW indexes) and with the index turned off (exact scoring only).
mod postgres {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use mnemon_memory::{
        Memory, Namespace, PostgresMemoryOptions, PostgresMemoryStore, Scope, VectorMode,
    };
    use mnemon_tests::memory_conformance::{TenantStores, tenant_isolation, test_factory};
    use mnemon_tests::postgres::PgServer;

    /// With `vector_index`, every recall cut that the HNSW path can answer goes through it
    /// (`hnsw_min_messages: 0`), so the suite checks that path's results on every case.
    fn open(url: &str, namespace: &str, vector_index: bool) -> Arc<PostgresMemoryStore> {
        let options = PostgresMemoryOptions {
            namespace: Namespace::new(namespace).unwrap(),
            vector_index,
            hnsw_min_messages: 0,
            ..PostgresMemoryOptions::default()
        };
        PostgresMemoryStore::open_with_factory(url, options, test_factory())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every memory is a new thread of one store on a fresh database.
    pub(super) fn maker(server: &PgServer, vector_index: bool) -> impl Fn() -> Box<dyn Memory> {
        let url = server.fresh_database("memory").unwrap();
        let store = open(&url, "default", vector_index);
        assert_eq!(
            matches!(store.vector_mode(), VectorMode::Pgvector { .. }),
            vector_index,
            "{:?}",
            store.vector_mode()
        );
        let next = AtomicUsize::new(0);
        move || {
            let n = next.fetch_add(1, Ordering::Relaxed);
            Box::new(store.memory(Scope::session(format!("s{n}"))).unwrap())
        }
    }

    mod pgvector {
        use super::*;
        mnemon_tests::memory_conformance_tests!({
            let server = mnemon_tests::require_postgres!();
            maker(server, true)
        });
    }

    mod exact {
        use super::*;
        mnemon_tests::memory_conformance_tests!({
            let server = mnemon_tests::require_postgres!();
            maker(server, false)
        });
    }

    struct Stores {
        url: String,
        open: Mutex<HashMap<String, Arc<PostgresMemoryStore>>>,
    }

    impl Stores {
        fn store(&self, namespace: &str) -> Arc<PostgresMemoryStore> {
            let mut stores = self.open.lock().unwrap();
            let store = stores
                .entry(namespace.to_owned())
                .or_insert_with(|| open(&self.url, namespace, true));
            Arc::clone(store)
        }
    }

    impl TenantStores for Stores {
        fn memory(&self, namespace: &str, session: &str) -> Box<dyn Memory> {
            Box::new(
                self.store(namespace)
                    .memory(Scope::session(session))
                    .unwrap(),
            )
        }

        fn existing(&self, namespace: &str, session: &str) -> Option<Box<dyn Memory>> {
            let found = self
                .store(namespace)
                .existing_memory(Scope::session(session));
            found.unwrap().map(|m| Box::new(m) as Box<dyn Memory>)
        }

        fn sessions(&self, namespace: &str) -> Vec<String> {
            let threads = self.store(namespace).threads().unwrap();
            threads.into_iter().filter_map(|s| s.session_id).collect()
        }

        fn drop_session(&self, namespace: &str, session: &str) -> bool {
            let dropped = self.store(namespace).drop_thread(&Scope::session(session));
            dropped.unwrap()
        }
    }

    #[test]
    fn tenant_isolation_postgres() {
        let server = mnemon_tests::require_postgres!();
        tenant_isolation(&Stores {
            url: server.fresh_database("memory_tenants").unwrap(),
            open: Mutex::new(HashMap::new()),
        });
    }
}

/// Thread summaries (docs/reference/memory.md#thread-summaries): one test body, run against
/// the SQLite and the PostgreSQL stores.
mod summaries {
    use std::collections::HashSet;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use mnemon_db::{Expiry, ManualClock};
    use mnemon_filter::Filter;
    use mnemon_memory::{
        Forgotten, LoadSource, Memory, MemoryError, RetrievalQuery, RetrieveOptions, Scope,
        ScopeFilter, SearchHit, SearchRequest, SearchResults, ThreadPage, ThreadSummary,
    };
    use serde_json::json;

    /// The stores of one database, by namespace.
    pub(super) trait SummaryStores {
        /// The memory of `scope` in `namespace`, creating the thread.
        fn memory(&self, namespace: &str, scope: &Scope) -> Box<dyn Memory>;
        /// `thread_summaries` of `namespace`'s store.
        fn summaries(
            &self,
            namespace: &str,
            limit: usize,
            after: Option<&str>,
        ) -> Result<ThreadPage, MemoryError>;
        /// `drop_thread` of `namespace`'s store.
        fn drop_thread(&self, namespace: &str, scope: &Scope) -> bool;
        /// `search` of `namespace`'s store, with a vector query.
        fn search(
            &self,
            namespace: &str,
            within: &ScopeFilter,
            query: Vec<f32>,
            top_k: usize,
        ) -> Result<Vec<SearchHit>, MemoryError>;
        /// `search_with` of `namespace`'s store.
        fn search_with(
            &self,
            namespace: &str,
            request: &SearchRequest,
        ) -> Result<Vec<SearchHit>, MemoryError> {
            self.search_results(namespace, request).map(|r| r.hits)
        }
        /// `search_with` of `namespace`'s store, whole: the hits and whether they are complete.
        fn search_results(
            &self,
            namespace: &str,
            request: &SearchRequest,
        ) -> Result<SearchResults, MemoryError>;
        /// `forget` of `namespace`'s store.
        fn forget(&self, namespace: &str, within: &ScopeFilter) -> Result<Forgotten, MemoryError>;
        /// The result of `sql`, a `SELECT` of one integer, run on the database directly.
        fn count(&self, sql: &str) -> i64;
        /// Every memory table with a `thread_id` column, `memory_threads` excepted.
        fn thread_tables(&self) -> Vec<String>;
        /// The clock of every store handle (it starts at 0; nothing expires unless asked to).
        fn clock(&self) -> &ManualClock;
        /// `gc` of `namespace`'s store.
        fn gc(&self, namespace: &str) -> Result<u64, MemoryError>;
        /// The memory of `scope` through a new store handle of `namespace` whose default
        /// time-to-live is `ttl`.
        fn memory_with_ttl(&self, namespace: &str, ttl: Duration, scope: &Scope)
        -> Box<dyn Memory>;
        /// `existing_memory` of `namespace`'s store: a fresh handle, nothing mirrored yet.
        fn fresh(&self, namespace: &str, scope: &Scope) -> Box<dyn Memory>;
        /// How many messages the keyword index holds (SQLite: rows of `memory_fts`;
        /// PostgreSQL: messages with a `search_tsv`).
        fn keyword_index_rows(&self) -> i64;
        /// `reembed` of `namespace`'s store.
        fn reembed(
            &self,
            namespace: &str,
            within: &ScopeFilter,
            embedder: &dyn mnemon_types::Embedder,
            batch: usize,
            progress: &mut dyn FnMut(u64, u64),
        ) -> Result<u64, MemoryError>;
        /// `search_with` of `namespace`'s store with an embedder.
        fn search_embedded(
            &self,
            namespace: &str,
            request: &SearchRequest,
            embedder: &dyn mnemon_types::Embedder,
        ) -> Result<Vec<SearchHit>, MemoryError>;
    }

    fn now_ms() -> i64 {
        let elapsed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        i64::try_from(elapsed.as_millis()).unwrap()
    }

    /// Every page of `namespace`, `limit` at a time, checking that only the last has no
    /// cursor.
    fn all_pages(stores: &dyn SummaryStores, namespace: &str, limit: usize) -> Vec<ThreadSummary> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = stores
                .summaries(namespace, limit, after.as_deref())
                .unwrap();
            assert!(page.threads.len() <= limit);
            all.extend(page.threads.iter().cloned());
            match page.next {
                Some(next) => {
                    assert_eq!(page.threads.len(), limit, "a page before the last is full");
                    after = Some(next);
                }
                None => return all,
            }
        }
    }

    fn listed(stores: &dyn SummaryStores, namespace: &str) -> Vec<(Scope, u64)> {
        all_pages(stores, namespace, 1000)
            .into_iter()
            .map(|s| (s.scope, s.messages))
            .collect()
    }

    fn msg(id: &str) -> mnemon_memory::MsgInput {
        json!({"id": id, "name": "n", "content": format!("text of {id}"),
               "embedding": [0.5, 0.25, -1.0]})
        .into()
    }

    /// Long enough between writes that their millisecond times differ on any clock.
    fn tick() {
        std::thread::sleep(Duration::from_millis(5));
    }

    pub(super) fn thread_summaries(stores: &dyn SummaryStores) {
        let scopes = [
            Scope::session("s0"),
            Scope {
                user_id: Some("u1".into()),
                agent_id: Some("a".into()),
                session_id: Some("s1".into()),
            },
            Scope {
                user_id: Some("u10".into()),
                ..Scope::default()
            },
            Scope::default(),
            Scope {
                agent_id: Some("a".into()),
                ..Scope::default()
            },
        ];
        assert!(
            stores
                .summaries("alpha", 10, None)
                .unwrap()
                .threads
                .is_empty()
        );
        let started = now_ms();
        for (i, scope) in scopes.iter().enumerate() {
            let memory = stores.memory("alpha", scope);
            let items = (0..=i).map(|j| msg(&format!("m{j}"))).collect();
            assert_eq!(memory.add(items).unwrap().added, i + 1);
            tick();
        }
        // The same scopes in another namespace, with other counts, written after alpha's.
        for scope in scopes.iter().rev() {
            stores
                .memory("beta", scope)
                .add(vec![msg("b0"), msg("b1"), msg("b2"), msg("b3"), msg("b4")])
                .unwrap();
            tick();
        }
        let ended = now_ms();
        let alpha = all_pages(stores, "alpha", 1000);
        let want: Vec<(Scope, u64)> = scopes
            .iter()
            .enumerate()
            .rev()
            .map(|(i, s)| (s.clone(), i as u64 + 1))
            .collect();
        assert_eq!(listed(stores, "alpha"), want, "newest activity first");
        for (a, b) in alpha.iter().zip(alpha.iter().skip(1)) {
            assert!(a.last_active_ms > b.last_active_ms, "{alpha:?}");
        }
        for summary in &alpha {
            // The server's clock (PostgreSQL) is this machine's: allow a second either way.
            assert!(
                (started - 1000..=ended + 1000).contains(&summary.last_active_ms),
                "{summary:?} outside {started}..={ended}"
            );
            assert!(summary.last_active_rfc3339().ends_with('Z'));
        }
        let beta_want: Vec<(Scope, u64)> = scopes.iter().map(|s| (s.clone(), 5)).collect();
        assert_eq!(listed(stores, "beta"), beta_want);
        assert!(
            stores
                .summaries("gamma", 10, None)
                .unwrap()
                .threads
                .is_empty()
        );

        // Every kind of write moves its thread to the front; counts follow.
        let front = |namespace: &str| listed(stores, namespace)[0].clone();
        let alpha_memory = |i: usize| stores.memory("alpha", &scopes[i]);
        alpha_memory(1).add(vec![msg("new")]).unwrap();
        assert_eq!(front("alpha"), (scopes[1].clone(), 3));
        tick();
        alpha_memory(3).delete(&[0, 2]).unwrap();
        assert_eq!(front("alpha"), (scopes[3].clone(), 2));
        tick();
        assert_eq!(alpha_memory(0).mark(&["m0"], "pin").unwrap(), 1);
        assert_eq!(front("alpha"), (scopes[0].clone(), 1));
        tick();
        alpha_memory(2).clear().unwrap();
        assert_eq!(front("alpha"), (scopes[2].clone(), 0));
        tick();
        let document = serde_json::to_string(&json!([
            {"id": "l0", "name": "n", "content": "c"},
            {"id": "l1", "name": "n", "content": "c"}
        ]))
        .unwrap();
        alpha_memory(4)
            .load(LoadSource::Json(document.clone()), true)
            .unwrap();
        assert_eq!(front("alpha"), (scopes[4].clone(), 2));
        tick();
        alpha_memory(1)
            .load(LoadSource::Json(document), false)
            .unwrap();
        assert_eq!(front("alpha"), (scopes[1].clone(), 5));
        tick();
        alpha_memory(3).delete_by_id(&["m1"]).unwrap();
        assert_eq!(front("alpha"), (scopes[3].clone(), 1));
        tick();
        // A write that changes nothing (a duplicate id, a delete of nothing) is no activity.
        let before = listed(stores, "alpha");
        let times: Vec<i64> = all_pages(stores, "alpha", 1000)
            .iter()
            .map(|s| s.last_active_ms)
            .collect();
        assert_eq!(alpha_memory(0).add(vec![msg("m0")]).unwrap().added, 0);
        alpha_memory(0).delete_by_id(&["missing"]).unwrap();
        alpha_memory(0).unmark(None, "never-set").unwrap();
        assert_eq!(listed(stores, "alpha"), before);
        let times_after: Vec<i64> = all_pages(stores, "alpha", 1000)
            .iter()
            .map(|s| s.last_active_ms)
            .collect();
        assert_eq!(times_after, times);
        // Beta saw none of it.
        assert_eq!(listed(stores, "beta"), beta_want);

        // A dropped thread is no longer listed; creating a thread lists it, empty, in front.
        assert!(stores.drop_thread("alpha", &scopes[3]));
        assert!(!listed(stores, "alpha").iter().any(|(s, _)| *s == scopes[3]));
        tick();
        let fresh = Scope::session("fresh");
        stores.memory("alpha", &fresh);
        assert_eq!(front("alpha"), (fresh, 0));
        assert_eq!(listed(stores, "beta").len(), 5);

        // Cursors.
        for text in ["", "nonsense", "1.x", "1"] {
            assert!(
                matches!(
                    stores.summaries("alpha", 2, Some(text)),
                    Err(MemoryError::InvalidCursor { .. })
                ),
                "{text:?}"
            );
        }
        let empty = stores.summaries("alpha", 0, None).unwrap();
        assert!(empty.threads.is_empty() && empty.next.is_none());

        // Many threads, read a page at a time: each exactly once, in order.
        for i in 0..137 {
            stores.memory("many", &Scope::session(format!("t{i:03}")));
        }
        let whole = all_pages(stores, "many", 1000);
        assert_eq!(whole.len(), 137);
        for limit in [1, 7, 50, 136, 137, 138] {
            let paged = all_pages(stores, "many", limit);
            assert_eq!(paged, whole, "limit {limit}");
        }
        let unique: HashSet<&Scope> = whole.iter().map(|s| &s.scope).collect();
        assert_eq!(unique.len(), 137);
        for (a, b) in whole.iter().zip(whole.iter().skip(1)) {
            assert!(a.last_active_ms >= b.last_active_ms);
        }
        // Later threads first: their times are later or equal, and within one millisecond the
        // newest-created comes first.
        let position = |session: &str| {
            whole
                .iter()
                .position(|s| s.scope.session_id.as_deref() == Some(session))
                .unwrap()
        };
        for i in 1..137 {
            let (newer, older) = (format!("t{i:03}"), format!("t{:03}", i - 1));
            assert!(
                position(&newer) < position(&older),
                "{newer} before {older}"
            );
        }
        // A cursor from another namespace's listing only says where to start: nothing leaks.
        let beta_cursor = stores.summaries("beta", 1, None).unwrap().next.unwrap();
        let from_beta = stores.summaries("many", 1000, Some(&beta_cursor)).unwrap();
        assert!(from_beta.threads.iter().all(|s| unique.contains(&s.scope)));
    }
    /// A deterministic pseudo-random number in [-1, 1) from `seed`.
    fn unit(seed: u64) -> f32 {
        let mut x = seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(0x632B_E59B_D9B4_E019);
        x ^= x >> 31;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 29;
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vector(seed: u64, dim: usize) -> Vec<f32> {
        (0..dim as u64).map(|i| unit(seed * 131 + i)).collect()
    }

    fn scope(user: Option<&str>, agent: Option<&str>, session: Option<&str>) -> Scope {
        Scope {
            user_id: user.map(str::to_owned),
            agent_id: agent.map(str::to_owned),
            session_id: session.map(str::to_owned),
        }
    }

    /// The threads of the search data: users `u1`, `u10` (whose id starts with `u1`) and `u2`,
    /// agents, sessions, and threads without a user or without anything.
    pub(super) fn search_scopes() -> Vec<Scope> {
        vec![
            scope(Some("u1"), Some("a"), Some("s0")),
            scope(Some("u1"), Some("a"), Some("s1")),
            scope(Some("u1"), Some("b"), Some("s0")),
            scope(Some("u1"), None, Some("s2")),
            scope(Some("u10"), Some("a"), Some("s0")),
            scope(Some("u2"), Some("a"), Some("s0")),
            scope(None, Some("a"), Some("s0")),
            scope(None, None, None),
        ]
    }

    pub(super) const DIM: usize = 8;

    /// Fills `namespace` with the search data: 24 messages per thread, every 5th without an
    /// embedding, every embedded one marked `e` (the per-thread oracle's candidates), two
    /// removed (so indices are not seqs), and the same vector at index 3 of two threads (a tie
    /// across threads).
    pub(super) fn fill_search_data(stores: &dyn SummaryStores, namespace: &str) {
        for (t, scope) in search_scopes().iter().enumerate() {
            let memory = stores.memory(namespace, scope);
            let items = (0..24u64)
                .map(|i| {
                    let id = format!("t{t}m{i}");
                    let mut m = json!({"id": id, "name": "n", "content": format!("c {t} {i}")});
                    if i % 5 != 4 {
                        let seed = if i == 3 && (t == 0 || t == 2) {
                            99_999
                        } else {
                            t as u64 * 100 + i
                        };
                        m["embedding"] = json!(vector(seed, DIM));
                        m["__marks"] = json!(["e"]);
                    }
                    m.into()
                })
                .collect();
            memory.add(items).unwrap();
            memory.delete(&[1, 10]).unwrap();
        }
    }

    /// The expected hits: each selected thread's own recall (over its embedded messages),
    /// merged by score, then the threads' scope columns, then the index.
    fn oracle(
        stores: &dyn SummaryStores,
        namespace: &str,
        within: &ScopeFilter,
        query: &[f32],
        k: usize,
    ) -> Vec<(Scope, usize, f64, String)> {
        let columns = |s: &Scope| {
            [&s.user_id, &s.agent_id, &s.session_id].map(|f| f.clone().unwrap_or_default())
        };
        let mut all = Vec::new();
        for scope in search_scopes().iter().filter(|s| within.matches(s)) {
            let options = RetrieveOptions {
                top_k: None,
                preserve_order: false,
                mark: Some("e".into()),
                ..RetrieveOptions::default()
            };
            let found = stores
                .memory(namespace, scope)
                .retrieve_by_embedding(RetrievalQuery::Vector(query.to_vec()), &options, None)
                .unwrap();
            for r in found {
                all.push((scope.clone(), r.index, r.score, r.message.id().to_owned()));
            }
        }
        all.sort_by(|a, b| {
            b.2.partial_cmp(&a.2)
                .unwrap()
                .then(columns(&a.0).cmp(&columns(&b.0)))
                .then(a.1.cmp(&b.1))
        });
        all.truncate(k);
        all
    }

    fn flat(hits: &[SearchHit]) -> Vec<(Scope, usize, f64, String)> {
        hits.iter()
            .map(|h| (h.scope.clone(), h.index, h.score, h.message.id().to_owned()))
            .collect()
    }

    /// The filters the search tests run.
    pub(super) fn search_filters() -> Vec<ScopeFilter> {
        vec![
            ScopeFilter::all(),
            ScopeFilter::user("u1"),
            ScopeFilter::user("u10"),
            ScopeFilter::user("u1").agent("a"),
            ScopeFilter::all().agent("a"),
            ScopeFilter::all().session("s0"),
            ScopeFilter::user("u1").agent("a").session("s1"),
            ScopeFilter::user("nobody"),
        ]
    }

    /// Issue 16: the stores keep the threads' stored vectors in memory between searches
    /// (`crate::vector_scan` of mnemon-memory), and every search still answers from the
    /// database's present state: after a warm search, an add through another store handle, a
    /// delete, a message expiring, a forget and a dropped thread are each seen by the next
    /// search across sessions and by the next top-k recall of a fresh handle, which equal the
    /// threads' own full recalls (the mirror path, which never reads the cache) merged, and a
    /// thread of another namespace never enters.
    pub(super) fn searches_follow_every_change(stores: &dyn SummaryStores) {
        let ns = "cached";
        let s1 = scope(Some("u1"), Some("a"), Some("c1"));
        let s2 = scope(Some("u2"), Some("a"), Some("c2"));
        let item = |id: String, v: &[f32]| -> mnemon_memory::MsgInput {
            json!({"id": id, "name": "n", "content": "c", "embedding": v}).into()
        };
        let fill = |scope: &Scope, prefix: &str, seeds: std::ops::Range<u64>| {
            stores
                .memory(ns, scope)
                .add(
                    seeds
                        .map(|i| item(format!("{prefix}{i}"), &vector(i, DIM)))
                        .collect(),
                )
                .unwrap();
        };
        fill(&s1, "a", 0..40);
        fill(&s2, "b", 100..140);
        let query = vector(7_777, DIM);
        // The same scope in another namespace holds the query itself.
        stores
            .memory("cached-other", &s1)
            .add(vec![item("intruder".into(), &query)])
            .unwrap();
        let columns = |s: &Scope| {
            [&s.user_id, &s.agent_id, &s.session_id].map(|f| f.clone().unwrap_or_default())
        };
        // The threads' own full recalls through their mirrors, merged as a search orders them.
        let expected = |scopes: &[&Scope], k: usize| {
            let mut all = Vec::new();
            for scope in scopes {
                let options = RetrieveOptions {
                    top_k: None,
                    preserve_order: false,
                    ..RetrieveOptions::default()
                };
                for r in stores
                    .memory(ns, scope)
                    .retrieve_by_embedding(RetrievalQuery::Vector(query.clone()), &options, None)
                    .unwrap()
                {
                    all.push((
                        (*scope).clone(),
                        r.index,
                        r.score,
                        r.message.id().to_owned(),
                    ));
                }
            }
            all.sort_by(|a, b| {
                b.2.partial_cmp(&a.2)
                    .unwrap()
                    .then(columns(&a.0).cmp(&columns(&b.0)))
                    .then(a.1.cmp(&b.1))
            });
            all.truncate(k);
            all
        };
        let check = |scopes: &[&Scope], step: &str| -> Vec<String> {
            let want = expected(scopes, 7);
            let got = stores
                .search(ns, &ScopeFilter::all(), query.clone(), 7)
                .unwrap();
            assert_eq!(flat(&got), want, "search after {step}");
            // A keyword search (every message's text is "c") gives every hit its index in its
            // thread, as the thread's own recall does.
            let indices: std::collections::HashMap<String, (Scope, usize)> = expected(scopes, 1000)
                .into_iter()
                .map(|(scope, index, _, id)| (id, (scope, index)))
                .collect();
            for mode in [
                mnemon_memory::SearchMode::Keyword { text: "c".into() },
                mnemon_memory::SearchMode::Hybrid {
                    text: "c".into(),
                    weights: mnemon_memory::HybridWeights::default(),
                },
            ] {
                let request = SearchRequest {
                    mode,
                    ..SearchRequest::new(
                        ScopeFilter::all(),
                        RetrievalQuery::Vector(query.clone()),
                        1000,
                    )
                };
                let hits = stores.search_with(ns, &request).unwrap();
                assert_eq!(hits.len(), indices.len(), "keyword hits after {step}");
                for hit in hits {
                    assert_eq!(
                        indices.get(hit.message.id()),
                        Some(&(hit.scope.clone(), hit.index)),
                        "keyword hit {} after {step}",
                        hit.message.id()
                    );
                }
            }
            for scope in scopes {
                let options = RetrieveOptions {
                    top_k: Some(5),
                    preserve_order: false,
                    ..RetrieveOptions::default()
                };
                let fresh: Vec<(usize, f64, String)> = stores
                    .fresh(ns, scope)
                    .retrieve_by_embedding(RetrievalQuery::Vector(query.clone()), &options, None)
                    .unwrap()
                    .iter()
                    .map(|r| (r.index, r.score, r.message.id().to_owned()))
                    .collect();
                let own: Vec<(usize, f64, String)> = expected(&[scope], 1000)
                    .into_iter()
                    .map(|(_, i, s, id)| (i, s, id))
                    .take(5)
                    .collect();
                assert_eq!(fresh, own, "fresh recall of {scope:?} after {step}");
            }
            got.iter().map(|h| h.message.id().to_owned()).collect()
        };
        check(&[&s1, &s2], "the first adds");
        // Warm now. An add through another store handle: the query itself, first.
        stores
            .memory_with_ttl(ns, Duration::from_secs(3600), &s1)
            .add(vec![item("near".into(), &query)])
            .unwrap();
        let ids = check(&[&s1, &s2], "an add through another handle");
        assert_eq!(ids.first().map(String::as_str), Some("near"));
        // A delete, of it and of the thread's first message (every index moves).
        stores
            .memory(ns, &s1)
            .delete_by_id(&["near", "a0"])
            .unwrap();
        let ids = check(&[&s1, &s2], "a delete");
        assert!(!ids.iter().any(|id| id == "near" || id == "a0"), "{ids:?}");
        // A message that expires, followed by one that does not: once it expired, it is gone
        // and the other's index moves down.
        let ttl = Duration::from_millis(10);
        stores
            .memory_with_ttl(ns, ttl, &s2)
            .add(vec![item("brief".into(), &query)])
            .unwrap();
        stores
            .memory(ns, &s2)
            .add(vec![item("after".into(), &query)])
            .unwrap();
        let ids = check(&[&s1, &s2], "an add that will expire");
        assert_eq!(&ids[..2], ["brief", "after"]);
        stores.clock().advance(ttl * 2);
        let ids = check(&[&s1, &s2], "the expiry");
        assert_eq!(ids.first().map(String::as_str), Some("after"));
        assert!(!ids.iter().any(|id| id == "brief"), "{ids:?}");
        // A forget of one user, then a dropped thread.
        stores.forget(ns, &ScopeFilter::user("u2")).unwrap();
        let ids = check(&[&s1], "a forget");
        assert!(ids.iter().all(|id| id.starts_with('a')), "{ids:?}");
        assert!(stores.drop_thread(ns, &s1));
        assert!(
            stores
                .search(ns, &ScopeFilter::all(), query.clone(), 7)
                .unwrap()
                .is_empty()
        );
    }

    pub(super) fn search_across_sessions(stores: &dyn SummaryStores) {
        fill_search_data(stores, "alpha");
        // The same data in another namespace, plus a thread of exact matches there.
        fill_search_data(stores, "beta");
        let queries: Vec<Vec<f32>> = vec![vector(99_999, DIM), vector(4242, DIM), vector(205, DIM)];
        let intruder = stores.memory("beta", &scope(Some("u1"), Some("a"), Some("s0x")));
        intruder
            .add(
                queries
                    .iter()
                    .enumerate()
                    .map(|(i, q)| {
                        json!({"id": format!("x{i}"), "name": "n", "content": "c",
                                         "embedding": q})
                        .into()
                    })
                    .collect(),
            )
            .unwrap();
        for query in &queries {
            for within in search_filters() {
                for k in [1, 3, 10, 1000] {
                    let want = oracle(stores, "alpha", &within, query, k);
                    let got = stores.search("alpha", &within, query.clone(), k).unwrap();
                    assert_eq!(flat(&got), want, "{within:?} k={k}");
                    for hit in &got {
                        assert!(within.matches(&hit.scope), "{hit:?} outside {within:?}");
                        // The message is whole: its embedding came back with it.
                        assert!(hit.message.embedding().is_some());
                    }
                }
            }
        }
        // All embedded messages: 8 threads × (24 − 2 removed) messages, those without an
        // embedding skipped.
        let everything = stores
            .search("alpha", &ScopeFilter::all(), queries[0].clone(), 10_000)
            .unwrap();
        let embedded_per_thread = (0..24)
            .filter(|i| i % 5 != 4 && *i != 1 && *i != 10)
            .count();
        assert_eq!(everything.len(), 8 * embedded_per_thread);
        // u1 never reaches u10.
        let u1 = stores
            .search(
                "alpha",
                &ScopeFilter::user("u1"),
                queries[0].clone(),
                10_000,
            )
            .unwrap();
        assert_eq!(u1.len(), 4 * embedded_per_thread);
        assert!(u1.iter().all(|h| h.scope.user_id.as_deref() == Some("u1")));
        // The tie at index 3 of threads 0 and 2 (same vector, score 1 for query 0): thread 0's
        // scope (agent "a") sorts before thread 2's (agent "b").
        let ties: Vec<(Scope, usize)> =
            u1[..2].iter().map(|h| (h.scope.clone(), h.index)).collect();
        assert_eq!(
            ties,
            [
                (scope(Some("u1"), Some("a"), Some("s0")), 2),
                (scope(Some("u1"), Some("b"), Some("s0")), 2)
            ]
        );
        // Beta's exact matches stay in beta.
        let best = stores
            .search("beta", &ScopeFilter::user("u1"), queries[1].clone(), 1)
            .unwrap();
        assert_eq!(best[0].message.id(), "x1");
        assert!((best[0].score - 1.0).abs() < 1e-6);
        let alpha_best = stores
            .search("alpha", &ScopeFilter::user("u1"), queries[1].clone(), 1)
            .unwrap();
        assert_ne!(alpha_best[0].message.id(), "x1");
        assert!(
            stores
                .search("gamma", &ScopeFilter::all(), queries[0].clone(), 5)
                .unwrap()
                .is_empty()
        );

        // Bad input.
        assert!(
            stores
                .search("alpha", &ScopeFilter::all(), queries[0].clone(), 0)
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            stores.search("alpha", &ScopeFilter::all(), Vec::new(), 3),
            Err(MemoryError::InvalidQuery { .. })
        ));
        assert!(matches!(
            stores.search("alpha", &ScopeFilter::user(""), queries[0].clone(), 3),
            Err(MemoryError::InvalidScope { .. })
        ));
        // Another dimension among the selected threads is an error, as in a thread's recall;
        // a filter that leaves that thread out is not.
        stores
            .memory("alpha", &scope(Some("u3"), None, Some("short")))
            .add(vec![
                json!({"id": "short", "name": "n", "content": "c",
                             "embedding": [0.5, 0.5]})
                .into(),
            ])
            .unwrap();
        assert!(matches!(
            stores.search("alpha", &ScopeFilter::all(), queries[0].clone(), 3),
            Err(MemoryError::DimensionMismatch {
                expected: 8,
                found: 2,
                ..
            })
        ));
        assert_eq!(
            flat(
                &stores
                    .search("alpha", &ScopeFilter::user("u1"), queries[0].clone(), 3)
                    .unwrap()
            ),
            oracle(stores, "alpha", &ScopeFilter::user("u1"), &queries[0], 3)
        );
    }

    /// A filtered top-k whose user's messages are all farther from the query than 1,500
    /// other users' ones: the search still returns `k` of that user's.
    /// The query of [`search_reaches_past_other_users`].
    pub(super) fn crowd_query() -> Vec<f32> {
        vector(1, DIM)
    }

    pub(super) fn search_reaches_past_other_users(stores: &dyn SummaryStores) {
        let query = crowd_query();
        for batch in 0..3u64 {
            let memory = stores.memory(
                "crowd",
                &scope(Some("near"), None, Some(&format!("n{batch}"))),
            );
            let items = (0..500u64)
                .map(|i| {
                    // The query, nudged: cosine above 0.99.
                    let nudge = vector(10_000 + batch * 1000 + i, DIM);
                    let e: Vec<f32> = query
                        .iter()
                        .zip(&nudge)
                        .map(|(q, n)| q + 0.01 * n)
                        .collect();
                    json!({"id": format!("n{batch}-{i}"), "name": "n", "content": "c",
                           "embedding": e})
                    .into()
                })
                .collect();
            memory.add(items).unwrap();
        }
        let far = stores.memory("crowd", &scope(Some("target"), Some("a"), Some("t")));
        let opposite: Vec<f32> = query.iter().map(|q| -q).collect();
        far.add(
            (0..30u64)
                .map(|i| {
                    let nudge = vector(90_000 + i, DIM);
                    let e: Vec<f32> = opposite
                        .iter()
                        .zip(&nudge)
                        .map(|(q, n)| q + 0.3 * n)
                        .collect();
                    json!({"id": format!("t{i}"), "name": "n", "content": "c",
                           "embedding": e})
                    .into()
                })
                .collect(),
        )
        .unwrap();
        for k in [1, 10, 30] {
            let hits = stores
                .search("crowd", &ScopeFilter::user("target"), query.clone(), k)
                .unwrap();
            assert_eq!(hits.len(), k);
            assert!(
                hits.iter()
                    .all(|h| h.scope.user_id.as_deref() == Some("target"))
            );
            let want = oracle_on(
                stores,
                "crowd",
                &scope(Some("target"), Some("a"), Some("t")),
                &query,
                k,
            );
            assert_eq!(flat(&hits), want);
        }
        // Unfiltered, the near ones win.
        let hits = stores
            .search("crowd", &ScopeFilter::all(), query.clone(), 10)
            .unwrap();
        assert!(
            hits.iter()
                .all(|h| h.scope.user_id.as_deref() == Some("near"))
        );
        assert!(hits.iter().all(|h| h.score > 0.99));
    }

    /// The document a filter sees for a hit: the message as stored (without its vector) and
    /// its marks (docs/reference/memory.md#filters).
    fn filter_document(
        stores: &dyn SummaryStores,
        namespace: &str,
        hit: &SearchHit,
    ) -> serde_json::Value {
        let mut doc = serde_json::to_value(&hit.message).unwrap();
        let object = doc.as_object_mut().unwrap();
        object.remove("embedding");
        let marks = stores
            .memory(namespace, &hit.scope)
            .marks_of(hit.message.id())
            .unwrap()
            .unwrap();
        object.insert("marks".into(), json!(marks));
        doc
    }

    /// Fills `namespace` with messages carrying metadata: roles, names, timestamps, marks,
    /// extra fields, in the threads of the search data, every one embedded.
    fn fill_metadata(stores: &dyn SummaryStores, namespace: &str) {
        let names = ["Mara", "Harbourmaster", "Élodie"];
        let topics = ["ferry", "weather", "tides"];
        for (t, scope) in search_scopes().iter().enumerate() {
            let memory = stores.memory(namespace, scope);
            let items = (0..24u64)
                .map(|i| {
                    let n = t as u64 * 24 + i;
                    let mut m = json!({
                        "id": format!("t{t}m{i}"),
                        "name": names[(n % 3) as usize],
                        "role": if i % 2 == 0 { "user" } else { "assistant" },
                        "content": format!("message {i} of thread {t}"),
                        "timestamp": format!("2024-03-{:02} 08:{:02}:00", 1 + n % 28, i),
                        "metadata": {"topic": topics[(n % 3) as usize], "n": n,
                                     "tags": if i % 2 == 0 { json!(["a", "b"]) } else { json!([]) }},
                        "embedding": vector(n + 5, DIM),
                    });
                    if i % 4 == 0 {
                        m["__marks"] = json!(["pin"]);
                    }
                    if i % 5 == 0 {
                        m["lang"] = json!("fr");
                    }
                    m.into()
                })
                .collect();
            memory.add(items).unwrap();
            memory.delete(&[3]).unwrap();
        }
    }

    /// Issue 14, item 2: a filter on any field of a message (role, name, timestamp, marks, id,
    /// metadata, an extra field) gives exactly the unfiltered ranking's matching messages, in
    /// its order, cut to `k` after the filter.
    pub(super) fn filtered_search(stores: &dyn SummaryStores) {
        fill_metadata(stores, "meta");
        fill_metadata(stores, "other");
        let filters = [
            json!({"eq": {"path": "role", "value": "user"}}),
            json!({"in": {"path": "name", "values": ["Mara", "Élodie"]}}),
            json!({"gte": {"path": "timestamp", "value": "2024-03-20"}}),
            json!({"contains": {"path": "marks", "value": "pin"}}),
            json!({"not": {"contains": {"path": "marks", "value": "pin"}}}),
            json!({"nin": {"path": "id", "values": ["t0m0", "t0m2", "t1m4"]}}),
            json!({"eq": {"path": "metadata.topic", "value": "ferry"}}),
            json!({"and": [{"gt": {"path": "metadata.n", "value": 40}},
                           {"lt": {"path": "metadata.n", "value": 120.5}}]}),
            json!({"contains": {"path": "metadata.tags", "value": "b"}}),
            json!({"eq": {"path": "metadata.tags[1]", "value": "b"}}),
            json!({"exists": "lang"}),
            json!({"or": [{"eq": {"path": "lang", "value": "fr"}},
                          {"ne": {"path": "role", "value": "user"}}]}),
            json!({"eq": {"path": "nothing.here", "value": 1}}),
        ];
        let query = vector(77, DIM);
        let everything = stores
            .search("meta", &ScopeFilter::all(), query.clone(), 100_000)
            .unwrap();
        assert_eq!(everything.len(), 8 * 23);
        let documents: Vec<serde_json::Value> = everything
            .iter()
            .map(|h| filter_document(stores, "meta", h))
            .collect();
        for filter in &filters {
            let parsed = Filter::parse(filter).unwrap();
            for within in search_filters() {
                for k in [1, 7, 1000] {
                    let want: Vec<_> = everything
                        .iter()
                        .zip(&documents)
                        .filter(|(h, doc)| within.matches(&h.scope) && parsed.matches(doc))
                        .map(|(h, _)| h.clone())
                        .take(k)
                        .collect();
                    let request = SearchRequest::new(
                        within.clone(),
                        RetrievalQuery::Vector(query.clone()),
                        k,
                    )
                    .with_filter(parsed.clone());
                    let got = stores.search_with("meta", &request).unwrap();
                    assert_eq!(flat(&got), flat(&want), "{filter} {within:?} k={k}");
                }
            }
        }
        // A field messages have no place for is refused, with the path in the message.
        let request = SearchRequest::new(ScopeFilter::all(), RetrievalQuery::Vector(query), 3)
            .with_filter(
                Filter::parse(&json!({"and": [{"exists": "role"},
                                              {"eq": {"path": "embedding[0]", "value": 1}}]}))
                .unwrap(),
            );
        match stores.search_with("meta", &request) {
            Err(MemoryError::InvalidFilter { detail }) => {
                assert!(
                    detail.contains("and[1]") && detail.contains("embedding"),
                    "{detail}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    /// Issue 14, done when: a filtered top-k that must reach past 1,000 non-matching nearer
    /// vectors still returns `k` hits, the matching ones in order, with their indices in their
    /// thread (the filtered-out rows between them counted).
    pub(super) fn filtered_search_reaches_past_nearer_vectors(stores: &dyn SummaryStores) {
        let query = crowd_query();
        let thread = scope(Some("u"), None, Some("s"));
        let memory = stores.memory("sieve", &thread);
        let opposite: Vec<f32> = query.iter().map(|q| -q).collect();
        let items = (0..1230u64)
            .map(|i| {
                let (base, spread, topic) = if i % 41 == 7 {
                    (&opposite, 0.3, "ferry")
                } else {
                    (&query, 0.01, "noise")
                };
                let nudge = vector(20_000 + i, DIM);
                let e: Vec<f32> = base
                    .iter()
                    .zip(&nudge)
                    .map(|(q, n)| q + spread * n)
                    .collect();
                json!({"id": format!("m{i}"), "name": "n", "content": "c",
                       "metadata": {"topic": topic}, "embedding": e})
                .into()
            })
            .collect();
        memory.add(items).unwrap();
        let filter =
            Filter::parse(&json!({"eq": {"path": "metadata.topic", "value": "ferry"}})).unwrap();
        let everything = stores
            .search("sieve", &ScopeFilter::all(), query.clone(), 100_000)
            .unwrap();
        // 1,200 non-matching messages are nearer than any matching one.
        assert!(everything[..1200].iter().all(|h| h.score > 0.99));
        for k in [1, 10, 30] {
            let request =
                SearchRequest::new(ScopeFilter::all(), RetrievalQuery::Vector(query.clone()), k)
                    .with_filter(filter.clone());
            let hits = stores.search_with("sieve", &request).unwrap();
            assert_eq!(hits.len(), k);
            let want: Vec<_> = everything[1200..].iter().take(k).cloned().collect();
            assert_eq!(flat(&hits), flat(&want));
            for hit in &hits {
                let i: usize = hit.message.id()[1..].parse().unwrap();
                assert_eq!((i % 41, hit.index), (7, i));
            }
        }
    }

    /// The ids a memory reads, every way it can be read: all, the recent ones, rendered,
    /// exported, recalled (with indices), within a token budget, and by mark.
    fn every_read(memory: &dyn Memory) -> Vec<String> {
        use mnemon_memory::{
            BudgetOptions, ExportOptions, ExportTarget, Exported, MemoryQuery, WhitespaceTokenizer,
        };
        let all: Vec<String> = memory
            .get_memory(&MemoryQuery::default())
            .unwrap()
            .iter()
            .map(|m| m.id().to_owned())
            .collect();
        assert_eq!(memory.size().unwrap(), all.len());
        let recent: Vec<String> = memory
            .get_memory(&MemoryQuery {
                recent_n: Some(2),
                ..MemoryQuery::default()
            })
            .unwrap()
            .iter()
            .map(|m| m.id().to_owned())
            .collect();
        assert_eq!(recent, all[all.len().saturating_sub(2)..]);
        let rendered = memory.render(&MemoryQuery::default()).unwrap();
        assert_eq!(rendered.lines().count(), all.len(), "{rendered}");
        let Exported::Json(text) = memory
            .export(ExportTarget::Json, &ExportOptions::default())
            .unwrap()
        else {
            panic!("text expected")
        };
        let exported: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        let exported: Vec<&str> = exported.iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(exported, all);
        for top_k in [Some(1), Some(100), None] {
            let options = RetrieveOptions {
                top_k,
                preserve_order: true,
                ..RetrieveOptions::default()
            };
            let recalled = memory
                .retrieve_by_embedding(RetrievalQuery::Vector(vec![1.0, 0.0, 0.0]), &options, None)
                .unwrap();
            for r in &recalled {
                assert_eq!(all[r.index], r.message.id(), "{top_k:?}");
            }
            if top_k != Some(1) {
                assert_eq!(recalled.len(), all.len());
            }
        }
        let budget = memory
            .recall_within_budget(1000, &WhitespaceTokenizer, &BudgetOptions::default())
            .unwrap();
        assert_eq!(budget.messages.len(), all.len());
        let pinned: Vec<String> = memory
            .get_memory(&MemoryQuery {
                mark: Some("pin"),
                ..MemoryQuery::default()
            })
            .unwrap()
            .iter()
            .map(|m| m.id().to_owned())
            .collect();
        for id in &pinned {
            assert!(all.contains(id));
        }
        all
    }

    /// A message's own fields named `"__expires_at"` and `"__embedding_model"` (a message may
    /// hold any extra field) are not taken for what the stored export carries under those
    /// names: the export writes the store's own (`null` when it has none), so a backup's
    /// round trip keeps the message live (its field `1` made it expire in 1970, and the next
    /// sweep deleted it) and a field of another type does not stop the export of the thread.
    pub(super) fn own_fields_named_like_stored_ones(stores: &dyn SummaryStores) {
        use mnemon_memory::{ExportFormat, ExportOptions, ExportTarget, Exported};
        let t0 = 1_700_000_000_000;
        stores.clock().set(t0);
        let s = scope(Some("u"), None, Some("own-fields"));
        let memory = stores.memory("of", &s);
        // Inside a `List`, an item's keys are its own fields (a plain object's are read as the
        // stored ones, and refused when not of their type).
        let own = |mut fields: serde_json::Value| {
            fields["__type"] = json!("Msg");
            json!({"__type": "List", "__value": [fields.to_string()]})
        };
        memory
            .add(vec![
                own(
                    json!({"id": "a", "name": "n", "content": "one", "embedding": [1.0, 0.5, 0.25],
                           "__expires_at": 1, "__embedding_model": 7}),
                )
                .into(),
                own(
                    json!({"id": "b", "name": "n", "content": "two", "embedding": [0.5, 1.0, 0.25],
                           "__expires_at": "x"}),
                )
                .into(),
            ])
            .unwrap();
        assert_eq!(every_read(&*memory), ["a", "b"]);
        let options = ExportOptions {
            include_marks: true,
            format: ExportFormat::AgentScope00Stored,
        };
        let stored = match memory.export(ExportTarget::Json, &options).unwrap() {
            Exported::Json(text) => text,
            other => panic!("{other:?}"),
        };
        let copy = scope(Some("u"), None, Some("own-fields-copy"));
        let loaded = stores.memory("of", &copy);
        assert_eq!(
            loaded.load(LoadSource::Json(stored), false).unwrap().added,
            2
        );
        assert_eq!(every_read(&*loaded), ["a", "b"]);
        assert_eq!(every_read(&*stores.fresh("of", &copy)), ["a", "b"]);
    }

    /// Issue 14, item 7: the stored export layout (`ExportFormat::AgentScope00Stored`) carries
    /// each message's expiry and embedding model beside its fields and marks, the same through a
    /// handle that mirrors the thread and through a fresh one that streams its rows; loading it
    /// into another thread restores every field of every message in order (two models and two
    /// expiries among plain messages), the loaded expiries take effect at their instant, and a
    /// memory that cannot keep an expiry refuses such a document rather than drop it.
    pub(super) fn stored_export_round_trip(stores: &dyn SummaryStores) {
        use mnemon_memory::{
            AddOptions, ExportFormat, ExportOptions, ExportTarget, Exported, InMemoryMemory,
        };
        let t0 = 1_700_000_000_000;
        stores.clock().set(t0);
        let s = scope(Some("u"), None, Some("stored"));
        let memory = stores.memory("rt", &s);
        let item = |id: &str, x: f64| -> mnemon_memory::MsgInput {
            json!({"id": id, "name": "n", "content": format!("text {id}"),
                   "embedding": [x, 1.0 / 3.0, -x]})
            .into()
        };
        let expiring = |at: i64| AddOptions {
            expiry: Expiry::At(at),
            ..AddOptions::default()
        };
        memory.add(vec![item("a", 0.1)]).unwrap();
        memory
            .add_with(vec![item("b", 0.2)], &expiring(t0 + 1_000))
            .unwrap();
        memory
            .add_with_model(vec![item("c", 0.3)], &AddOptions::default(), "model-1")
            .unwrap();
        memory
            .add_with_model(vec![item("d", 0.4)], &expiring(t0 + 2_000), "model-2")
            .unwrap();
        memory.add(vec![msg("e")]).unwrap();
        memory.mark(&["b", "d"], "pin").unwrap();
        let export = |m: &dyn Memory, format: ExportFormat| {
            let options = ExportOptions {
                include_marks: true,
                format,
            };
            match m.export(ExportTarget::Json, &options).unwrap() {
                Exported::Json(text) => text,
                other => panic!("{other:?}"),
            }
        };
        let stored = export(&*memory, ExportFormat::AgentScope00Stored);
        assert_eq!(
            export(&*stores.fresh("rt", &s), ExportFormat::AgentScope00Stored),
            stored,
            "a fresh handle's streamed export differs from the mirror's"
        );
        let fields: Vec<(String, Option<i64>, Option<String>)> =
            serde_json::from_str::<Vec<serde_json::Value>>(&stored)
                .unwrap()
                .iter()
                .map(|m| {
                    (
                        m["id"].as_str().unwrap().to_owned(),
                        m.get("__expires_at").map(|v| v.as_i64().unwrap()),
                        m.get("__embedding_model")
                            .map(|v| v.as_str().unwrap().to_owned()),
                    )
                })
                .collect();
        assert_eq!(
            fields,
            vec![
                ("a".into(), None, None),
                ("b".into(), Some(t0 + 1_000), None),
                ("c".into(), None, Some("model-1".into())),
                ("d".into(), Some(t0 + 2_000), Some("model-2".into())),
                ("e".into(), None, None),
            ]
        );

        let copy = scope(Some("u"), None, Some("copy"));
        let loaded = stores.memory("rt", &copy);
        assert_eq!(
            loaded
                .load(LoadSource::Json(stored.clone()), false)
                .unwrap()
                .added,
            5
        );
        assert_eq!(export(&*loaded, ExportFormat::AgentScope00Stored), stored);
        assert_eq!(
            export(
                &*stores.fresh("rt", &copy),
                ExportFormat::AgentScope00Stored
            ),
            stored
        );
        // The plain layout is unchanged by the stored fields.
        assert_eq!(
            export(&*loaded, ExportFormat::AgentScope00),
            export(&*memory, ExportFormat::AgentScope00)
        );
        assert!(!export(&*memory, ExportFormat::AgentScope00).contains("__expires_at"));

        // The loaded expiries are the originals', at their instant.
        stores.clock().set(t0 + 999);
        assert_eq!(every_read(&*loaded), ["a", "b", "c", "d", "e"]);
        stores.clock().set(t0 + 1_000);
        assert_eq!(every_read(&*loaded), ["a", "c", "d", "e"]);
        assert_eq!(
            every_read(&*stores.fresh("rt", &copy)),
            ["a", "c", "d", "e"]
        );
        stores.clock().set(t0 + 2_000);
        assert_eq!(every_read(&*loaded), ["a", "c", "e"]);
        assert_eq!(every_read(&*memory), ["a", "c", "e"]);

        // A memory without a clock cannot keep the expiries: the load fails whole.
        let plain = InMemoryMemory::new();
        let refused = plain.load(LoadSource::Json(stored), false);
        assert!(
            matches!(refused, Err(MemoryError::ExpiryUnsupported)),
            "{refused:?}"
        );
        assert_eq!(plain.size().unwrap(), 0);

        // Through a handle with a default time-to-live (as `mnemon --default-ttl … import`
        // opens one): a stated instant stands, `null` is never (a backup's message without an
        // expiry), and an item without the key takes the default; the same for an add whose
        // options set no expiry, while an add's own expiry wins over the item's.
        let now = t0 + 2_000;
        stores.clock().set(now);
        let ttl_scope = scope(Some("u"), None, Some("ttl"));
        let with_ttl = stores.memory_with_ttl("rt", Duration::from_millis(500), &ttl_scope);
        let document = json!([
            {"id": "never", "name": "n", "content": "x", "embedding": [1.0, 0.0, 0.0],
             "__expires_at": null},
            {"id": "default", "name": "n", "content": "y", "embedding": [0.0, 1.0, 0.0]},
            {"id": "at", "name": "n", "content": "z", "embedding": [0.0, 0.0, 1.0],
             "__expires_at": now + 10_000},
        ]);
        assert_eq!(
            with_ttl
                .load(LoadSource::Json(document.to_string()), false)
                .unwrap()
                .added,
            3
        );
        let stated = |id: &str, at: serde_json::Value| -> mnemon_memory::MsgInput {
            json!({"id": id, "name": "n", "content": id, "embedding": [0.5, 0.5, 0.0],
                   "__expires_at": at})
            .into()
        };
        with_ttl
            .add(vec![
                stated("add-never", serde_json::Value::Null),
                stated("add-at", json!(now + 10_000)),
            ])
            .unwrap();
        with_ttl
            .add_with(
                vec![stated("forced", serde_json::Value::Null)],
                &expiring(now + 100),
            )
            .unwrap();
        let all = ["never", "default", "at", "add-never", "add-at", "forced"];
        assert_eq!(every_read(&*with_ttl), all);
        stores.clock().set(now + 600);
        let after_default = ["never", "at", "add-never", "add-at"];
        assert_eq!(every_read(&*with_ttl), after_default);
        assert_eq!(every_read(&*stores.fresh("rt", &ttl_scope)), after_default);
        stores.clock().set(now + 10_000);
        assert_eq!(every_read(&*with_ttl), ["never", "add-never"]);
    }

    /// Issue 14, item 4: a message's time-to-live, judged by the store's clock at the boundary
    /// instant (live at the deadline − 1 ms, gone at the deadline) by every read, a fresh
    /// handle's streaming reads included, searches, summaries and marks; `gc` removes exactly the
    /// expired rows of its own namespace; an expired id can be added again.
    pub(super) fn expiry_at_the_boundary(stores: &dyn SummaryStores) {
        use mnemon_memory::{AddOptions, InMemoryMemory};
        let t0 = 1_700_000_000_000;
        stores.clock().set(t0);
        let s = scope(Some("u"), None, Some("s"));
        let memory = stores.memory("exp", &s);
        let add = |id: &str, x: f32, expiry: Expiry| {
            memory
                .add_with(
                    vec![
                        json!({"id": id, "name": "n", "content": format!("text {id}"),
                                "embedding": [x, 1.0 - x, 0.0]})
                        .into(),
                    ],
                    &AddOptions {
                        marks: vec!["pin".into()],
                        expiry,
                    },
                )
                .unwrap()
        };
        add("a", 0.1, Expiry::Never);
        add("b", 0.9, Expiry::After(Duration::from_millis(100)));
        add("c", 1.0, Expiry::At(t0 + 50));
        add("d", 0.5, Expiry::Default);
        // A handle with a default time-to-live: a plain add expires after it.
        stores
            .memory_with_ttl(
                "exp",
                Duration::from_millis(200),
                &scope(Some("u"), None, Some("s2")),
            )
            .add(vec![msg("e")])
            .unwrap();
        let summary = |session: &str| {
            listed(stores, "exp")
                .into_iter()
                .find(|(sc, _)| sc.session_id.as_deref() == Some(session))
                .map(|(_, n)| n)
                .unwrap()
        };
        let searched = || -> Vec<String> {
            let request = SearchRequest::new(
                ScopeFilter::all(),
                RetrievalQuery::Vector(vec![1.0, 0.0, 0.0]),
                100,
            );
            let mut ids: Vec<String> = stores
                .search_with("exp", &request)
                .unwrap()
                .iter()
                .map(|h| h.message.id().to_owned())
                .collect();
            ids.sort();
            ids
        };
        let check = |now: i64, want: &[&str], e_live: bool| {
            stores.clock().set(now);
            assert_eq!(every_read(&*memory), want, "at t0+{}", now - t0);
            assert_eq!(
                every_read(&*stores.fresh("exp", &s)),
                want,
                "fresh at t0+{}",
                now - t0
            );
            assert_eq!(summary("s"), want.len() as u64);
            assert_eq!(summary("s2"), u64::from(e_live));
            let mut all: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
            if e_live {
                all.push("e".into());
            }
            all.sort();
            assert_eq!(searched(), all, "at t0+{}", now - t0);
            for id in ["a", "b", "c", "d"] {
                assert_eq!(
                    memory.marks_of(id).unwrap().is_some(),
                    want.contains(&id),
                    "marks of {id}"
                );
            }
        };
        check(t0, &["a", "b", "c", "d"], true);
        check(t0 + 49, &["a", "b", "c", "d"], true);
        check(t0 + 50, &["a", "b", "d"], true);
        check(t0 + 99, &["a", "b", "d"], true);
        check(t0 + 100, &["a", "d"], true);
        check(t0 + 199, &["a", "d"], true);
        check(t0 + 200, &["a", "d"], false);
        // An expired id can be added again: it is a new message, at the end.
        stores.clock().set(t0 + 300);
        let report = add("b", 0.2, Expiry::Never);
        assert_eq!(report.added, 1, "{report:?}");
        assert_eq!(every_read(&*memory), ["a", "d", "b"]);
        // Another namespace's expired messages are its own gc's.
        stores
            .memory_with_ttl("exp-other", Duration::from_millis(1), &s)
            .add(vec![msg("o")])
            .unwrap();
        stores.clock().set(t0 + 1_000);
        let expired_rows = || {
            stores.count(&format!(
                "SELECT COUNT(*) FROM memory_messages WHERE expires_at <= {}",
                t0 + 1_000
            ))
        };
        // The write above removed its thread's expired rows (the first `b`, and `c`); `e` and
        // `o` are still stored, invisible.
        assert_eq!(expired_rows(), 2);
        assert_eq!(stores.gc("exp").unwrap(), 1);
        assert_eq!(expired_rows(), 1);
        assert_eq!(stores.gc("exp").unwrap(), 0);
        assert_eq!(stores.gc("exp-other").unwrap(), 1);
        assert_eq!(expired_rows(), 0);
        assert_eq!(orphans(stores), []);
        assert_eq!(every_read(&*memory), ["a", "d", "b"]);
        assert_eq!(summary("s"), 3);
        assert_eq!(summary("s2"), 0);
        // A memory without a clock refuses any expiry but never.
        let plain = InMemoryMemory::new();
        for expiry in [Expiry::After(Duration::from_secs(1)), Expiry::At(5)] {
            assert!(matches!(
                plain.add_with(
                    vec![msg("x")],
                    &AddOptions {
                        expiry,
                        ..AddOptions::default()
                    }
                ),
                Err(MemoryError::ExpiryUnsupported)
            ));
        }
        assert_eq!(plain.size().unwrap(), 0);
    }

    fn keyword(text: &str, within: ScopeFilter, k: usize) -> SearchRequest {
        SearchRequest {
            mode: mnemon_memory::SearchMode::Keyword { text: text.into() },
            ..SearchRequest::new(within, RetrievalQuery::Vector(Vec::new()), k)
        }
    }

    fn ids(hits: &[SearchHit]) -> Vec<String> {
        hits.iter().map(|h| h.message.id().to_owned()).collect()
    }

    /// A NUL (U+0000) anywhere in a message (content, metadata), next to an escaped backslash
    /// followed by `u0000` as plain text: the messages are stored, read back equal, found by
    /// the words around the NUL, and a backslash text is not taken for a NUL. (PostgreSQL's
    /// keyword column read the body as `jsonb`, which refuses U+0000: every such write failed.)
    pub(super) fn messages_with_nul(stores: &dyn SummaryStores) {
        use mnemon_memory::MemoryQuery;
        let s = scope(Some("u"), None, Some("nul"));
        let memory = stores.memory("nul", &s);
        let items: Vec<mnemon_memory::MsgInput> = vec![
            json!({"id": "a", "name": "n", "content": "before\u{0}after ferry",
                   "metadata": {"k": [1, "NUL \u{0} inside"]}})
            .into(),
            json!({"id": "b", "name": "n", "content": "slash \\u0000 tides"}).into(),
            json!({"id": "c", "name": "n", "content": [{"type": "text", "text": "x\u{0}\u{0}y harbour"}]})
                .into(),
        ];
        memory.add(items).unwrap();
        let read = memory.get_memory(&MemoryQuery::default()).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].content(), &json!("before\u{0}after ferry"));
        assert_eq!(read[1].content(), &json!("slash \\u0000 tides"));
        let fresh = stores
            .fresh("nul", &s)
            .get_memory(&MemoryQuery::default())
            .unwrap();
        assert_eq!(fresh, read);
        let found = |word: &str| {
            let mut ids = ids(&stores
                .search_with("nul", &keyword(word, ScopeFilter::all(), 10))
                .unwrap());
            ids.sort();
            ids
        };
        assert_eq!(found("ferry"), ["a"]);
        assert_eq!(found("tides"), ["b"]);
        assert_eq!(found("harbour"), ["c"]);
        // The backslash text keeps its `u0000` word; the NUL escapes are not words.
        assert_eq!(found("u0000"), ["b"]);
        // Filters read the bodies too (PostgreSQL: as `jsonb`).
        let filtered = |filter: serde_json::Value| {
            let request =
                SearchRequest::new(ScopeFilter::all(), RetrievalQuery::Vector(Vec::new()), 10);
            let request = SearchRequest {
                mode: mnemon_memory::SearchMode::Keyword {
                    text: "ferry tides harbour".into(),
                },
                ..request
            }
            .with_filter(Filter::parse(&filter).unwrap());
            let mut ids = ids(&stores.search_with("nul", &request).unwrap());
            ids.sort();
            ids
        };
        assert_eq!(
            filtered(json!({"eq": {"path": "name", "value": "n"}})),
            ["a", "b", "c"]
        );
        assert_eq!(filtered(json!({"exists": "metadata.k"})), ["a"]);
        assert_eq!(
            filtered(json!({"eq": {"path": "content", "value": "slash \\u0000 tides"}})),
            ["b"]
        );
    }

    /// Issue 14, item 3: keyword search over the messages' text (string content and text
    /// blocks), any word, case-insensitive, within the scope, filtered, never past the
    /// namespace, each hit with its index; the index kept in step with deletes, loads, forget,
    /// expiry and gc.
    pub(super) fn keyword_search(stores: &dyn SummaryStores) {
        use mnemon_memory::{AddOptions, MemoryQuery};
        let s1 = scope(Some("u1"), None, Some("s1"));
        let s2 = scope(Some("u2"), None, Some("s2"));
        let one = stores.memory("kw", &s1);
        let text = |id: &str, content: serde_json::Value, topic: &str| -> mnemon_memory::MsgInput {
            json!({"id": id, "name": "n", "content": content, "metadata": {"topic": topic}}).into()
        };
        one.add(vec![
            text("m0", json!("The ferry leaves at nine."), "travel"),
            text("m1", json!("Weather is calm today"), "weather"),
            text(
                "m2",
                json!([{"type": "text", "text": "Ferry timetable for Tuesday"},
                       {"type": "image", "url": "https://example.com/ferry.png"}]),
                "travel",
            ),
            text("m3", json!("tides and currents"), "sea"),
            text("m4", json!("FERRY ferry ferry"), "noise"),
            text("m5", json!("nothing here"), "travel"),
        ])
        .unwrap();
        stores
            .memory("kw", &s2)
            .add(vec![text("n0", json!("a ferry to the island"), "travel")])
            .unwrap();
        stores
            .memory("kw-other", &s1)
            .add(vec![text("o0", json!("ferry ferry"), "travel")])
            .unwrap();
        let search = |request: &SearchRequest| stores.search_with("kw", request).unwrap();
        let check_indices = |hits: &[SearchHit]| {
            for hit in hits {
                let all = stores
                    .fresh("kw", &hit.scope)
                    .get_memory(&MemoryQuery::default())
                    .unwrap();
                assert_eq!(all[hit.index].id(), hit.message.id(), "{hit:?}");
            }
            for pair in hits.windows(2) {
                assert!(pair[0].score >= pair[1].score, "{hits:?}");
            }
        };
        let all = search(&keyword("ferry", ScopeFilter::all(), 10));
        check_indices(&all);
        let mut found = ids(&all);
        assert_eq!(found[0], "m4", "{all:?}");
        found.sort();
        assert_eq!(found, ["m0", "m2", "m4", "n0"]);
        // Any word, any case; punctuation separates words.
        let mut any = ids(&search(&keyword(
            "TIDES, or FeRRy!",
            ScopeFilter::all(),
            10,
        )));
        any.sort();
        assert_eq!(any, ["m0", "m2", "m3", "m4", "n0"]);
        // Scope, top_k, filter.
        let u1 = search(&keyword("ferry", ScopeFilter::user("u1"), 10));
        assert_eq!(ids(&u1).len(), 3);
        assert!(u1.iter().all(|h| h.scope == s1));
        assert_eq!(
            ids(&search(&keyword("ferry", ScopeFilter::all(), 1))),
            ["m4"]
        );
        let travel = search(&keyword("ferry", ScopeFilter::all(), 10).with_filter(
            Filter::parse(&json!({"eq": {"path": "metadata.topic", "value": "travel"}})).unwrap(),
        ));
        let mut travel = ids(&travel);
        travel.sort();
        assert_eq!(travel, ["m0", "m2", "n0"]);
        // Any `top_k`, with a filter too (PostgreSQL reserved room for `top_k` winners and
        // panicked with "capacity overflow" at `usize::MAX`).
        let every = search(
            &keyword("ferry", ScopeFilter::all(), usize::MAX).with_filter(
                Filter::parse(&json!({"eq": {"path": "metadata.topic", "value": "travel"}}))
                    .unwrap(),
            ),
        );
        assert_eq!(every.len(), 3);
        assert!(search(&keyword("ferry", ScopeFilter::all(), 0)).is_empty());
        assert!(search(&keyword("submarine", ScopeFilter::all(), 5)).is_empty());
        assert!(matches!(
            stores.search_with("kw", &keyword(" !? ", ScopeFilter::all(), 5)),
            Err(MemoryError::InvalidQuery { .. })
        ));
        let in_step = || {
            assert_eq!(
                stores.keyword_index_rows(),
                stores.count("SELECT COUNT(*) FROM memory_messages")
            );
        };
        in_step();
        // Deletes, loads, expiry, gc and forget keep the index in step.
        one.delete_by_id(&["m4"]).unwrap();
        let after = search(&keyword("ferry", ScopeFilter::all(), 10));
        check_indices(&after);
        assert!(!ids(&after).contains(&"m4".to_owned()));
        in_step();
        stores
            .memory("kw", &scope(Some("u1"), None, Some("loaded")))
            .load(
                LoadSource::Json(
                    json!([{"id": "l0", "name": "n", "content": "ferry from a file"}]).to_string(),
                ),
                false,
            )
            .unwrap();
        assert!(ids(&search(&keyword("file", ScopeFilter::all(), 10))) == ["l0"]);
        stores.clock().set(1_000);
        one.add_with(
            vec![text("x0", json!("ferry that expires"), "travel")],
            &AddOptions {
                expiry: Expiry::At(1_010),
                ..AddOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            ids(&search(&keyword("expires", ScopeFilter::all(), 10))),
            ["x0"]
        );
        stores.clock().set(1_010);
        assert!(search(&keyword("expires", ScopeFilter::all(), 10)).is_empty());
        assert_eq!(stores.gc("kw").unwrap(), 1);
        in_step();
        stores.forget("kw", &ScopeFilter::user("u2")).unwrap();
        in_step();
        let mut left = ids(&search(&keyword("ferry", ScopeFilter::all(), 10)));
        left.sort();
        assert_eq!(left, ["l0", "m0", "m2"]);
        // The other namespace still has its own.
        assert_eq!(
            ids(&stores
                .search_with("kw-other", &keyword("ferry", ScopeFilter::all(), 10))
                .unwrap()),
            ["o0"]
        );
    }

    /// Which messages a keyword search finds does not depend on the backend
    /// (docs/reference/memory.md#keyword-and-hybrid-search): the words of a message are its
    /// runs of letters and digits, lower-cased, accents folded, as SQLite's FTS5 `unicode61`
    /// splits them. PostgreSQL's `simple` parser keeps emails, file names, paths, decimals and
    /// versions whole and keeps accents, so it finds none of these by their parts.
    pub(super) fn keyword_words_match_across_backends(stores: &dyn SummaryStores) {
        let s = scope(Some("u"), None, Some("words"));
        let memory = stores.memory("words", &s);
        memory
            .add(vec![
                msg_text("w0", "mail alice@example.com about it"),
                msg_text("w1", "see report.pdf please"),
                msg_text("w2", "run /usr/bin/env now"),
                msg_text("w3", "pi is 3.14 and the release 1.2.3"),
                msg_text("w4", "un café noir"),
                msg_text("w5", "plain words"),
            ])
            .unwrap();
        let found = |text: &str| {
            let mut found = ids(&stores
                .search_with("words", &keyword(text, ScopeFilter::all(), 10))
                .unwrap());
            found.sort();
            found
        };
        for (text, want) in [
            ("alice", ["w0"]),
            ("example", ["w0"]),
            ("alice@example.com", ["w0"]),
            ("report", ["w1"]),
            ("pdf", ["w1"]),
            ("usr", ["w2"]),
            ("env", ["w2"]),
            ("14", ["w3"]),
            ("2", ["w3"]),
            ("cafe", ["w4"]),
            ("café", ["w4"]),
            ("CAFÉ", ["w4"]),
            ("plain", ["w5"]),
        ] {
            assert_eq!(found(text), want, "keyword {text:?}");
        }
    }

    /// A keyword ranking reads at most `MAX_KEYWORD_MATCHES` matching messages, the newest
    /// (the latest thread first, each its latest message first), and says so when more
    /// matched; a filter applies to the messages read (docs/reference/memory.md#keyword-and-hybrid-search).
    pub(super) fn keyword_matches_are_bounded(stores: &dyn SummaryStores) {
        use mnemon_memory::{MAX_KEYWORD_MATCHES, SearchMode};
        let old = scope(Some("u-old"), None, Some("old"));
        let new = scope(Some("u-new"), None, Some("new"));
        let message = |id: String, content: &str| -> mnemon_memory::MsgInput {
            json!({"id": id, "name": "n", "content": content}).into()
        };
        // The best match by far, in the older thread.
        stores
            .memory("kwb", &old)
            .add(vec![message("best".into(), "quay quay quay quay")])
            .unwrap();
        let newer = stores.memory("kwb", &new);
        newer
            .add(
                (0..MAX_KEYWORD_MATCHES)
                    .map(|i| message(format!("n{i}"), &format!("a quay among many, number {i}")))
                    .collect(),
            )
            .unwrap();
        let quay = keyword("quay", ScopeFilter::all(), 3);
        let bounded = stores.search_results("kwb", &quay).unwrap();
        assert!(!bounded.complete, "{} matched", MAX_KEYWORD_MATCHES + 1);
        assert_eq!(bounded.hits.len(), 3);
        assert!(
            bounded.hits.iter().all(|h| h.scope == new),
            "the older thread is not read: {:?}",
            ids(&bounded.hits)
        );
        // Within the older thread's scope, every match is read.
        let own = stores
            .search_results("kwb", &keyword("quay", ScopeFilter::user("u-old"), 3))
            .unwrap();
        assert!(own.complete);
        assert_eq!(ids(&own.hits), ["best"]);
        // A filter applies to the messages read: it does not reach past the bound.
        let only_best = keyword("quay", ScopeFilter::all(), 3)
            .with_filter(Filter::parse(&json!({"eq": {"path": "id", "value": "best"}})).unwrap());
        let filtered = stores.search_results("kwb", &only_best).unwrap();
        assert!(
            filtered.hits.is_empty() && !filtered.complete,
            "{filtered:?}"
        );
        // A hybrid search reports its keyword ranking's bound; a vector search is complete.
        let hybrid = SearchRequest {
            mode: SearchMode::Hybrid {
                text: "quay".into(),
                weights: mnemon_memory::HybridWeights::default(),
            },
            ..SearchRequest::new(
                ScopeFilter::all(),
                RetrievalQuery::Vector(vec![1.0, 0.0]),
                3,
            )
        };
        assert!(!stores.search_results("kwb", &hybrid).unwrap().complete);
        let vector = SearchRequest::new(
            ScopeFilter::all(),
            RetrievalQuery::Vector(vec![1.0, 0.0]),
            3,
        );
        assert!(stores.search_results("kwb", &vector).unwrap().complete);
        // Exactly the bound: every match is read, and the best one wins.
        newer.delete_by_id(&["n0"]).unwrap();
        let all = stores.search_results("kwb", &quay).unwrap();
        assert!(all.complete);
        assert_eq!(ids(&all.hits)[0], "best", "{:?}", ids(&all.hits));
    }

    /// The fused ranking of two rankings, as docs/reference/memory.md defines it: each
    /// message's `Σ weight / (k + rank)`, ties in first-seen order (vector, then keyword).
    fn rrf(
        vector: &[SearchHit],
        keyword: &[SearchHit],
        weights: &mnemon_memory::HybridWeights,
    ) -> Vec<(String, f64)> {
        let mut fused: Vec<(String, f64)> = Vec::new();
        for (ranking, weight) in [(vector, weights.vector), (keyword, weights.keyword)] {
            for (i, hit) in ranking.iter().enumerate() {
                let share = weight / (weights.k + (i + 1) as f64);
                match fused.iter_mut().find(|(id, _)| id == hit.message.id()) {
                    Some(entry) => entry.1 += share,
                    None => fused.push((hit.message.id().to_owned(), share)),
                }
            }
        }
        // A stable sort keeps the first-seen order on ties.
        fused.sort_by(|a, b| b.1.total_cmp(&a.1));
        fused
    }

    /// Issue 14, item 3: hybrid search fuses the vector and keyword rankings by reciprocal
    /// rank (k = 60): a message second in both beats one first in only one; the scores are
    /// exactly the formula's; weights, filters and bad weights.
    pub(super) fn hybrid_search(stores: &dyn SummaryStores) {
        use mnemon_memory::{HybridWeights, SearchMode};
        let s = scope(Some("u"), None, Some("h"));
        let memory = stores.memory("hy", &s);
        let mut items = vec![
            json!({"id": "B", "name": "n", "content": "weather report",
                   "embedding": [1.0, 0.0, 0.0], "metadata": {"keep": true}}),
            json!({"id": "C", "name": "n", "content": "ferry timetable",
                   "embedding": [0.95, 0.31, 0.0], "metadata": {"keep": false}}),
        ];
        for i in 0..10 {
            let x = 0.9 - 0.08 * f64::from(i);
            items.push(json!({"id": format!("F{i}"), "name": "n",
                              "content": format!("filler words {i}"),
                              "embedding": [x, (1.0 - x * x).sqrt(), 0.0],
                              "metadata": {"keep": true}}));
        }
        items.push(json!({"id": "A", "name": "n",
                          "content": "ferry ferry timetable timetable",
                          "embedding": [-1.0, 0.0, 0.0], "metadata": {"keep": true}}));
        memory
            .add(items.into_iter().map(Into::into).collect())
            .unwrap();
        let query = RetrievalQuery::Vector(vec![1.0, 0.0, 0.0]);
        let request = |weights: HybridWeights, k: usize| SearchRequest {
            mode: SearchMode::Hybrid {
                text: "ferry timetable".into(),
                weights,
            },
            ..SearchRequest::new(ScopeFilter::all(), query.clone(), k)
        };
        let default = HybridWeights::default();
        assert_eq!(
            (default.vector, default.keyword, default.k),
            (1.0, 1.0, 60.0)
        );
        let vector_only = stores
            .search_with(
                "hy",
                &SearchRequest::new(ScopeFilter::all(), query.clone(), 100),
            )
            .unwrap();
        assert_eq!(ids(&vector_only)[..2], ["B", "C"]);
        assert_eq!(ids(&vector_only).last().unwrap(), "A");
        let keyword_only = stores
            .search_with("hy", &keyword("ferry timetable", ScopeFilter::all(), 100))
            .unwrap();
        let mut matched = ids(&keyword_only);
        matched.sort();
        assert_eq!(matched, ["A", "C"]);
        let hybrid = stores.search_with("hy", &request(default, 3)).unwrap();
        assert_eq!(ids(&hybrid), ["C", "A", "B"], "{hybrid:?}");
        let want = rrf(&vector_only, &keyword_only, &default);
        for (hit, (id, score)) in hybrid.iter().zip(&want) {
            assert_eq!(hit.message.id(), id);
            assert!((hit.score - score).abs() < 1e-12, "{hit:?} {score}");
            assert_eq!(hit.scope, s);
        }
        // Indices are the messages' own.
        assert_eq!(
            hybrid.iter().map(|h| h.index).collect::<Vec<_>>(),
            [1, 12, 0]
        );
        // Keyword weight 0: the vector ranking.
        let vector_weighted = stores
            .search_with(
                "hy",
                &request(
                    HybridWeights {
                        keyword: 0.0,
                        ..default
                    },
                    5,
                ),
            )
            .unwrap();
        assert_eq!(ids(&vector_weighted), ids(&vector_only)[..5]);
        // Filters apply to both rankings before the fusion.
        let keep = Filter::parse(&json!({"eq": {"path": "metadata.keep", "value": true}})).unwrap();
        let filtered = stores
            .search_with("hy", &request(default, 2).with_filter(keep))
            .unwrap();
        assert_eq!(ids(&filtered), ["A", "B"]);
        assert!(matches!(
            stores.search_with(
                "hy",
                &request(
                    HybridWeights {
                        vector: -1.0,
                        ..default
                    },
                    3
                )
            ),
            Err(MemoryError::InvalidQuery { .. })
        ));
    }

    /// A real embedder under another model's name: two models of one dimension, whose
    /// vectors must not be scored against each other.
    pub(super) struct Renamed {
        pub(super) model: String,
        pub(super) inner: mnemon_embed::HashingEmbedder,
    }

    impl mnemon_types::Embedder for Renamed {
        fn model(&self) -> &str {
            &self.model
        }

        fn dimension(&self) -> usize {
            self.inner.dimension()
        }

        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_types::EmbedError> {
            self.inner.embed(texts)
        }
    }

    /// Issue 14, item 6: every vector an embedder stores records its model; a recall, a search
    /// or `get_embeddings` with another model's embedder is refused (never mixed scores), also
    /// through a fresh handle and when the vectors came with an add that named their model.
    pub(super) fn embedding_models(stores: &dyn SummaryStores) {
        use mnemon_embed::HashingEmbedder;
        use mnemon_memory::{AddOptions, InMemoryMemory, RetrieveOptions};
        use mnemon_types::Embedder;
        let a = HashingEmbedder::new(16).unwrap();
        let b = Renamed {
            model: "other:model-16".into(),
            inner: HashingEmbedder::new(16).unwrap(),
        };
        let s = scope(Some("u"), None, Some("models"));
        let memory = stores.memory("models", &s);
        memory
            .add(vec![
                msg_text("m0", "the ferry"),
                msg_text("m1", "the tides"),
                msg_text("m2", "weather"),
            ])
            .unwrap();
        let recall = |m: &dyn Memory, e: &dyn Embedder| {
            m.retrieve_by_embedding(
                RetrievalQuery::Text("ferry".into()),
                &RetrieveOptions {
                    top_k: Some(2),
                    ..RetrieveOptions::default()
                },
                Some(e),
            )
        };
        // The first recall embeds every message with `a` and records it.
        assert_eq!(recall(&*memory, &a).unwrap()[0].message.id(), "m0");
        assert_eq!(
            stores.count(&format!(
                "SELECT COUNT(*) FROM memory_messages WHERE embedding_model = '{}'",
                a.model()
            )),
            3
        );
        let refused = |result: Result<Vec<mnemon_memory::Retrieved>, MemoryError>| match result {
            Err(MemoryError::EmbeddingModelMismatch { stored, requested }) => {
                assert_eq!(
                    (stored.as_str(), requested.as_str()),
                    (a.model(), b.model())
                );
            }
            other => panic!("{other:?}"),
        };
        refused(recall(&*memory, &b));
        refused(recall(&*stores.fresh("models", &s), &b));
        assert!(matches!(
            memory.get_embeddings(Some(&b)),
            Err(MemoryError::EmbeddingModelMismatch { .. })
        ));
        assert_eq!(recall(&*stores.fresh("models", &s), &a).unwrap().len(), 2);
        let request =
            SearchRequest::new(ScopeFilter::all(), RetrievalQuery::Text("ferry".into()), 2);
        assert!(matches!(
            stores.search_embedded("models", &request, &b),
            Err(MemoryError::EmbeddingModelMismatch { .. })
        ));
        let found = stores.search_embedded("models", &request, &a).unwrap();
        assert_eq!(found[0].message.id(), "m0");
        // Another thread embedded by `b`: each thread recalls with its own model; a search
        // over both is refused with either.
        let t = scope(Some("u"), None, Some("other"));
        let other = stores.memory("models", &t);
        other.add(vec![msg_text("n0", "ferry")]).unwrap();
        assert_eq!(recall(&*other, &b).unwrap().len(), 1);
        for e in [&a as &dyn Embedder, &b] {
            assert!(matches!(
                stores.search_embedded("models", &request, e),
                Err(MemoryError::EmbeddingModelMismatch { .. })
            ));
        }
        assert_eq!(
            stores
                .search_embedded(
                    "models",
                    &SearchRequest::new(
                        ScopeFilter::all().session("models"),
                        request.query.clone(),
                        2
                    ),
                    &a
                )
                .unwrap()
                .len(),
            2
        );
        // An add may name the model of the vectors it brings.
        memory
            .add_with_model(
                vec![
                    json!({"id": "m3", "name": "n", "content": "c",
                            "embedding": b.embed(&["c"]).unwrap()[0]})
                    .into(),
                ],
                &AddOptions::default(),
                b.model(),
            )
            .unwrap();
        match recall(&*stores.fresh("models", &s), &a) {
            Err(MemoryError::EmbeddingModelMismatch { stored, .. }) => {
                assert_eq!(stored, b.model())
            }
            other => panic!("{other:?}"),
        }
        // A vector query without an embedder has no model to check.
        assert_eq!(
            memory
                .retrieve_by_embedding(
                    RetrievalQuery::Vector(a.embed(&["ferry"]).unwrap()[0].clone()),
                    &RetrieveOptions::default(),
                    None,
                )
                .unwrap()
                .len(),
            1
        );
        // The in-memory memory keeps the same rule.
        let plain = InMemoryMemory::new();
        plain.add(vec![msg_text("p0", "ferry")]).unwrap();
        assert_eq!(recall(&plain, &a).unwrap().len(), 1);
        assert!(matches!(
            recall(&plain, &b),
            Err(MemoryError::EmbeddingModelMismatch { .. })
        ));
    }

    /// A message that has expired but is not yet removed is invisible to every read, so the
    /// model of its embedding refuses nothing: a recall, `get_embeddings` and a search with
    /// the live messages' model answer from the expiry instant on (the model check once read
    /// expired rows too and answered `EmbeddingModelMismatch`), and are refused before it.
    pub(super) fn expired_embeddings_of_another_model(stores: &dyn SummaryStores) {
        use mnemon_embed::HashingEmbedder;
        use mnemon_memory::AddOptions;
        use mnemon_types::Embedder;
        let t0 = 1_700_000_000_000;
        stores.clock().set(t0);
        let a = HashingEmbedder::new(16).unwrap();
        let b = Renamed {
            model: "other:model-16".into(),
            inner: HashingEmbedder::new(16).unwrap(),
        };
        let s = scope(Some("u"), None, Some("expired-models"));
        let memory = stores.memory("expired-models", &s);
        let embedded = |id: &str, text: &str, e: &dyn Embedder, expiry: Expiry| {
            memory
                .add_with_model(
                    vec![
                        json!({"id": id, "name": "n", "content": text,
                                "embedding": e.embed(&[text]).unwrap()[0]})
                        .into(),
                    ],
                    &AddOptions {
                        expiry,
                        ..AddOptions::default()
                    },
                    e.model(),
                )
                .unwrap();
        };
        embedded("old", "the old ferry", &b, Expiry::At(t0 + 50));
        embedded("live", "the ferry", &a, Expiry::Never);
        let recall = |m: &dyn Memory| {
            m.retrieve_by_embedding(
                RetrievalQuery::Text("ferry".into()),
                &RetrieveOptions {
                    top_k: Some(5),
                    ..RetrieveOptions::default()
                },
                Some(&a),
            )
        };
        let request = SearchRequest::new(
            ScopeFilter::all().session("expired-models"),
            RetrievalQuery::Text("ferry".into()),
            5,
        );
        let refused = |result: Result<usize, MemoryError>| match result {
            Err(MemoryError::EmbeddingModelMismatch { stored, requested }) => {
                assert_eq!(
                    (stored.as_str(), requested.as_str()),
                    (b.model(), a.model())
                );
            }
            other => panic!("{other:?}"),
        };
        // While the message of the other model is live, every path refuses.
        stores.clock().set(t0 + 49);
        refused(recall(&*memory).map(|r| r.len()));
        refused(recall(&*stores.fresh("expired-models", &s)).map(|r| r.len()));
        refused(memory.get_embeddings(Some(&a)).map(|e| e.len()));
        refused(
            stores
                .search_embedded("expired-models", &request, &a)
                .map(|h| h.len()),
        );
        // From its expiry instant on it is gone, with nothing written to remove it.
        stores.clock().set(t0 + 50);
        let stored = || stores.count("SELECT COUNT(*) FROM memory_messages");
        let before = stored();
        let ids = |hits: Vec<mnemon_memory::Retrieved>| -> Vec<String> {
            hits.iter().map(|h| h.message.id().to_owned()).collect()
        };
        assert_eq!(ids(recall(&*memory).unwrap()), ["live"]);
        assert_eq!(
            ids(recall(&*stores.fresh("expired-models", &s)).unwrap()),
            ["live"]
        );
        assert_eq!(memory.get_embeddings(Some(&a)).unwrap().len(), 1);
        let hits = stores
            .search_embedded("expired-models", &request, &a)
            .unwrap();
        assert_eq!(
            hits.iter().map(|h| h.message.id()).collect::<Vec<_>>(),
            ["live"]
        );
        // The other model's live messages still refuse: only the expired one is left out.
        match stores.search_embedded("expired-models", &request, &b) {
            Err(MemoryError::EmbeddingModelMismatch { stored, .. }) => {
                assert_eq!(stored, a.model());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(stored(), before, "the reads removed nothing");
    }

    /// An embedder that fails from its `fail_at`-th batch on: a run cut short.
    struct FailsAfter {
        inner: Renamed,
        calls: std::sync::atomic::AtomicUsize,
        fail_at: usize,
    }

    impl mnemon_types::Embedder for FailsAfter {
        fn model(&self) -> &str {
            self.inner.model.as_str()
        }

        fn dimension(&self) -> usize {
            self.inner.inner.dimension()
        }

        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_types::EmbedError> {
            let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if call >= self.fail_at {
                return Err(mnemon_types::EmbedError::new(self.model(), "cut short"));
            }
            self.inner.inner.embed(texts)
        }
    }

    /// Issue 14, item 6: `reembed` moves the selected threads to another model in batches,
    /// reporting progress, and resumes after a run cut short doing only the rest; afterwards
    /// recalls with the new model pass and the old one is refused.
    pub(super) fn reembed_resumes(stores: &dyn SummaryStores) {
        use mnemon_embed::HashingEmbedder;
        use mnemon_memory::RetrieveOptions;
        use mnemon_types::Embedder;
        let a = HashingEmbedder::new(16).unwrap();
        let s = scope(Some("u"), None, Some("re"));
        let memory = stores.memory("re", &s);
        memory
            .add(
                (0..25)
                    .map(|i| msg_text(&format!("m{i}"), &format!("message number {i}")))
                    .collect(),
            )
            .unwrap();
        let untouched = scope(Some("v"), None, Some("re"));
        stores
            .memory("re", &untouched)
            .add(vec![msg_text("v0", "other user")])
            .unwrap();
        let recall = |e: &dyn Embedder| {
            stores.fresh("re", &s).retrieve_by_embedding(
                RetrievalQuery::Text("number 7".into()),
                &RetrieveOptions {
                    top_k: Some(3),
                    ..RetrieveOptions::default()
                },
                Some(e),
            )
        };
        // Every one embedded by `a` first (a recall fills them all in).
        memory
            .retrieve_by_embedding(
                RetrievalQuery::Text("x".into()),
                &RetrieveOptions {
                    mark: None,
                    ..RetrieveOptions::default()
                },
                Some(&a),
            )
            .unwrap();
        let b = || Renamed {
            model: "other:model-16".into(),
            inner: HashingEmbedder::new(16).unwrap(),
        };
        // Cut short after two batches of 4.
        let failing = FailsAfter {
            inner: b(),
            calls: std::sync::atomic::AtomicUsize::new(0),
            fail_at: 2,
        };
        let mut seen = Vec::new();
        let cut = stores.reembed("re", &ScopeFilter::user("u"), &failing, 4, &mut |d, t| {
            seen.push((d, t))
        });
        assert!(matches!(cut, Err(MemoryError::Embedder { .. })), "{cut:?}");
        assert_eq!(seen, [(4, 25), (8, 25)]);
        let with_b = |sql_model: &str| {
            stores.count(&format!(
                "SELECT COUNT(*) FROM memory_messages WHERE embedding_model = '{sql_model}'"
            ))
        };
        assert_eq!(with_b("other:model-16"), 8);
        // The rest, and nothing twice.
        let mut seen = Vec::new();
        let done = stores
            .reembed("re", &ScopeFilter::user("u"), &b(), 4, &mut |d, t| {
                seen.push((d, t))
            })
            .unwrap();
        assert_eq!(done, 17);
        assert_eq!(seen.last(), Some(&(17, 17)));
        assert_eq!(with_b("other:model-16"), 25);
        assert_eq!(with_b(a.model()), 0);
        assert_eq!(
            stores
                .reembed("re", &ScopeFilter::user("u"), &b(), 4, &mut |_, _| ())
                .unwrap(),
            0
        );
        assert_eq!(recall(&b()).unwrap().len(), 3);
        // Every stored vector is now `b`'s of the message's text.
        let texts: Vec<String> = (0..25).map(|i| format!("message number {i}")).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(
            stores.fresh("re", &s).get_embeddings(Some(&b())).unwrap(),
            b().embed(&texts).unwrap()
        );
        assert!(matches!(
            recall(&a),
            Err(MemoryError::EmbeddingModelMismatch { .. })
        ));
        // The other user's thread was not selected.
        assert!(stores.fresh("re", &untouched).get_embeddings(None).is_err());
    }

    fn msg_text(id: &str, content: &str) -> mnemon_memory::MsgInput {
        json!({"id": id, "name": "n", "content": content}).into()
    }

    /// Rows of every memory table whose thread is gone (none may be left by a forget).
    fn orphans(stores: &dyn SummaryStores) -> Vec<(String, i64)> {
        let tables = stores.thread_tables();
        assert!(tables.contains(&"memory_messages".to_owned()), "{tables:?}");
        tables
            .into_iter()
            .map(|table| {
                let n = stores.count(&format!(
                    "SELECT COUNT(*) FROM {table} x WHERE NOT EXISTS
                       (SELECT 1 FROM memory_threads t WHERE t.thread_id = x.thread_id)"
                ));
                (table, n)
            })
            .filter(|(_, n)| *n != 0)
            .collect()
    }

    /// Issue 14, item 5: `forget` deletes the selected threads of one namespace with every row
    /// of theirs, counts them, and leaves other users and other namespaces alone; a handle
    /// open on a forgotten thread reads an empty memory.
    pub(super) fn forget_subjects(stores: &dyn SummaryStores) {
        fill_search_data(stores, "alpha");
        fill_search_data(stores, "beta");
        let per_thread = 22u64;
        let u1 = scope(Some("u1"), Some("a"), Some("s0"));
        let open = stores.memory("alpha", &u1);
        assert_eq!(open.size().unwrap(), 22);
        let u10 = stores.memory("alpha", &scope(Some("u10"), Some("a"), Some("s0")));
        let all_rows = |table: &str| stores.count(&format!("SELECT COUNT(*) FROM {table}"));
        let messages_before = all_rows("memory_messages");
        let marks_before = all_rows("memory_marks");
        assert_eq!(messages_before, 2 * 8 * 22);

        let gone = stores.forget("alpha", &ScopeFilter::user("u1")).unwrap();
        assert_eq!(
            gone,
            Forgotten {
                threads: 4,
                messages: 4 * per_thread
            }
        );
        assert_eq!(orphans(stores), []);
        assert_eq!(all_rows("memory_messages"), messages_before - 4 * 22);
        // 18 of each thread's 22 messages are marked.
        assert_eq!(all_rows("memory_marks"), marks_before - 4 * 18);
        // Nothing of it is readable: the open handle, a search, the listings.
        assert_eq!(open.size().unwrap(), 0);
        assert!(
            open.get_memory(&mnemon_memory::MemoryQuery::default())
                .unwrap()
                .is_empty()
        );
        let query = vector(99_999, DIM);
        let hits = stores
            .search("alpha", &ScopeFilter::all(), query.clone(), 1000)
            .unwrap();
        assert!(
            hits.iter()
                .all(|h| h.scope.user_id.as_deref() != Some("u1"))
        );
        assert_eq!(hits.len(), 4 * 18);
        let listed = listed(stores, "alpha");
        assert_eq!(listed.len(), 4);
        assert!(
            listed
                .iter()
                .all(|(s, _)| s.user_id.as_deref() != Some("u1"))
        );
        // `u10` (whose id starts with `u1`) and the other namespace keep everything.
        assert_eq!(u10.size().unwrap(), 22);
        assert_eq!(
            stores
                .search("beta", &ScopeFilter::user("u1"), query.clone(), 1000)
                .unwrap()
                .len(),
            4 * 18
        );
        // Forgetting again finds nothing; a bad filter is refused.
        assert_eq!(
            stores.forget("alpha", &ScopeFilter::user("u1")).unwrap(),
            Forgotten::default()
        );
        assert!(matches!(
            stores.forget("alpha", &ScopeFilter::user("")),
            Err(MemoryError::InvalidScope { .. })
        ));
        // One session of one agent.
        let one = stores
            .forget("alpha", &ScopeFilter::all().agent("a").session("s0"))
            .unwrap();
        assert_eq!(one.threads, 3, "u10/a/s0, u2/a/s0, -/a/s0");
        assert_eq!(u10.size().unwrap(), 0);
        // The whole namespace, never another.
        let rest = stores.forget("alpha", &ScopeFilter::all()).unwrap();
        assert_eq!(
            rest,
            Forgotten {
                threads: 1,
                messages: per_thread
            }
        );
        assert!(listed_all(stores, "alpha").is_empty());
        assert_eq!(all_rows("memory_messages"), 8 * 22);
        assert_eq!(orphans(stores), []);
        assert_eq!(listed_all(stores, "beta").len(), 8);
        // A write through the open handle starts the thread again, empty but for it.
        open.add(vec![msg("again")]).unwrap();
        assert_eq!(open.size().unwrap(), 1);
    }

    fn listed_all(stores: &dyn SummaryStores, namespace: &str) -> Vec<(Scope, u64)> {
        listed(stores, namespace)
    }

    /// One thread's own recall, as search hits.
    fn oracle_on(
        stores: &dyn SummaryStores,
        namespace: &str,
        scope: &Scope,
        query: &[f32],
        k: usize,
    ) -> Vec<(Scope, usize, f64, String)> {
        let options = RetrieveOptions {
            top_k: Some(k),
            preserve_order: false,
            ..RetrieveOptions::default()
        };
        stores
            .memory(namespace, scope)
            .retrieve_by_embedding(RetrievalQuery::Vector(query.to_vec()), &options, None)
            .unwrap()
            .into_iter()
            .map(|r| (scope.clone(), r.index, r.score, r.message.id().to_owned()))
            .collect()
    }
}

mod sqlite_summaries {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use std::time::Duration;

    use mnemon_db::ManualClock;
    use mnemon_memory::{
        Forgotten, Memory, MemoryError, Namespace, RetrievalQuery, Scope, ScopeFilter, SearchHit,
        SearchRequest, SearchResults, SqliteMemoryOptions, SqliteMemoryStore, ThreadPage,
    };
    use mnemon_tests::memory_conformance::test_factory;

    use super::summaries::{SummaryStores, thread_summaries};

    pub(super) struct Stores {
        path: PathBuf,
        open: Mutex<HashMap<String, Arc<SqliteMemoryStore>>>,
        clock: Arc<ManualClock>,
        recall_index: mnemon_memory::RecallIndexOptions,
    }

    impl Stores {
        fn options(&self, namespace: &str) -> SqliteMemoryOptions {
            SqliteMemoryOptions {
                namespace: Namespace::new(namespace).unwrap(),
                clock: self.clock.clone(),
                recall_index: self.recall_index.clone(),
                ..SqliteMemoryOptions::default()
            }
        }

        fn store(&self, namespace: &str) -> Arc<SqliteMemoryStore> {
            let mut open = self.open.lock().unwrap();
            Arc::clone(open.entry(namespace.to_owned()).or_insert_with(|| {
                SqliteMemoryStore::open_with_factory(
                    &self.path,
                    self.options(namespace),
                    test_factory(),
                )
                .unwrap()
            }))
        }
    }

    impl SummaryStores for Stores {
        fn memory(&self, namespace: &str, scope: &Scope) -> Box<dyn Memory> {
            Box::new(self.store(namespace).memory(scope.clone()).unwrap())
        }

        fn summaries(
            &self,
            namespace: &str,
            limit: usize,
            after: Option<&str>,
        ) -> Result<ThreadPage, MemoryError> {
            self.store(namespace).thread_summaries(limit, after)
        }

        fn drop_thread(&self, namespace: &str, scope: &Scope) -> bool {
            self.store(namespace).drop_thread(scope).unwrap()
        }

        fn search(
            &self,
            namespace: &str,
            within: &ScopeFilter,
            query: Vec<f32>,
            top_k: usize,
        ) -> Result<Vec<SearchHit>, MemoryError> {
            self.store(namespace)
                .search(within, RetrievalQuery::Vector(query), top_k, None)
        }

        fn forget(&self, namespace: &str, within: &ScopeFilter) -> Result<Forgotten, MemoryError> {
            self.store(namespace).forget(within)
        }

        fn search_results(
            &self,
            namespace: &str,
            request: &SearchRequest,
        ) -> Result<SearchResults, MemoryError> {
            self.store(namespace).search_with(request, None)
        }

        fn search_embedded(
            &self,
            namespace: &str,
            request: &SearchRequest,
            embedder: &dyn mnemon_types::Embedder,
        ) -> Result<Vec<SearchHit>, MemoryError> {
            self.store(namespace)
                .search_with(request, Some(embedder))
                .map(|r| r.hits)
        }

        fn reembed(
            &self,
            namespace: &str,
            within: &ScopeFilter,
            embedder: &dyn mnemon_types::Embedder,
            batch: usize,
            progress: &mut dyn FnMut(u64, u64),
        ) -> Result<u64, MemoryError> {
            self.store(namespace)
                .reembed(within, embedder, batch, progress)
        }

        fn count(&self, sql: &str) -> i64 {
            let conn = rusqlite::Connection::open(&self.path).unwrap();
            conn.query_row(sql, [], |r| r.get(0)).unwrap()
        }

        fn clock(&self) -> &ManualClock {
            &self.clock
        }

        fn gc(&self, namespace: &str) -> Result<u64, MemoryError> {
            self.store(namespace).gc()
        }

        fn memory_with_ttl(
            &self,
            namespace: &str,
            ttl: Duration,
            scope: &Scope,
        ) -> Box<dyn Memory> {
            let options = SqliteMemoryOptions {
                default_ttl: Some(ttl),
                ..self.options(namespace)
            };
            let store =
                SqliteMemoryStore::open_with_factory(&self.path, options, test_factory()).unwrap();
            Box::new(store.memory(scope.clone()).unwrap())
        }

        fn fresh(&self, namespace: &str, scope: &Scope) -> Box<dyn Memory> {
            // A mirror of its own: the store's handles share one, which would answer instead
            // of the streamed reads this handle is for.
            Box::new(
                self.store(namespace)
                    .existing_memory_unshared(scope.clone())
                    .unwrap()
                    .unwrap(),
            )
        }

        fn keyword_index_rows(&self) -> i64 {
            self.count("SELECT COUNT(*) FROM memory_fts")
        }

        fn thread_tables(&self) -> Vec<String> {
            let conn = rusqlite::Connection::open(&self.path).unwrap();
            let mut stmt = conn
                .prepare(
                    "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c
                     WHERE m.type = 'table' AND m.name LIKE 'memory%'
                       AND m.name != 'memory_threads' AND c.name = 'thread_id'",
                )
                .unwrap();
            let rows = stmt.query_map([], |r| r.get(0)).unwrap();
            rows.collect::<Result<_, _>>().unwrap()
        }
    }

    pub(super) fn stores(dir: &tempfile::TempDir) -> Stores {
        Stores {
            path: dir.path().join("mnemon.sqlite3"),
            open: Mutex::new(HashMap::new()),
            clock: Arc::new(ManualClock::new(0)),
            recall_index: mnemon_memory::RecallIndexOptions::default(),
        }
    }

    /// [`stores`] whose every search and streamed recall goes through the threads' recall
    /// indexes (built inside the search, with a beam covering every thread): the answers must
    /// be the exact scan's.
    fn indexed_stores(dir: &tempfile::TempDir) -> Stores {
        Stores {
            recall_index: super::index_everything(),
            ..stores(dir)
        }
    }

    #[test]
    fn searches_through_recall_indexes_sqlite() {
        for check in [
            super::summaries::search_across_sessions,
            super::summaries::searches_follow_every_change,
            super::summaries::search_reaches_past_other_users,
            super::summaries::expiry_at_the_boundary,
            super::summaries::filtered_search,
            super::summaries::embedding_models,
        ] {
            let dir = tempfile::tempdir().unwrap();
            check(&indexed_stores(&dir));
        }
    }

    #[test]
    fn search_across_sessions_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::search_across_sessions(&stores(&dir));
    }

    #[test]
    fn filtered_search_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::filtered_search(&stores(&dir));
        super::summaries::filtered_search_reaches_past_nearer_vectors(&stores(&dir));
    }

    #[test]
    fn expiry_at_the_boundary_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::expiry_at_the_boundary(&stores(&dir));
    }

    #[test]
    fn searches_follow_every_change_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::searches_follow_every_change(&stores(&dir));
    }

    #[test]
    fn messages_with_nul_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::messages_with_nul(&stores(&dir));
    }

    #[test]
    fn keyword_and_hybrid_search_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::keyword_search(&stores(&dir));
        super::summaries::hybrid_search(&stores(&dir));
    }

    #[test]
    fn keyword_words_match_across_backends_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::keyword_words_match_across_backends(&stores(&dir));
    }

    #[test]
    fn keyword_matches_are_bounded_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::keyword_matches_are_bounded(&stores(&dir));
    }

    #[test]
    fn stored_export_round_trip_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::stored_export_round_trip(&stores(&dir));
    }

    #[test]
    fn own_fields_named_like_stored_ones_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::own_fields_named_like_stored_ones(&stores(&dir));
    }

    #[test]
    fn embedding_models_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::embedding_models(&stores(&dir));
    }

    #[test]
    fn expired_embeddings_of_another_model_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::expired_embeddings_of_another_model(&stores(&dir));
    }

    #[test]
    fn reembed_resumes_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::reembed_resumes(&stores(&dir));
    }

    #[test]
    fn forget_subjects_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::forget_subjects(&stores(&dir));
    }

    #[test]
    fn search_reaches_past_other_users_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::summaries::search_reaches_past_other_users(&stores(&dir));
    }

    #[test]
    fn thread_summaries_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        thread_summaries(&stores(&dir));
    }
}

mod postgres_summaries {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use mnemon_db::ManualClock;
    use mnemon_memory::{
        Forgotten, Memory, MemoryError, Namespace, PostgresMemoryOptions, PostgresMemoryStore,
        RetrievalQuery, Scope, ScopeFilter, SearchHit, SearchRequest, SearchResults, ThreadPage,
    };
    use mnemon_tests::memory_conformance::test_factory;

    use serde_json::json;

    use super::summaries::{SummaryStores, thread_summaries};

    struct Stores {
        url: String,
        vector_index: bool,
        /// `PostgresMemoryOptions::hnsw_min_messages`: 0 sends every search the index can
        /// answer through it.
        hnsw_min_messages: usize,
        open: Mutex<HashMap<String, Arc<PostgresMemoryStore>>>,
        clock: Arc<ManualClock>,
    }

    impl Stores {
        fn new(url: String, vector_index: bool, hnsw_min_messages: usize) -> Self {
            Stores {
                url,
                vector_index,
                hnsw_min_messages,
                open: Mutex::new(HashMap::new()),
                clock: Arc::new(ManualClock::new(0)),
            }
        }

        fn options(&self, namespace: &str) -> PostgresMemoryOptions {
            PostgresMemoryOptions {
                namespace: Namespace::new(namespace).unwrap(),
                vector_index: self.vector_index,
                hnsw_min_messages: self.hnsw_min_messages,
                clock: self.clock.clone(),
                ..PostgresMemoryOptions::default()
            }
        }

        fn store(&self, namespace: &str) -> Arc<PostgresMemoryStore> {
            let mut open = self.open.lock().unwrap();
            Arc::clone(open.entry(namespace.to_owned()).or_insert_with(|| {
                PostgresMemoryStore::open_with_factory(
                    &self.url,
                    self.options(namespace),
                    test_factory(),
                )
                .unwrap_or_else(|e| panic!("{e}"))
            }))
        }
    }

    impl SummaryStores for Stores {
        fn memory(&self, namespace: &str, scope: &Scope) -> Box<dyn Memory> {
            Box::new(self.store(namespace).memory(scope.clone()).unwrap())
        }

        fn summaries(
            &self,
            namespace: &str,
            limit: usize,
            after: Option<&str>,
        ) -> Result<ThreadPage, MemoryError> {
            self.store(namespace).thread_summaries(limit, after)
        }

        fn drop_thread(&self, namespace: &str, scope: &Scope) -> bool {
            self.store(namespace).drop_thread(scope).unwrap()
        }

        fn search(
            &self,
            namespace: &str,
            within: &ScopeFilter,
            query: Vec<f32>,
            top_k: usize,
        ) -> Result<Vec<SearchHit>, MemoryError> {
            self.store(namespace)
                .search(within, RetrievalQuery::Vector(query), top_k, None)
        }

        fn forget(&self, namespace: &str, within: &ScopeFilter) -> Result<Forgotten, MemoryError> {
            self.store(namespace).forget(within)
        }

        fn search_results(
            &self,
            namespace: &str,
            request: &SearchRequest,
        ) -> Result<SearchResults, MemoryError> {
            self.store(namespace).search_with(request, None)
        }

        fn search_embedded(
            &self,
            namespace: &str,
            request: &SearchRequest,
            embedder: &dyn mnemon_types::Embedder,
        ) -> Result<Vec<SearchHit>, MemoryError> {
            self.store(namespace)
                .search_with(request, Some(embedder))
                .map(|r| r.hits)
        }

        fn reembed(
            &self,
            namespace: &str,
            within: &ScopeFilter,
            embedder: &dyn mnemon_types::Embedder,
            batch: usize,
            progress: &mut dyn FnMut(u64, u64),
        ) -> Result<u64, MemoryError> {
            self.store(namespace)
                .reembed(within, embedder, batch, progress)
        }

        fn count(&self, sql: &str) -> i64 {
            let mut client = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
            client.query_one(sql, &[]).unwrap().get(0)
        }

        fn clock(&self) -> &ManualClock {
            &self.clock
        }

        fn gc(&self, namespace: &str) -> Result<u64, MemoryError> {
            self.store(namespace).gc()
        }

        fn memory_with_ttl(
            &self,
            namespace: &str,
            ttl: Duration,
            scope: &Scope,
        ) -> Box<dyn Memory> {
            let options = PostgresMemoryOptions {
                default_ttl: Some(ttl),
                ..self.options(namespace)
            };
            let store = PostgresMemoryStore::open_with_factory(&self.url, options, test_factory())
                .unwrap_or_else(|e| panic!("{e}"));
            Box::new(store.memory(scope.clone()).unwrap())
        }

        fn fresh(&self, namespace: &str, scope: &Scope) -> Box<dyn Memory> {
            Box::new(
                self.store(namespace)
                    .existing_memory(scope.clone())
                    .unwrap()
                    .unwrap(),
            )
        }

        fn keyword_index_rows(&self) -> i64 {
            self.count("SELECT count(search_tsv) FROM memory_messages")
        }

        fn thread_tables(&self) -> Vec<String> {
            let mut client = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
            client
                .query(
                    "SELECT table_name::text FROM information_schema.columns
                     WHERE table_schema = current_schema() AND table_name LIKE 'memory%'
                       AND table_name != 'memory_threads' AND column_name = 'thread_id'",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect()
        }
    }

    /// With pgvector (the vector column's append statement) and without it (the other one).
    #[test]
    fn thread_summaries_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            thread_summaries(&Stores::new(
                server.fresh_database("memory_summaries").unwrap(),
                vector_index,
                10_000,
            ));
        }
    }

    /// Through the HNSW index wherever it can answer (pgvector, `hnsw_min_messages` 0), and
    /// exactly (without pgvector).
    #[test]
    fn searches_follow_every_change_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_search_changes").unwrap(),
                vector_index,
                0,
            );
            super::summaries::searches_follow_every_change(&stores);
        }
    }

    /// With pgvector and the index answering every search it can (`hnsw_min_messages` 0), and
    /// exactly (without pgvector).
    #[test]
    fn search_across_sessions_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_search").unwrap(),
                vector_index,
                0,
            );
            super::summaries::search_across_sessions(&stores);
        }
    }

    /// With pgvector and the index answering every search it can (`hnsw_min_messages` 0),
    /// and without pgvector.
    #[test]
    fn filtered_search_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_filtered").unwrap(),
                vector_index,
                0,
            );
            super::summaries::filtered_search(&stores);
            super::summaries::filtered_search_reaches_past_nearer_vectors(&stores);
        }
    }

    /// With pgvector (and the index answering every recall it can) and without.
    #[test]
    fn expiry_at_the_boundary_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_expiry").unwrap(),
                vector_index,
                0,
            );
            super::summaries::expiry_at_the_boundary(&stores);
        }
    }

    /// With pgvector and without.
    #[test]
    fn messages_with_nul_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_nul").unwrap(),
                vector_index,
                0,
            );
            super::summaries::messages_with_nul(&stores);
        }
    }

    #[test]
    fn keyword_and_hybrid_search_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_keyword").unwrap(),
                vector_index,
                0,
            );
            super::summaries::keyword_search(&stores);
            super::summaries::hybrid_search(&stores);
        }
    }

    /// Not yet true on PostgreSQL: its `simple` parser keeps emails, file names, paths,
    /// decimals and versions whole and keeps accents (the words must be made as SQLite's FTS5
    /// makes them, for stored texts and queries, and stored rows rebuilt by a migration).
    #[test]
    fn keyword_words_match_across_backends_postgres() {
        let server = mnemon_tests::require_postgres!();
        let stores = Stores::new(server.fresh_database("memory_words").unwrap(), false, 0);
        super::summaries::keyword_words_match_across_backends(&stores);
    }

    #[test]
    fn keyword_matches_are_bounded_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_keyword_bound").unwrap(),
                vector_index,
                0,
            );
            super::summaries::keyword_matches_are_bounded(&stores);
        }
    }

    /// A write reads the clock once it holds the thread's lock: an add that waited behind
    /// another transaction until a message expired sees it expired, so the same id is added
    /// again (an expired id can be). Before, the clock was read before the wait: the add
    /// planned against the stale instant, skipped the id as a duplicate, and the message was
    /// gone.
    #[test]
    fn a_write_that_waited_for_the_thread_judges_expiry_after_the_wait() {
        use super::summaries::SummaryStores as _;
        use mnemon_db::Expiry;
        use mnemon_memory::AddOptions;
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("memory_expiry_after_wait").unwrap();
        let stores = Stores::new(url.clone(), false, 0);
        let t = 1_700_000_000_000;
        stores.clock().set(t - 1_000);
        let scope = Scope::session("waits");
        let memory = stores.memory("ns", &scope);
        memory
            .add_with(
                vec![json!({"id": "m1", "name": "n", "content": "first"}).into()],
                &AddOptions {
                    expiry: Expiry::At(t),
                    ..AddOptions::default()
                },
            )
            .unwrap();
        // Another transaction holds the thread's row.
        let mut blocker = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut tx = blocker.transaction().unwrap();
        tx.execute(
            "SELECT thread_id FROM memory_threads WHERE namespace = 'ns' AND session_id = 'waits'
             FOR UPDATE",
            &[],
        )
        .unwrap();
        std::thread::scope(|threads| {
            let adding = threads.spawn(|| {
                memory
                    .add(vec![
                        json!({"id": "m1", "name": "n", "content": "again"}).into(),
                    ])
                    .unwrap()
            });
            // The add is waiting for the row (give it time to get there), then m1 expires.
            std::thread::sleep(std::time::Duration::from_millis(300));
            stores.clock().set(t + 100);
            tx.commit().unwrap();
            let report = adding.join().unwrap();
            assert_eq!(report.added, 1, "{report:?}");
        });
        let contents: Vec<serde_json::Value> = memory
            .get_memory(&Default::default())
            .unwrap()
            .iter()
            .map(|m| m.content().clone())
            .collect();
        assert_eq!(contents, [json!("again")]);
    }

    /// With pgvector and without.
    #[test]
    fn stored_export_round_trip_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_stored_export").unwrap(),
                vector_index,
                0,
            );
            super::summaries::stored_export_round_trip(&stores);
        }
    }

    #[test]
    fn own_fields_named_like_stored_ones_postgres() {
        let server = mnemon_tests::require_postgres!();
        let stores = Stores::new(server.fresh_database("memory_own_fields").unwrap(), true, 0);
        super::summaries::own_fields_named_like_stored_ones(&stores);
    }

    #[test]
    fn embedding_models_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_models").unwrap(),
                vector_index,
                0,
            );
            super::summaries::embedding_models(&stores);
        }
    }

    /// With pgvector and without.
    #[test]
    fn expired_embeddings_of_another_model_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_expired_models").unwrap(),
                vector_index,
                0,
            );
            super::summaries::expired_embeddings_of_another_model(&stores);
        }
    }

    #[test]
    fn reembed_resumes_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_reembed").unwrap(),
                vector_index,
                0,
            );
            super::summaries::reembed_resumes(&stores);
        }
    }

    #[test]
    fn forget_subjects_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_forget").unwrap(),
                vector_index,
                0,
            );
            super::summaries::forget_subjects(&stores);
        }
    }

    #[test]
    fn search_reaches_past_other_users_postgres() {
        let server = mnemon_tests::require_postgres!();
        for vector_index in [true, false] {
            let stores = Stores::new(
                server.fresh_database("memory_search_crowd").unwrap(),
                vector_index,
                0,
            );
            super::summaries::search_reaches_past_other_users(&stores);
            if vector_index {
                // The unfiltered search is answered by the index.
                let store = stores.store("crowd");
                let query = super::summaries::crowd_query();
                let hits = store
                    .search(
                        &ScopeFilter::user("target"),
                        RetrievalQuery::Vector(query.clone()),
                        10,
                        None,
                    )
                    .unwrap();
                assert_eq!(hits.len(), 10);
                let before = store.index_recalls();
                store
                    .search(&ScopeFilter::all(), RetrievalQuery::Vector(query), 10, None)
                    .unwrap();
                assert_eq!(store.index_recalls(), before + 1);
            }
        }
    }

    /// Every message embedded, at a dimension of its own (6: an HNSW index holding only these
    /// 80 vectors, fewer than the shortlist, so the index finds them all): with pgvector, the
    /// index answers every search, filtered ones included, with SQLite's exact hits.
    fn compare_every_embedded(
        sqlite: &super::sqlite_summaries::Stores,
        postgres: &Stores,
        vector_index: bool,
    ) {
        use super::summaries::{search_filters, search_scopes};
        for store in [sqlite as &dyn SummaryStores, postgres] {
            for (t, scope) in search_scopes().iter().enumerate() {
                let items = (0..10u64)
                    .map(|i| {
                        let e: Vec<f32> = (0..6u64)
                            .map(|d| (((t as u64 * 10 + i) * 7 + d * 13) % 19) as f32 / 9.0 - 1.0)
                            .collect();
                        json!({"id": format!("f{t}-{i}"), "name": "n", "content": "c",
                               "embedding": e})
                        .into()
                    })
                    .collect();
                store.memory("full", scope).add(items).unwrap();
            }
        }
        postgres.store("full").flush_index().unwrap();
        let before = postgres.store("full").index_recalls();
        let mut searches = 0;
        for within in search_filters() {
            for k in [1, 5, 20] {
                let query = vec![0.3, -0.2, 0.9, 0.1, -0.5, 0.25];
                let a = sqlite.search("full", &within, query.clone(), k).unwrap();
                let b = postgres.search("full", &within, query, k).unwrap();
                assert_eq!(a, b, "{within:?} k={k} pgvector={vector_index}");
                // The index answers whenever there are more candidates than `k`.
                let candidates = sqlite
                    .search("full", &within, vec![1.0; 6], 10_000)
                    .unwrap()
                    .len();
                if candidates > k {
                    searches += 1;
                }
            }
        }
        let through_index = postgres.store("full").index_recalls() - before;
        if vector_index {
            assert!(
                through_index >= searches - 2,
                "{through_index} of {searches}"
            );
        } else {
            assert_eq!(through_index, 0);
        }
    }

    /// The same data in SQLite and PostgreSQL (with and without pgvector) gives the same hits:
    /// ids, scopes, indices, and scores within 1e-6.
    #[test]
    fn search_agrees_with_sqlite() {
        use super::summaries::{DIM, fill_search_data, search_filters};
        let server = mnemon_tests::require_postgres!();
        let dir = tempfile::tempdir().unwrap();
        let sqlite = super::sqlite_summaries::stores(&dir);
        fill_search_data(&sqlite, "alpha");
        for vector_index in [true, false] {
            let postgres = Stores::new(
                server.fresh_database("memory_search_agree").unwrap(),
                vector_index,
                0,
            );
            fill_search_data(&postgres, "alpha");
            postgres.store("alpha").flush_index().unwrap();
            compare_every_embedded(&sqlite, &postgres, vector_index);
            for seed in 0..5u64 {
                let query: Vec<f32> = (0..DIM as u64)
                    .map(|i| ((seed * 31 + i * 17) % 23) as f32 / 11.0 - 1.0)
                    .collect();
                for within in search_filters() {
                    for k in [1, 5, 50] {
                        let a = sqlite.search("alpha", &within, query.clone(), k).unwrap();
                        let b = postgres.search("alpha", &within, query.clone(), k).unwrap();
                        assert_eq!(a.len(), b.len(), "{within:?} k={k}");
                        for (x, y) in a.iter().zip(&b) {
                            assert_eq!(
                                (&x.scope, x.index, x.message.id()),
                                (&y.scope, y.index, y.message.id()),
                                "{within:?} k={k} pgvector={vector_index}"
                            );
                            assert!((x.score - y.score).abs() <= 1e-6, "{x:?} {y:?}");
                            assert_eq!(x.message, y.message);
                        }
                    }
                }
            }
        }
    }
}
