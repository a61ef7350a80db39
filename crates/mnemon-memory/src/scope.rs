//! Which thread a durable memory is (the SQLite and the PostgreSQL memories share it).

use serde::Serialize;

use crate::error::MemoryError;

/// Which thread a memory is: optional user, agent and session ids. The all-`None` scope is the
/// default thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Scope {
    /// The user.
    pub user_id: Option<String>,
    /// The agent.
    pub agent_id: Option<String>,
    /// The session.
    pub session_id: Option<String>,
}

impl Scope {
    /// The scope of one session, with no user or agent.
    pub fn session(session_id: impl Into<String>) -> Self {
        Scope {
            session_id: Some(session_id.into()),
            ..Scope::default()
        }
    }

    /// The stored columns: `None` is `''`; `Some("")` is rejected.
    pub(crate) fn columns(&self) -> Result<[&str; 3], MemoryError> {
        fn column<'a>(value: &'a Option<String>, field: &str) -> Result<&'a str, MemoryError> {
            match value.as_deref() {
                None => Ok(""),
                Some("") => Err(MemoryError::InvalidScope {
                    field: field.into(),
                }),
                Some(v) => Ok(v),
            }
        }
        Ok([
            column(&self.user_id, "user_id")?,
            column(&self.agent_id, "agent_id")?,
            column(&self.session_id, "session_id")?,
        ])
    }

    pub(crate) fn from_columns(user: String, agent: String, session: String) -> Self {
        let some = |s: String| (!s.is_empty()).then_some(s);
        Scope {
            user_id: some(user),
            agent_id: some(agent),
            session_id: some(session),
        }
    }
}
