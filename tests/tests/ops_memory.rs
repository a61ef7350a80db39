//! The service's memory writes on PostgreSQL (crates/mnemon-ops, `Service::writer`): handles
//! are kept open per recently written session so that an add does not reload its thread, but
//! never for a thread over 10,000 messages, so the kept handles' memory stays bounded.

use mnemon_ops::memory::{MemoryAddInput, MessageBody};
use mnemon_ops::{OpenOptions, Service, Stores};

fn add(service: &Service, session: &str, n: usize) {
    let messages = (0..n)
        .map(|i| MessageBody(serde_json::json!({"name": "u", "content": format!("m{i}")})))
        .collect();
    if let Err(error) = service.memory_add(MemoryAddInput {
        session: session.to_owned(),
        messages,
        marks: Vec::new(),
    }) {
        panic!("adding to {session}: {error}");
    }
}

#[test]
fn postgres_keeps_write_handles_for_small_threads_only() {
    let server = mnemon_tests::require_postgres!();
    let url = server
        .fresh_database("kept write handles")
        .unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let stores = Stores::open_with(dir.path(), &OpenOptions::postgres(url))
        .unwrap_or_else(|error| panic!("{error}"));
    let service = Service::new(stores);
    add(&service, "a", 1);
    add(&service, "b", 1);
    add(&service, "a", 1);
    assert_eq!(service.kept_write_handles(), 2);
    // Past 10,000 messages the thread is written through fresh handles.
    add(&service, "big", 10_000);
    assert_eq!(service.kept_write_handles(), 3);
    add(&service, "big", 1);
    assert_eq!(service.kept_write_handles(), 2);
    add(&service, "big", 1);
    assert_eq!(service.kept_write_handles(), 2);
    // At most 64 sessions keep one.
    for i in 0..70 {
        add(&service, &format!("s{i}"), 1);
    }
    assert_eq!(service.kept_write_handles(), 64);
}
