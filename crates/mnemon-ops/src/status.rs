//! The status operation (docs/reference/rest.md#status): where the stores live and how large
//! the namespace is, from counts that stay cheap on large namespaces.
//!
//! The backend is described without secrets: a SQLite data directory by its path, a PostgreSQL
//! database by its hosts and name only (never the user's password, which a URL may carry in its
//! user info or as a `password=` parameter).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::OpsError;
use crate::service::Service;
use crate::stores::Backend;

/// Output of [`Service::status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StatusOutput {
    /// The version of Mnemon answering.
    pub version: String,
    /// The namespace the sizes are of (the caller's).
    pub namespace: String,
    /// Where the stores live.
    pub backend: BackendStatus,
    /// How much the namespace holds.
    pub sizes: Sizes,
}

/// Where the stores live, without secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendStatus {
    /// One SQLite file in a data directory.
    Sqlite {
        /// The data directory.
        data_dir: String,
        /// The database file in it.
        database: String,
        /// How memory search scores embeddings.
        vector_search: VectorSearch,
    },
    /// A PostgreSQL database.
    Postgres {
        /// The database server(s), `host:port` (or a Unix socket folder), as the URL names them.
        hosts: Vec<String>,
        /// The database name.
        database: String,
        /// How memory search scores embeddings.
        vector_search: VectorSearch,
    },
}

/// How memory search scores embeddings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VectorSearch {
    /// `pgvector` (an HNSW index per dimension, in the database) or `exact` (every embedding
    /// scored exactly).
    pub mode: String,
    /// The pgvector extension's version, with `pgvector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgvector_version: Option<String>,
    /// Why not pgvector, with `exact`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The HNSW shortlist of a recall through the index (`hnsw.ef_search`), with `pgvector`
    /// (`mnemon serve --recall-index-ef`; docs/postgres.md#the-hnsw-shortlist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ef_search: Option<usize>,
}

/// The most assets [`Sizes::assets`] counts: it reads at most one more id than this, so the
/// status costs the same on any namespace.
pub const ASSET_COUNT_CAP: u64 = 1_000;

/// The most threads [`Sizes::memory_threads`] counts (and sums the messages of), reading their
/// summaries a page of 1,000 at a time.
pub const THREAD_COUNT_CAP: u64 = 10_000;

/// How much a namespace holds, from reads that stay bounded whatever its size
/// (docs/reference/rest.md#status): a count stops at its cap and says there are more. Artifact
/// records are not counted: no index or stored counter gives their number without reading
/// every record of the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Sizes {
    /// Live assets, counted up to 1,000 (their ids read in order, nothing else).
    pub assets: Count,
    /// Memory threads (sessions), counted up to 10,000 from the summaries the store keeps per
    /// thread.
    pub memory_threads: Count,
    /// Messages across the memory threads: the sum of the counts the store keeps per thread (no
    /// message read). Absent when the threads were not all counted (over 10,000), or the store
    /// cannot list summaries (a SQLite file opened read-only from before thread summaries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
}

/// A bounded count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Count {
    /// How many were counted.
    pub count: u64,
    /// True when counting stopped at its cap: there are more than `count`.
    pub more: bool,
}

impl Count {
    /// The count of `found` items read with a limit of `cap + 1`.
    fn capped(found: usize, cap: u64) -> Count {
        let found = u64::try_from(found).unwrap_or(u64::MAX);
        Count {
            count: found.min(cap),
            more: found > cap,
        }
    }
}

