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

    /// Every memory is a new thread of one store in a temporary directory the maker owns.
    fn maker() -> impl Fn() -> Box<dyn Memory> {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<SqliteMemoryStore> = SqliteMemoryStore::open_with_factory(
            dir.path().join("mnemon.sqlite3"),
            SqliteMemoryOptions::default(),
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

        fn add_with(
            &self,
            items: Vec<mnemon_memory::MsgInput>,
            options: &AddOptions,
        ) -> Result<AddReport, MemoryError> {
            self.writer.add_with(items, options)
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
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let open = || -> Arc<SqliteMemoryStore> {
            SqliteMemoryStore::open_with_factory(
                &path,
                SqliteMemoryOptions::default(),
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
