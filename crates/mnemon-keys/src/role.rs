//! Roles: what a key may do inside its namespace (docs/reference/keys.md, "Roles").

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a key may do inside its namespace. Roles are ordered: `read < write < admin`, and each
/// allows everything the lower ones do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read, list, resolve and search.
    Read,
    /// Everything `read` does, plus adding, changing and deleting records.
    Write,
    /// Everything `write` does, plus the namespace-wide operations the server reserves for
    /// administrators (for example garbage collection and imports).
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    /// Whether a key with this role may run an operation that requires `required`.
    pub fn allows(self, required: Role) -> bool {
        self >= required
    }

    /// The role's name: `read`, `write` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not `read`, `write` or `admin`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a role; use read, write or admin")]
pub struct RoleError {
    /// The string given (at most 64 characters of it).
    pub given: String,
}

impl FromStr for Role {
    type Err = RoleError;

    fn from_str(s: &str) -> Result<Role, RoleError> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| RoleError {
                given: s.chars().take(64).collect(),
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn each_role_allows_exactly_itself_and_those_below() {
        for held in Role::ALL {
            for required in Role::ALL {
                let rank = |r: Role| Role::ALL.iter().position(|x| *x == r).unwrap();
                assert_eq!(
                    held.allows(required),
                    rank(held) >= rank(required),
                    "{held} / {required}"
                );
            }
        }
        assert!(!Role::Read.allows(Role::Write));
        assert!(Role::Admin.allows(Role::Read));
    }

    #[test]
    fn names_round_trip_and_others_are_refused() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
            assert_eq!(serde_json::to_string(&role).unwrap(), format!("\"{role}\""));
        }
        for bad in ["", "Read", "owner", "admin "] {
            let err = bad.parse::<Role>().unwrap_err();
            assert!(err.to_string().contains("read, write or admin"), "{err}");
        }
    }
}