impl Service {
    /// The version, the backend (no secrets) and the namespace's sizes.
    pub fn status(&self) -> Result<StatusOutput, OpsError> {
        let stores = self.stores();
        let backend = match stores.backend() {
            Backend::Sqlite => BackendStatus::Sqlite {
                data_dir: stores.dir().display().to_string(),
                database: stores.database_path().display().to_string(),
                vector_search: stores.vector_search(),
            },
            #[cfg(feature = "postgres")]
            Backend::Postgres { url } => {
                let (hosts, database) = postgres_target(url);
                BackendStatus::Postgres {
                    hosts,
                    database,
                    vector_search: stores.vector_search(),
                }
            }
        };
        let cap = usize::try_from(ASSET_COUNT_CAP).unwrap_or(usize::MAX);
        let assets = stores
            .assets()
            .list_where(None, Some(cap.saturating_add(1)))?;
        let (memory_threads, messages) = self.thread_sizes()?;
        let sizes = Sizes {
            assets: Count::capped(assets.len(), ASSET_COUNT_CAP),
            memory_threads,
            messages,
        };
        Ok(StatusOutput {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            namespace: stores.namespace().as_str().to_owned(),
            backend,
            sizes,
        })
    }
}

impl Service {
    /// The thread count (capped) and the message total, from the thread summaries, a page at a
    /// time; without summaries (an old read-only SQLite file), the thread list's length and no
    /// total.
    fn thread_sizes(&self) -> Result<(Count, Option<u64>), OpsError> {
        let mut threads: u64 = 0;
        let mut messages: u64 = 0;
        let mut after: Option<String> = None;
        loop {
            let Ok(page) = self
                .stores()
                .thread_summaries(crate::page::MAX_LIMIT, after.as_deref())
            else {
                let all = self.stores().threads()?.len();
                let capped = all.min(usize::try_from(THREAD_COUNT_CAP + 1).unwrap_or(usize::MAX));
                return Ok((Count::capped(capped, THREAD_COUNT_CAP), None));
            };
            for summary in &page.threads {
                threads += 1;
                messages = messages.saturating_add(summary.messages);
            }
            match page.next {
                Some(_) if threads >= THREAD_COUNT_CAP => {
                    return Ok((
                        Count {
                            count: THREAD_COUNT_CAP.min(threads),
                            more: true,
                        },
                        None,
                    ));
                }
                Some(next) => after = Some(next),
                None => {
                    return Ok((
                        Count {
                            count: threads,
                            more: false,
                        },
                        Some(messages),
                    ));
                }
            }
        }
    }
}

