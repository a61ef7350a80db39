//! Library operations: list a library's bits, query it by vector or text
//! (docs/reference/rest.md#libraries). The library is the caller's (a server hands in the
//! snapshot it currently serves), so these run against whatever library is given.

use mnemon_library::{AccessGrant, BitId, CountType, Library, Omit, QueryRequest, wire};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::OpsError;
use crate::page;
use crate::service::Service;

/// Input of [`Service::library_list`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LibraryListInput {
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many bits (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One bit of a library, without its embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BitBody {
    /// The bit's id (hex of its SHA-256 over url and text).
    pub id: String,
    /// The text.
    pub text: String,
    /// Its `info` object (`url`, `title`, …), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Map<String, serde_json::Value>>,
    /// Its token count.
    pub token_count: i64,
}

/// Output of [`Service::library_list`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LibraryListOutput {
    /// The library's embedding model.
    pub model: String,
    /// How many bits the library holds.
    pub total: usize,
    /// The bits of this page, in library order (untagged bits only: bits with an access tag
    /// are not listed).
    pub bits: Vec<BitBody>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Input of [`Service::library_query`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LibraryQueryInput {
    /// The query text, embedded by the service's embedder (its model must be the library's).
    #[serde(default)]
    pub text: Option<String>,
    /// Or the query vector, of the library's model and dimension.
    #[serde(default)]
    pub embedding: Option<Vec<f32>>,
    /// How many bits (or tokens, with `count_type: "token"`) to return (default 10).
    #[serde(default)]
    pub count: Option<i64>,
    /// `bit` (default) or `token`.
    #[serde(default)]
    pub count_type: Option<String>,
    /// Fields to leave out of each bit, comma-separated (default `embedding`).
    #[serde(default)]
    pub omit: Option<String>,
    /// Scan every bit exactly, never the library's approximate index (which large libraries
    /// with a current index are otherwise searched through: docs/reference/library.md#ann-index).
    #[serde(default)]
    pub exact: bool,
}

/// Output of [`Service::library_query`]: the Polymath query result
/// (docs/reference/host.md#responses): `bits`, `details`, and the library's fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct LibraryQueryOutput(pub serde_json::Map<String, serde_json::Value>);

impl Service {
    /// One page of the library's untagged bits.
    pub fn library_list(
        &self,
        library: &Library,
        input: LibraryListInput,
    ) -> Result<LibraryListOutput, OpsError> {
        let limit = page::limit(input.limit)?;
        // A cursor names the last bit handed out (docs/reference/rest.md#pagination), not a
        // position: after a reload that added or removed bits before it, the next page still
        // starts after that bit; a cursor whose bit is gone is `invalid_cursor`.
        let start = match input.cursor.as_deref() {
            None => 0,
            Some(cursor) => {
                let id = BitId::from_hex(&page::decode(cursor)?).ok_or(OpsError::InvalidCursor)?;
                library
                    .position(&id)
                    .ok_or(OpsError::InvalidCursor)?
                    .saturating_add(1)
            }
        };
        let mut bits: Vec<BitBody> = Vec::new();
        let mut next = None;
        for bit in library.bits().skip(start) {
            if bit.access_tag().is_some() {
                continue;
            }
            if bits.len() == limit {
                next = bits.last().map(|last| page::encode(&last.id));
                break;
            }
            bits.push(BitBody {
                id: bit.id().to_string(),
                text: bit.text()?.to_owned(),
                info: bit.info()?.cloned(),
                token_count: bit.token_count(),
            });
        }
        Ok(LibraryListOutput {
            model: library.model().to_owned(),
            total: library.len(),
            bits,
            next_cursor: next,
        })
    }

    /// The bits nearest a vector or a text (untagged bits only).
    ///
    /// A `count` below zero asks for every bit (as in Polymath). The result is refused with
    /// [`OpsError::ResultTooLarge`] (`result_too_large`, a 400-kind error) as soon as its JSON
    /// passes [`max_result_bytes`](Service::max_result_bytes), before more of it is built.
    pub fn library_query(
        &self,
        library: &Library,
        input: LibraryQueryInput,
    ) -> Result<LibraryQueryOutput, OpsError> {
        let embedding = match (input.embedding, input.text) {
            (Some(_), Some(_)) => {
                return Err(OpsError::invalid(
                    "query either by text or by embedding, not both",
                ));
            }
            (Some(vector), None) => vector,
            (None, Some(text)) => {
                let embedder = self.require_embedder()?;
                if embedder.model() != library.model() {
                    return Err(OpsError::LibraryModelMismatch {
                        embedder: embedder.model().to_owned(),
                        library: library.model().to_owned(),
                    });
                }
                // The embedder's failure is the service's, for now (503 `embedder_failed`, as
                // for memory searches): the same query may succeed later.
                let mut vectors = embedder.embed(&[text.as_str()]).map_err(|e| {
                    OpsError::Memory(mnemon_memory::MemoryError::Embedder {
                        model: embedder.model().to_owned(),
                        detail: e.to_string(),
                    })
                })?;
                vectors
                    .pop()
                    .ok_or_else(|| OpsError::invalid("the embedder returned no vector"))?
            }
            (None, None) => {
                return Err(OpsError::invalid(
                    "give the query as text or as an embedding",
                ));
            }
        };
        let mut request = QueryRequest::new(library.model(), embedding, input.count.unwrap_or(10));
        request.index = self.index();
        request.exact = input.exact;
        request.count_type = match input.count_type.as_deref() {
            None | Some("bit") => CountType::Bit,
            Some("token") => CountType::Token,
            Some(other) => {
                return Err(OpsError::invalid(format!(
                    "count_type {other:?} is neither \"bit\" nor \"token\""
                )));
            }
        };
        if let Some(omit) = &input.omit {
            request.omit = Omit::parse_str(omit)?;
        }
        let result = library.query(&request, &AccessGrant::default())?;
        // Written as JSON bytes one bit at a time and refused as soon as they pass the limit, as
        // the library host writes its results: `wire::render` built the whole result as a JSON
        // value first (several times the size of its text), with no limit, so `"count": -1`
        // with embeddings built every bit of the library.
        let max = self.max_result_bytes();
        let bytes = wire::render_capped(&result, max).map_err(|error| match error {
            wire::RenderError::TooLarge { .. } => OpsError::ResultTooLarge { max },
            wire::RenderError::Library(error) => OpsError::Library(error),
            other => OpsError::Unwritable {
                detail: other.to_string(),
            },
        })?;
        drop(result);
        // The same value `wire::render` gives: the bytes are its compact JSON, and numbers
        // round-trip exactly (serde_json's `float_roundtrip`, on in this workspace).
        let map = serde_json::from_slice(&bytes).map_err(|e| OpsError::Unwritable {
            detail: e.to_string(),
        })?;
        Ok(LibraryQueryOutput(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_library::{IndexUse, synthetic};

    /// A packed library of 2,000 random 32-dimensional unit vectors with its ANN index.
    fn indexed_library(dir: &std::path::Path) -> Library {
        let path = dir.join("lib.json");
        let mut bytes = Vec::new();
        synthetic::write_synthetic(&mut bytes, "m", 2_000, 32, 5).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let library = Library::open(&path).unwrap();
        library.pack_index(&path, &|_, _| {}).unwrap();
        Library::open(&path).unwrap()
    }

    /// A library of 40 bits of 1 MiB of text each (dimension 4).
    fn large_library(dir: &std::path::Path) -> Library {
        let mut bytes = Vec::new();
        synthetic::write_synthetic(&mut bytes, "m", 40, 4, 9).unwrap();
        let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for bit in json["bits"].as_array_mut().unwrap() {
            bit["text"] = "word ".repeat(1024 * 1024 / 5).into();
        }
        let path = dir.join("large.json");
        std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
        Library::open(&path).unwrap()
    }

    /// A cursor names the last bit handed out: the next page starts after it even when bits
    /// before it went away in between (a reload), as rest.md#pagination promises; it used to be
    /// a position, so a page skipped or repeated bits. A cursor whose bit is gone is refused.
    #[test]
    fn bit_pages_follow_the_last_bit_not_a_position() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        synthetic::write_synthetic(&mut bytes, "m", 10, 4, 3).unwrap();
        let mut library = Library::from_bytes(&bytes).unwrap();
        let service = Service::new(crate::Stores::open(dir.path().join("data")).unwrap());
        let page = |library: &Library, cursor: Option<String>| {
            service.library_list(
                library,
                LibraryListInput {
                    cursor,
                    limit: Some(3),
                },
            )
        };
        let ids: Vec<String> = library.bits().map(|b| b.id().to_string()).collect();
        let first = page(&library, None).unwrap();
        let cursor = first.next_cursor.clone().unwrap();
        // Two bits before the cursor's go away.
        for id in &ids[..2] {
            library.remove(&BitId::from_hex(id).unwrap()).unwrap();
        }
        let second = page(&library, Some(cursor)).unwrap();
        let got: Vec<&str> = second.bits.iter().map(|b| b.id.as_str()).collect();
        assert_eq!(got, [&ids[3], &ids[4], &ids[5]]);
        // The cursor's own bit gone: refused, never a guess.
        let cursor = second.next_cursor.unwrap();
        library.remove(&BitId::from_hex(&ids[5]).unwrap()).unwrap();
        let refused = page(&library, Some(cursor)).unwrap_err();
        assert_eq!(refused.code(), "invalid_cursor", "{refused}");
    }

    /// An embedder whose every call fails, as a remote one does when its service is down.
    struct DownEmbedder(&'static str);

    impl mnemon_types::Embedder for DownEmbedder {
        fn model(&self) -> &str {
            self.0
        }
        fn dimension(&self) -> usize {
            32
        }
        fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_types::EmbedError> {
            Err(mnemon_types::EmbedError::new(self.0, "connection refused"))
        }
    }

    /// A text query's embedder failing is the service's failure for now (503 `embedder_failed`,
    /// retry later), and an embedder of another model than the library's is 422
    /// `embedding_model_mismatch`: both used to be 400 `invalid_input`, which tells a client
    /// that retrying cannot help.
    #[test]
    fn a_text_query_reports_the_embedders_failures_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let library = indexed_library(dir.path());
        let query = |service: &Service| {
            service
                .library_query(
                    &library,
                    LibraryQueryInput {
                        text: Some("ferry".into()),
                        embedding: None,
                        count: Some(3),
                        count_type: None,
                        omit: None,
                        exact: false,
                    },
                )
                .unwrap_err()
        };
        let stores = || crate::Stores::open(dir.path().join("data")).unwrap();
        let down = Service::new(stores()).with_embedder(std::sync::Arc::new(DownEmbedder("m")));
        let err = query(&down);
        assert_eq!(
            (err.code(), err.kind()),
            ("embedder_failed", crate::ErrorKind::Unavailable),
            "{err}"
        );
        let other = Service::new(stores()).with_embedder(std::sync::Arc::new(DownEmbedder("x")));
        let err = query(&other);
        assert_eq!(
            (err.code(), err.kind()),
            ("embedding_model_mismatch", crate::ErrorKind::Unprocessable),
            "{err}"
        );
    }

    /// `count: -1` (every bit, as in Polymath) of a 40 MiB library is refused with a 400 that
    /// says how to ask for less, instead of being built whole (twice: the value, then its
    /// JSON); a result under the cap is the same as before.
    #[test]
    fn a_result_larger_than_the_cap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let library = large_library(dir.path());
        let service = Service::new(crate::Stores::open(dir.path().join("data")).unwrap());
        let ask = |count: i64| {
            service.library_query(
                &library,
                LibraryQueryInput {
                    text: None,
                    embedding: Some(vec![1.0, 0.0, 0.0, 0.0]),
                    count: Some(count),
                    count_type: None,
                    omit: None,
                    exact: false,
                },
            )
        };
        let Err(err) = ask(-1) else {
            panic!("every bit of a 40 MiB library was returned")
        };
        assert_eq!(err.code(), "result_too_large", "{err}");
        assert_eq!(err.kind(), crate::ErrorKind::BadRequest);
        let message = err.to_string();
        assert!(
            message.contains(&(32 * 1024 * 1024).to_string()),
            "{message}"
        );
        assert!(message.contains("count"), "{message}");
        let out = ask(3).unwrap();
        let mut request = QueryRequest::new("m", vec![1.0, 0.0, 0.0, 0.0], 3);
        request.index = service.index();
        let direct = wire::render(&library.query(&request, &AccessGrant::default()).unwrap());
        assert_eq!(out.0, direct.unwrap());
        // The limit is the service's: one bit of 1 MiB does not fit in 1 MB.
        let small = service.with_max_result_bytes(1_000_000);
        let Err(err) = small.library_query(
            &library,
            LibraryQueryInput {
                text: None,
                embedding: Some(vec![1.0, 0.0, 0.0, 0.0]),
                count: Some(1),
                count_type: None,
                omit: None,
                exact: false,
            },
        ) else {
            panic!("a 1 MiB bit fit in 1 MB")
        };
        assert!(err.to_string().contains("limit of 1000000 bytes"), "{err}");
    }

    /// The service's library query searches the index as the service is told (here from 0 bits,
    /// with a beam of 10: often not the exact answer), and `exact: true` always scans.
    #[test]
    fn library_queries_use_the_index_unless_exact() {
        let dir = tempfile::tempdir().unwrap();
        let library = indexed_library(dir.path());
        let index = IndexUse {
            min_bits: 0,
            ef: Some(10),
        };
        let service =
            Service::new(crate::Stores::open(dir.path().join("data")).unwrap()).with_index(index);
        let mut differed = 0;
        for n in 0..20 {
            // Spread, deterministic directions (no RNG needed).
            let query: Vec<f32> = (0..32).map(|i| ((n * 32 + i) as f32 * 0.7).sin()).collect();
            let ask = |exact: bool| {
                service
                    .library_query(
                        &library,
                        LibraryQueryInput {
                            text: None,
                            embedding: Some(query.clone()),
                            count: Some(10),
                            count_type: None,
                            omit: None,
                            exact,
                        },
                    )
                    .unwrap()
                    .0
            };
            let direct = |exact: bool| {
                let mut request = QueryRequest::new("m", query.clone(), 10);
                request.index = index;
                request.exact = exact;
                wire::render(&library.query(&request, &AccessGrant::default()).unwrap()).unwrap()
            };
            let (scanned, searched) = (ask(true), ask(false));
            assert_eq!(scanned, direct(true));
            assert_eq!(searched, direct(false));
            differed += usize::from(scanned != searched);
        }
        assert!(
            differed > 0,
            "a beam of 10 never missed: the index was not used"
        );
    }
}
