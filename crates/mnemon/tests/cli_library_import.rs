//! `mnemon library import` on a directory of Markdown and text files, checked with
//! `mnemon library validate` and `mnemon library query`, as a user would run them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use mnemon_embed::{Embedder, HashingEmbedder};
use serde_json::{Value, json};

fn mnemon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(args)
        .env_remove("MNEMON_DATA_DIR")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("the mnemon binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A paragraph of `n` sentences about `topic`.
fn paragraph(topic: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("Sentence {i} tells more about {topic} and nothing else. "))
        .collect()
}

/// docs/ with a Markdown file (two long sections), a nested text file, and files to skip.
fn write_docs(root: &Path) {
    let docs = root.join("docs");
    std::fs::create_dir_all(docs.join("nested")).unwrap();
    std::fs::create_dir_all(docs.join(".hidden")).unwrap();
    let bees = format!(
        "# Honey bees\n\n{}\n\n## Dances\n\n{}\n",
        paragraph("honey bees", 30),
        paragraph("the waggle dance of foragers", 30)
    );
    std::fs::write(docs.join("bees.md"), bees).unwrap();
    std::fs::write(
        docs.join("nested/tides.txt"),
        paragraph("spring tides and neap tides", 12),
    )
    .unwrap();
    std::fs::write(docs.join("image.png"), [0u8, 159, 146, 150]).unwrap();
    std::fs::write(docs.join(".hidden/secret.md"), "# Secret\n\nhidden").unwrap();
}

#[test]
fn import_validate_and_query() {
    let dir = tempfile::tempdir().unwrap();
    write_docs(dir.path());
    let docs = dir.path().join("docs");
    let out = dir.path().join("lib.json");
    let (docs_arg, out_arg) = (docs.to_str().unwrap(), out.to_str().unwrap());

    let run = mnemon(&["library", "import", docs_arg, "--out", out_arg]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["files"], 2, "{summary}");
    assert_eq!(summary["embedding_model"], "mnemon:hashing-v1-512");
    assert_eq!(summary["dimension"], 512);
    let bits = summary["bits"].as_u64().unwrap();
    assert!(bits >= 3, "{summary}");

    let validate = mnemon(&["library", "validate", out_arg]);
    assert!(validate.status.success(), "{}", text(&validate.stdout));
    assert_eq!(text(&validate.stdout).trim(), "ok");

    // Every chunk is within bounds except a file's last, is whole sentences, and carries the
    // right title, url and cl100k_base count.
    let saved: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let saved_bits = saved["bits"].as_array().unwrap();
    assert_eq!(saved_bits.len() as u64, bits);
    let tokenizer = tiktoken_rs::cl100k_base().unwrap();
    let mut total_tokens = 0;
    for (i, bit) in saved_bits.iter().enumerate() {
        let body = bit["text"].as_str().unwrap();
        let chars = body.chars().count();
        assert!(chars <= 2000, "bit {i} has {chars} chars");
        let last_of_file = saved_bits
            .get(i + 1)
            .is_none_or(|next| next["info"]["url"] != bit["info"]["url"]);
        assert!(chars >= 1000 || last_of_file, "bit {i} has {chars} chars");
        assert!(body.ends_with('.'), "bit {i} ends mid-sentence: {body:?}");
        let tokens = tokenizer.encode_ordinary(body).len();
        assert_eq!(bit["token_count"], tokens);
        total_tokens += tokens;
        let url = bit["info"]["url"].as_str().unwrap();
        if url.ends_with("bees.md") {
            assert_eq!(bit["info"]["title"], "Honey bees");
        } else {
            assert!(url.ends_with("nested/tides.txt"), "{url}");
            assert_eq!(bit["info"]["title"], "tides.txt");
        }
    }
    assert_eq!(summary["token_count"], total_tokens);
    // Sorted walk: bees.md before nested/tides.txt.
    assert!(
        saved_bits[0]["info"]["url"]
            .as_str()
            .unwrap()
            .ends_with("bees.md")
    );

    // A query embedded with the same (offline) model finds the tides text first.
    let query = HashingEmbedder::default()
        .embed(&["neap tides and spring tides"])
        .unwrap()
        .remove(0);
    let args = dir.path().join("args.json");
    std::fs::write(
        &args,
        json!({
            "version": 1,
            "query_embedding_model": "mnemon:hashing-v1-512",
            "query_embedding": mnemon_library::encode_embedding(&query),
            "count": 1,
            "count_type": "bit",
        })
        .to_string(),
    )
    .unwrap();
    let answer = mnemon(&[
        "library",
        "query",
        out_arg,
        "--args",
        args.to_str().unwrap(),
    ]);
    assert!(answer.status.success(), "{}", text(&answer.stderr));
    let result: Value = serde_json::from_slice(&answer.stdout).unwrap();
    assert_eq!(result["details"]["counts"]["bits"], 1);
    let top = &result["bits"][0];
    assert!(
        top["info"]["url"]
            .as_str()
            .unwrap()
            .ends_with("nested/tides.txt"),
        "{top}"
    );
    assert!(top["similarity"].as_f64().unwrap() > 0.2, "{top}");
}

