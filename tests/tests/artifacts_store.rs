//! The artifact store conformance suite, run against every implementation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod in_memory {
    use mnemon_artifacts::InMemoryArtifactStore;

    mnemon_tests::artifact_store_conformance!((InMemoryArtifactStore::new(), ()));
}

mod sqlite_file {
    use mnemon_artifacts::SqliteArtifactStore;

    fn fresh() -> (SqliteArtifactStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteArtifactStore::open(dir.path().join("mnemon.sqlite3")).unwrap();
        (store, dir)
    }

    mnemon_tests::artifact_store_conformance!(fresh());
}

mod sqlite_in_memory {
    use mnemon_artifacts::SqliteArtifactStore;

    mnemon_tests::artifact_store_conformance!((SqliteArtifactStore::open_in_memory().unwrap(), ()));
}

mod sqlite_durability {
    use mnemon_artifacts::{ArtifactStore, SqliteArtifactStore};
    use mnemon_types::Artifact;

    /// A record saved through one handle is there for a new handle, as after a restart, and the
    /// sequence goes on from where it was.
    #[test]
    fn records_and_sequence_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let first = Artifact::new("s", "plan", "plan", "before restart");
        let seq = {
            let store = SqliteArtifactStore::open(&path).unwrap();
            store.save(&first).unwrap()
        };
        let store = SqliteArtifactStore::open(&path).unwrap();
        assert_eq!(store.get(first.id).unwrap(), Some(first));
        let later = store
            .save(&Artifact::new("s", "plan", "plan", "after restart"))
            .unwrap();
        assert!(later > seq);
        assert_eq!(
            store.latest("s", "plan").unwrap().unwrap().name,
            "after restart"
        );
    }

    /// Two handles on one file (two processes, say) share one sequence.
    #[test]
    fn two_handles_share_one_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let a = SqliteArtifactStore::open(&path).unwrap();
        let b = SqliteArtifactStore::open(&path).unwrap();
        let mut last = 0;
        for i in 0..10 {
            let store = if i % 2 == 0 { &a } else { &b };
            let seq = store
                .save(&Artifact::new("s", "k", "t", format!("{i}")))
                .unwrap();
            assert!(seq > last);
            last = seq;
            assert_eq!(a.latest("s", "k").unwrap().unwrap().name, format!("{i}"));
            assert_eq!(b.latest("s", "k").unwrap().unwrap().name, format!("{i}"));
        }
    }

    /// The tables of other components in the same database file are left alone.
    #[test]
    fn tables_are_prefixed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        drop(SqliteArtifactStore::open(&path).unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'")
            .unwrap();
        let names: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(!names.is_empty());
        for name in names {
            assert!(name.starts_with("artifact_"), "{name}");
        }
    }
}
