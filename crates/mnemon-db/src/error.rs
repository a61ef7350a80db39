//! Why a database could not be opened, set up or migrated.

use std::path::PathBuf;

/// Why a database could not be opened, set up or migrated.
///
/// Each message is complete on its own (it includes the engine's text), so the engine's error
/// is not also exposed as `source()`: reporters that walk the chain (`anyhow`'s `{:#}`) would
/// print it twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// The database file could not be opened or created.
    #[error(
        "cannot open the database {}: {detail}; check that its directory exists and that this \
         user may read it (and write it, for commands that change data)",
        .path.display()
    )]
    Open {
        /// The database file.
        path: PathBuf,
        /// The engine's message.
        detail: String,
    },
    /// A setup step (busy timeout, journal mode, `synchronous`, reading the schema version)
    /// failed.
    #[error(
        "cannot set up the database {} while {action}: {detail}; if another program holds a \
         lock on it, retry when it is done",
        .path.display()
    )]
    Setup {
        /// The database file.
        path: PathBuf,
        /// The step, e.g. `switching to WAL`.
        action: &'static str,
        /// The engine's message.
        detail: String,
    },
    /// The file system refused WAL mode.
    #[error(
        "{} cannot use WAL mode (it stays in {mode:?} mode); put the database on a local file \
         system that supports shared memory",
        .path.display()
    )]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite reported instead.
        mode: String,
    },
    /// A component's tables were written by a newer build.
    #[error(
        "the {component} tables in {} have schema version {found}, but this build knows \
         versions up to {supported}; upgrade Mnemon to open it",
        .path.display()
    )]
    SchemaTooNew {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A read-only open met tables that need a migration, which would need write access.
    #[error(
        "the {component} tables in {} have schema version {found} and this build needs \
         {supported}; run any command that writes (with write access to the data directory) \
         once to upgrade them",
        .path.display()
    )]
    NeedsUpgrade {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: i64,
        /// The version this build needs.
        supported: i64,
    },
    /// A migration step failed; the transaction was rolled back, so the file is unchanged.
    #[error(
        "cannot migrate the {component} tables in {} to schema version {version}: {detail}; \
         the database was left unchanged",
        .path.display()
    )]
    Migration {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database file.
        path: PathBuf,
        /// The version being applied (or the target version, when the step is bookkeeping).
        version: i64,
        /// The engine's message.
        detail: String,
    },
    /// The schema definition itself is wrong: a programming error of the component.
    #[error("the {component} schema is misdefined: {detail}; fix the component's migration list")]
    BadSchema {
        /// The component.
        component: &'static str,
        /// What is wrong.
        detail: String,
    },
}