#[test]
fn url_prefix_files_and_overwrite_rules() {
    let dir = tempfile::tempdir().unwrap();
    write_docs(dir.path());
    let docs = dir.path().join("docs");
    let out = dir.path().join("lib.json");
    let out_arg = out.to_str().unwrap();
    let file = docs.join("nested/tides.txt");
    let run = mnemon(&[
        "--quiet",
        "library",
        "import",
        docs.to_str().unwrap(),
        file.to_str().unwrap(),
        "--out",
        out_arg,
        "--url-prefix",
        "https://example.com/docs/",
        "--dimension",
        "64",
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(run.stderr.is_empty(), "--quiet: {}", text(&run.stderr));
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["files"], 3);
    assert_eq!(summary["embedding_model"], "mnemon:hashing-v1-64");
    // The file named twice gets a URL per route, so its bits are distinct (ids hash url+text).
    assert_eq!(summary["duplicates"], 0, "{summary}");
    let saved: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let urls: Vec<&str> = saved["bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["info"]["url"].as_str().unwrap())
        .collect();
    assert!(
        urls.contains(&"https://example.com/docs/bees.md"),
        "{urls:?}"
    );
    assert!(urls.contains(&"https://example.com/docs/nested/tides.txt"));
    assert!(urls.contains(&"https://example.com/docs/tides.txt"));

    // An existing output is kept unless --force.
    let again = mnemon(&[
        "library",
        "import",
        file.to_str().unwrap(),
        "--out",
        out_arg,
    ]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("--force"));
    let forced = mnemon(&[
        "library",
        "import",
        file.to_str().unwrap(),
        "--out",
        out_arg,
        "--force",
    ]);
    assert!(forced.status.success(), "{}", text(&forced.stderr));

    // Without --url-prefix a bit's URL is the file's path as given, with single slashes, and
    // the output's folders are created.
    let nested_out = dir.path().join("libraries/new/lib.json");
    let plain = mnemon(&[
        "library",
        "import",
        file.to_str().unwrap(),
        "--out",
        nested_out.to_str().unwrap(),
    ]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let saved: Value = serde_json::from_slice(&std::fs::read(&nested_out).unwrap()).unwrap();
    let url = saved["bits"][0]["info"]["url"].as_str().unwrap();
    assert_eq!(url, file.to_str().unwrap());
    assert!(!url.contains("//"), "{url}");
}

#[test]
fn input_errors_exit_with_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lib.json");
    let out_arg = out.to_str().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let binary = dir.path().join("bad.txt");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    let missing = dir.path().join("missing");
    for (args, message) in [
        (vec![empty.to_str().unwrap()], "no files to import"),
        (vec![binary.to_str().unwrap()], "not UTF-8"),
        (vec![missing.to_str().unwrap()], "cannot read"),
    ] {
        let mut full = vec!["library", "import"];
        full.extend(args);
        full.extend(["--out", out_arg]);
        let run = mnemon(&full);
        assert_eq!(run.status.code(), Some(2), "{message}");
        assert!(text(&run.stderr).contains(message), "{}", text(&run.stderr));
        assert!(!out.exists());
    }
    let openai = mnemon(&[
        "library",
        "import",
        empty.to_str().unwrap(),
        "--out",
        out_arg,
        "--embedder",
        "openai",
    ]);
    assert_eq!(openai.status.code(), Some(2));
    assert!(text(&openai.stderr).contains("OPENAI_API_KEY"));
}

/// A one-thread OpenAI-style `POST /v1/embeddings` server on 127.0.0.1 answering every text
/// with [chars, 1, 0, 0]; returns its base URL.
fn embeddings_server() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim_end().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let request: Value = serde_json::from_slice(&body).unwrap();
            let data: Vec<Value> = request["input"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let chars = t.as_str().unwrap().chars().count() as f32;
                    json!({"index": i, "embedding": [chars, 1.0, 0.0, 0.0]})
                })
                .collect();
            let reply = json!({"data": data}).to_string();
            let mut out = stream;
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    base
}

