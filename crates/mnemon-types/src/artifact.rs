//! The artifact record, per spec/artifacts.md. Owned by the artifacts work (issue 7).