/// The hosts and database name of a PostgreSQL URL, as the client reads them (the URL's
/// `host`, `port` and `dbname` parameters included), and nothing else: the user info and every
/// other parameter, the password among them, are dropped. A URL the client cannot read (the
/// stores opened it, so this does not happen) gives no hosts and `(unreadable URL)`.
pub fn postgres_target(url: &str) -> (Vec<String>, String) {
    #[cfg(feature = "postgres")]
    {
        use postgres::config::Host;
        use std::str::FromStr as _;

        let Ok(config) = postgres::Config::from_str(url) else {
            return (Vec::new(), "(unreadable URL)".to_owned());
        };
        let ports = config.get_ports();
        let hosts = config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match host {
                    Host::Tcp(name) => format!("{name}:{port}"),
                    Host::Unix(dir) => format!("{} (port {port})", dir.display()),
                }
            })
            .collect();
        // PostgreSQL's default database is the user's name.
        let database = config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("(the default database)")
            .to_owned();
        (hosts, database)
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = url;
        (Vec::new(), "(built without PostgreSQL)".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{ArtifactSaveInput, ArtifactScopesInput};
    use crate::memory::{MemoryAddInput, MessageBody};
    use crate::stores::Stores;

    #[test]
    fn status_counts_what_the_namespace_holds_and_names_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap());
        let empty = service.status().unwrap();
        assert_eq!(
            empty.sizes.assets,
            Count {
                count: 0,
                more: false
            }
        );
        assert_eq!(empty.sizes.messages, Some(0));
        assert_eq!(empty.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(empty.namespace, "default");
        let BackendStatus::Sqlite {
            data_dir,
            vector_search,
            ..
        } = &empty.backend
        else {
            panic!("{:?}", empty.backend)
        };
        assert_eq!(data_dir, &dir.path().display().to_string());
        assert_eq!(vector_search.mode, "exact");

        service
            .stores()
            .assets()
            .put(&mnemon_types::Asset::new("x").with_id("a1"))
            .unwrap();
        for scope in ["s2", "s1", "s2"] {
            service
                .artifact_save(ArtifactSaveInput {
                    scope: scope.into(),
                    key: "plan".into(),
                    artifact_type: "plan".into(),
                    name: "P".into(),
                    description: None,
                    content: serde_json::json!("c"),
                    storage: None,
                    storage_id: None,
                })
                .unwrap();
        }
        service
            .memory_add(MemoryAddInput {
                session: "chat".into(),
                messages: vec![MessageBody(
                    serde_json::json!({"name": "u", "content": "hi"}),
                )],
                marks: vec![],
            })
            .unwrap();
        let sizes = service.status().unwrap().sizes;
        assert_eq!((sizes.assets.count, sizes.memory_threads.count), (1, 1));
        assert!(!sizes.assets.more && !sizes.memory_threads.more);
        assert_eq!(sizes.messages, Some(1));

        // Over the cap: the count stops and says there are more.
        let many: Vec<mnemon_types::Asset> = (0..ASSET_COUNT_CAP + 5)
            .map(|i| mnemon_types::Asset::new("x").with_id(format!("b{i:05}")))
            .collect();
        service.stores().assets().put_batch(&many).unwrap();
        let assets = service.status().unwrap().sizes.assets;
        assert_eq!(
            assets,
            Count {
                count: ASSET_COUNT_CAP,
                more: true
            }
        );

        // The scopes, a page at a time, each once, sorted.
        let first = service
            .artifact_scopes(ArtifactScopesInput {
                cursor: None,
                limit: Some(1),
            })
            .unwrap();
        assert_eq!(first.scopes, ["s1"]);
        let second = service
            .artifact_scopes(ArtifactScopesInput {
                cursor: first.next_cursor,
                limit: Some(1),
            })
            .unwrap();
        assert_eq!(second.scopes, ["s2"]);
        assert!(second.next_cursor.is_none());
    }
}

#[cfg(all(test, feature = "postgres"))]
mod postgres_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_postgres_target_names_hosts_and_database_only() {
        let (hosts, database) =
            postgres_target("postgres://mnemon:s3cr%21t@db.internal:6543/memories?sslmode=disable");
        assert_eq!(hosts, ["db.internal:6543"]);
        assert_eq!(database, "memories");
        let (hosts, database) =
            postgres_target("postgresql://u@a,b:5433/x?password=hunter2&application_name=mnemon");
        assert_eq!(hosts, ["a:5432", "b:5433"]);
        assert_eq!(database, "x");
        let (hosts, database) = postgres_target("postgres://bob:pw@h");
        assert_eq!(hosts, ["h:5432"]);
        assert_eq!(database, "bob");
        let (hosts, database) = postgres_target("not a url at all");
        assert!(hosts.is_empty());
        assert_eq!(database, "(unreadable URL)");
    }

    proptest! {
        /// Any password, in the user info or as a parameter, never appears in the target.
        #[test]
        fn no_password_ever_appears(password in "[A-Za-z0-9]{12,24}", host in "[a-z]{1,8}") {
            prop_assume!(!host.contains(&password) && !password.contains("mnemon"));
            for url in [
                format!("postgres://mnemon:{password}@{host}/mnemon"),
                format!("postgres://mnemon@{host}/mnemon?password={password}"),
            ] {
                let (hosts, database) = postgres_target(&url);
                let shown = format!("{hosts:?} {database}");
                prop_assert!(!shown.contains(&password), "{url} -> {shown}");
                prop_assert_eq!(database, "mnemon");
            }
        }

        /// The parser never panics.
        #[test]
        fn any_text_is_read_without_panicking(text in ".{0,80}") {
            let _ = postgres_target(&text);
        }
    }
}
