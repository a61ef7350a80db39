//! How hard a commit works to survive crashes, independent of the database engine.

/// How hard a commit works to survive crashes. The default is [`Durability::Full`]; the crate
/// docs explain why one default serves every store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// A returned commit survives the process being killed (it is in the operating system's
    /// page cache), but an OS crash or power loss may lose the last commits, never corrupting
    /// the data. SQLite: `synchronous=NORMAL` in WAL mode (the WAL is synced at checkpoints).
    Normal,
    /// A returned commit is on stable storage: it survives an OS crash and a power loss too.
    /// SQLite: `synchronous=FULL` (the WAL is synced at every commit).
    #[default]
    Full,
}
