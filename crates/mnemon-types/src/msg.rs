//! Conversation messages (`Msg`), per spec/memory.md. Owned by the memory work (issue 6).
