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

    use mnemon_memory::{Scope, SqliteOptions, SqliteStore};
    use mnemon_tests::memory_conformance::test_factory;

    /// Every memory is a new thread of one store in a temporary directory the maker owns.
    fn maker() -> impl Fn() -> Box<dyn Memory> {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<SqliteStore> = SqliteStore::open_with_factory(
            dir.path().join("mnemon.sqlite3"),
            SqliteOptions::default(),
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
