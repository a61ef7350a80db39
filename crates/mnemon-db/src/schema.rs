//! A component's versioned schema, independent of the database engine.
//!
//! A [`Schema`] names the component, its one-row version table and its numbered [`Migration`]
//! steps. The bookkeeping is the same on every backend (the version table, steps numbered 1, 2,
//! 3, ..., a database from a newer build refused); the SQL of the steps is not, so a component
//! describes one `Schema` per backend, with the same `component` and `table` and its versions
//! meaning the same tables on both (a copy between backends relies on it), and hands each to
//! its backend: `sqlite::open` (feature `sqlite`) or `postgres::migrate` (feature `postgres`).

use crate::DbError;

/// One step of a component's schema: `sql` takes the schema from `version - 1` to `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version this step produces; the steps of a [`Schema`] are numbered 1, 2, 3, ...
    pub version: i64,
    /// The statements, run in the migration's transaction.
    pub sql: &'static str,
}

/// A component's versioned schema inside a shared database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    /// The component's name for messages: `asset`, `artifact`, `memory`.
    pub component: &'static str,
    /// The one-row table holding the version, e.g. `asset_schema`. On PostgreSQL it also keys
    /// the advisory lock under which the component migrates.
    pub table: &'static str,
    /// The name of that table's primary-key column, always 1 (`singleton`, or `id` for memory's
    /// table, whose files predate this crate).
    pub key_column: &'static str,
    /// The steps, in order.
    pub migrations: &'static [Migration],
}

impl Schema {
    /// The version this build writes: the last step's.
    pub fn version(&self) -> i64 {
        self.migrations.last().map_or(0, |m| m.version)
    }

    /// The schema as it was at `version`: its first `version` steps. `None` for a version it
    /// never had (below 1, or above [`version`](Self::version)).
    pub fn up_to(&self, version: i64) -> Option<Schema> {
        let steps = usize::try_from(version)
            .ok()
            .filter(|&n| n >= 1)
            .and_then(|n| self.migrations.get(..n))?;
        Some(Schema {
            migrations: steps,
            ..*self
        })
    }

    /// Refuses names that are not plain identifiers and steps that are not numbered 1, 2, 3, ...
    /// The names are put into SQL text, so this check is what keeps that safe. Only the backends
    /// use it: without either (the library crates need only `atomic_file`), it goes unused.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn check(&self) -> Result<(), DbError> {
        let bad = |detail: String| {
            Err(DbError::BadSchema {
                component: self.component,
                detail,
            })
        };
        let plain = |name: &str| {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        for name in [self.table, self.key_column] {
            if !plain(name) {
                return bad(format!(
                    "{name:?} is not a plain identifier (lowercase letters, digits, '_')"
                ));
            }
        }
        for (i, step) in self.migrations.iter().enumerate() {
            let expected = i as i64 + 1;
            if step.version != expected {
                return bad(format!(
                    "step {i} has version {}, expected {expected}",
                    step.version
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_keeps_the_first_steps() {
        const STEPS: &[Migration] = &[
            Migration {
                version: 1,
                sql: "a",
            },
            Migration {
                version: 2,
                sql: "b",
            },
            Migration {
                version: 3,
                sql: "c",
            },
        ];
        let schema = Schema {
            component: "test",
            table: "test_schema",
            key_column: "singleton",
            migrations: STEPS,
        };
        assert_eq!(schema.up_to(2).map(|s| s.version()), Some(2));
        assert_eq!(schema.up_to(3), Some(schema));
        for never in [0, -1, 4] {
            assert_eq!(schema.up_to(never), None, "{never}");
        }
    }

    const STEP: Migration = Migration {
        version: 1,
        sql: "SELECT 1",
    };

    fn schema(table: &'static str, migrations: &'static [Migration]) -> Schema {
        Schema {
            component: "note",
            table,
            key_column: "singleton",
            migrations,
        }
    }

    #[test]
    fn version_is_the_last_step() {
        assert_eq!(schema("note_schema", &[]).version(), 0);
        static TWO: [Migration; 2] = [
            STEP,
            Migration {
                version: 2,
                sql: "SELECT 2",
            },
        ];
        assert_eq!(schema("note_schema", &TWO).version(), 2);
    }

    #[test]
    fn check_refuses_unsafe_names_and_gaps() {
        assert!(schema("note_schema", &[STEP]).check().is_ok());
        for table in ["", "Note", "note;drop", "note schema", "\"x\""] {
            let err = schema(table, &[STEP]).check().unwrap_err();
            assert!(matches!(err, DbError::BadSchema { .. }), "{table:?}: {err}");
        }
        static GAP: [Migration; 2] = [
            STEP,
            Migration {
                version: 3,
                sql: "SELECT 3",
            },
        ];
        let err = schema("note_schema", &GAP).check().unwrap_err();
        assert!(err.to_string().contains("expected 2"), "{err}");
    }
}