#[test]
fn import_with_an_openai_compatible_server() {
    let dir = tempfile::tempdir().unwrap();
    write_docs(dir.path());
    let out = dir.path().join("lib.json");
    let run = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["library", "import"])
        .arg(dir.path().join("docs"))
        .arg("--out")
        .arg(&out)
        .args([
            "--embedder",
            "openai",
            "--model",
            "local-embed",
            "--dimension",
            "4",
        ])
        .env_remove("OPENAI_API_KEY")
        .env("OPENAI_BASE_URL", embeddings_server())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["embedding_model"], "openai.com:local-embed");
    let lib = mnemon_library::Library::open(&out).unwrap();
    assert_eq!(lib.dimension(), Some(4));
    for bit in lib.bits() {
        let chars = bit.text().unwrap().chars().count() as f32;
        assert_eq!(bit.embedding(), [chars, 1.0, 0.0, 0.0]);
    }
    let validate = mnemon(&["library", "validate", out.to_str().unwrap()]);
    assert!(validate.status.success());

    // The model may come from the environment too; --model wins over it.
    let from_env = dir.path().join("env.json");
    let run = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["library", "import"])
        .arg(dir.path().join("docs"))
        .arg("--out")
        .arg(&from_env)
        .args(["--embedder", "openai", "--dimension", "4"])
        .env_remove("OPENAI_API_KEY")
        .env("OPENAI_BASE_URL", embeddings_server())
        .env("OPENAI_EMBEDDING_MODEL", "env-embed")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["embedding_model"], "openai.com:env-embed");
}

/// A Markdown file's YAML front matter gives its bits' title (over its first heading) and is
/// not part of any bit's text; a file without front matter keeps its heading as title.
#[test]
fn front_matter_gives_the_title_and_is_not_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let body = format!(
        "# Reading a tide table\n\n{}\n",
        paragraph("tide tables and harbour charts", 40)
    );
    std::fs::write(
        docs.join("tides.md"),
        format!("---\ntitle: \"Tide tables: a primer\"\nauthor: Harbour office\n---\n{body}"),
    )
    .unwrap();
    std::fs::write(
        docs.join("plain.md"),
        "# Plain heading\n\nNo front matter here.\n",
    )
    .unwrap();
    let out = dir.path().join("lib.json");
    let run = mnemon(&[
        "library",
        "import",
        docs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--url-prefix",
        "https://example.com/",
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let saved: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let bits = saved["bits"].as_array().unwrap();
    let tides: Vec<&Value> = bits
        .iter()
        .filter(|b| b["info"]["url"] == "https://example.com/tides.md")
        .collect();
    assert!(tides.len() >= 2, "{saved}");
    for bit in &tides {
        assert_eq!(bit["info"]["title"], "Tide tables: a primer");
        let body = bit["text"].as_str().unwrap();
        assert!(
            !body.contains("author:") && !body.contains("---"),
            "{body:?}"
        );
    }
    assert!(
        tides[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("# Reading a tide table"),
        "{}",
        tides[0]["text"]
    );
    let plain = bits
        .iter()
        .find(|b| b["info"]["url"] == "https://example.com/plain.md")
        .unwrap();
    assert_eq!(plain["info"]["title"], "Plain heading");
}
