//! `mnemon keys create|list|revoke` (docs/reference/keys.md), run as a user would: the real
//! binary, a temporary data directory (and the tests' PostgreSQL server with
//! `--database-url`). The key is printed once, never listed, and works with the key store the
//! server uses; a revoke is refused at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use mnemon_keys::{AuthError, DEFAULT_CACHE_TTL, KeyStore, KeyStoreOptions, Role};
use serde_json::Value;

fn mnemon(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("MNEMON_DATA_DIR")
        .env_remove("MNEMON_DATABASE_URL")
        .env_remove("MNEMON_NAMESPACE")
        .output()
        .expect("the mnemon binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out)).unwrap()
}

/// Creates a key with the CLI and returns its JSON (key, id, namespace, role, label).
fn create(data_dir: &Path, extra: &[&str], namespace: &str, role: &str) -> Value {
    let args: Vec<&str> = extra
        .iter()
        .copied()
        .chain(["keys", "create", "--namespace", namespace, "--role", role])
        .chain(["--label", "ci runner"])
        .collect();
    let out = mnemon(data_dir, &args);
    let created = json(&out);
    assert!(
        text(&out.stderr).contains("shown only once"),
        "{}",
        text(&out.stderr)
    );
    created
}

/// After a revoke by the CLI (another process): a new handle refuses `key` at once; `cached`,
/// which accepted it before, refuses it within the documented bound.
fn assert_refused_within_the_bound(fresh: &KeyStore, cached: &KeyStore, key: &str) {
    let revoked = Instant::now();
    assert!(matches!(
        fresh.authenticate(key),
        Err(AuthError::Revoked { .. })
    ));
    while !matches!(cached.authenticate(key), Err(AuthError::Revoked { .. })) {
        assert!(
            revoked.elapsed() < DEFAULT_CACHE_TTL + Duration::from_millis(500),
            "still accepted {:?} after the revoke",
            revoked.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn keys_are_shown_once_listed_without_secrets_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    // Listing an empty data directory creates nothing.
    let empty = ok(&mnemon(&data, &["keys", "list"]));
    assert!(empty.starts_with("ID"), "{empty}");
    assert_eq!(empty.lines().count(), 1, "{empty}");
    assert!(!data.exists(), "listing created the data directory");
    assert_eq!(
        json(&mnemon(&data, &["keys", "list", "--format", "json"])),
        Value::Array(vec![])
    );

    let created = create(&data, &[], "acme", "write");
    let key = created["key"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(key.starts_with(&format!("mnk_{id}_")), "{created}");
    assert_eq!(created["namespace"], "acme");
    assert_eq!(created["role"], "write");
    assert_eq!(created["label"], "ci runner");
    let secret = &key[21..];
    let other = create(&data, &[], "globex", "read");

    // The key works with the store the server opens on the data directory.
    let keys =
        KeyStore::open_sqlite(data.join("mnemon.sqlite3"), KeyStoreOptions::default()).unwrap();
    let grant = keys.authenticate(&key).unwrap();
    assert_eq!(
        (grant.namespace.as_str(), grant.role),
        ("acme", Role::Write)
    );

    // Listed (table and JSON), never with the secret.
    let table = ok(&mnemon(&data, &["keys", "list"]));
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(table.contains(&id) && table.contains("acme") && table.contains("ci runner"));
    assert!(!table.contains(secret), "{table}");
    let listed = json(&mnemon(&data, &["keys", "list", "--format", "json"]));
    let listed_text = listed.to_string();
    assert!(!listed_text.contains(secret), "{listed_text}");
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let acme = json(&mnemon(
        &data,
        &["keys", "list", "--namespace", "acme", "--format", "json"],
    ));
    let acme = acme.as_array().unwrap();
    assert_eq!(acme.len(), 1);
    // The global flag before the command, and the environment variable, choose too.
    for (env, args) in [
        (
            None,
            &["--namespace", "globex", "keys", "list", "--format", "json"][..],
        ),
        (Some("globex"), &["keys", "list", "--format", "json"][..]),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mnemon"));
        command.arg("--data-dir").arg(&data).args(args);
        command
            .env_remove("MNEMON_DATA_DIR")
            .env_remove("MNEMON_NAMESPACE");
        if let Some(namespace) = env {
            command.env("MNEMON_NAMESPACE", namespace);
        }
        let globex: Value = serde_json::from_str(&ok(&command.output().unwrap())).unwrap();
        assert_eq!(globex.as_array().unwrap().len(), 1, "{args:?}: {globex}");
        assert_eq!(globex[0]["namespace"], "globex");
    }
    let default = json(&mnemon(
        &data,
        &["keys", "list", "--namespace", "default", "--format", "json"],
    ));
    assert_eq!(default, Value::Array(vec![]));
    assert_eq!(acme[0]["id"], id.as_str());
    assert_eq!(acme[0]["role"], "write");
    assert_eq!(acme[0]["revoked"], Value::Null);
    assert!(acme[0].get("key").is_none());

    // Revoked: refused at once, shown as revoked; revoking again says so.
    let revoked = json(&mnemon(&data, &["keys", "revoke", &id]));
    assert_eq!(revoked["status"], "revoked");
    let fresh =
        KeyStore::open_sqlite(data.join("mnemon.sqlite3"), KeyStoreOptions::default()).unwrap();
    assert_refused_within_the_bound(&fresh, &keys, &key);
    let again = json(&mnemon(&data, &["keys", "revoke", &id]));
    assert_eq!(again["status"], "already_revoked");
    let acme = json(&mnemon(
        &data,
        &["keys", "list", "--namespace", "acme", "--format", "json"],
    ));
    assert!(acme[0]["revoked"].is_string(), "{acme}");
    // The other key is untouched.
    let other_key = other["key"].as_str().unwrap();
    assert_eq!(
        keys.authenticate(other_key).unwrap().namespace.as_str(),
        "globex"
    );
}

#[test]
fn mistakes_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let unknown = mnemon(&data, &["keys", "revoke", "0123456789abcdef"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown.stderr));
    assert!(
        text(&unknown.stderr).contains("keys list"),
        "{}",
        text(&unknown.stderr)
    );
    assert!(!data.exists(), "revoking created the data directory");
    for args in [
        &["keys", "create", "--namespace", "acme", "--role", "owner"][..],
        &["keys", "create", "--namespace", "Acme", "--role", "read"],
        &["keys", "create", "--role", "read"],
        &[
            "keys",
            "create",
            "--namespace",
            "acme",
            "--role",
            "read",
            "--label",
            "a\nb",
        ],
        &["keys", "list", "--format", "yaml"],
    ] {
        let out = mnemon(&data, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // A data directory with a database but an unknown id: still a usage error.
    create(&data, &[], "acme", "read");
    let unknown = mnemon(&data, &["keys", "revoke", "fedcba9876543210"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown.stderr));
}

#[test]
fn keys_live_in_the_database_url_database() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("cli_keys").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let by_url = ["--database-url", url.as_str()];
    let created = create(&data, &by_url, "acme", "admin");
    let key = created["key"].as_str().unwrap();
    let id = created["id"].as_str().unwrap();
    assert!(!data.exists(), "--database-url wrote to the data directory");
    let keys = KeyStore::open_postgres(&url, KeyStoreOptions::default()).unwrap();
    assert_eq!(keys.authenticate(key).unwrap().role, Role::Admin);
    let listed = json(&mnemon(
        &data,
        &["--database-url", &url, "keys", "list", "--format", "json"],
    ));
    assert_eq!(listed[0]["id"], id);
    assert!(!listed.to_string().contains(&key[21..]));
    let revoked = json(&mnemon(
        &data,
        &["--database-url", &url, "keys", "revoke", id],
    ));
    assert_eq!(revoked["status"], "revoked");
    let fresh = KeyStore::open_postgres(&url, KeyStoreOptions::default()).unwrap();
    assert_refused_within_the_bound(&fresh, &keys, key);
}
