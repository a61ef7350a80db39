//! Search across sessions in the three modes (docs/reference/memory.md#search-across-sessions):
//! by vector, by keyword, and hybrid (reciprocal rank fusion of the two), with a metadata filter.
//!
//! Run it with `cargo run --example memory_search_modes`. Offline it embeds with the hashing
//! embedder, which is lexical: a vector search then finds shared words, much as a keyword search
//! does, so hybrid adds little. Give it a semantic embedder to see what hybrid is for:
//!
//! ```sh
//! OPENAI_API_KEY=… cargo run --example memory_search_modes -- openai.com:text-embedding-3-small
//! ```
//!
//! (any server speaking OpenAI's embeddings API works: set `OPENAI_BASE_URL`). The question
//! below asks about a meaning ("food I cannot eat") and names an exact order id ("A-7731"): the
//! semantic vector ranking finds the allergy without sharing its words, the keyword ranking
//! finds the one message with the id, and hybrid puts both at the top.

use mnemon::Mnemon;
use mnemon::embed::embedder_for_model;
use mnemon::memory::{
    Filter, HybridWeights, RetrievalQuery, ScopeFilter, SearchMode, SearchRequest,
};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mnemon:hashing-v1-512".to_owned());
    let embedder = embedder_for_model(&model)?;
    let dir = tempfile::tempdir()?;
    let mnemon = Mnemon::open(dir.path())?;

    // Two sessions; every message is embedded as it is added, so that a search
    // across sessions (which only reads stored vectors) sees them all.
    let sessions = [
        (
            "lunch",
            [
                (
                    "user",
                    "I am allergic to peanuts and sesame, please remember that.",
                ),
                (
                    "assistant",
                    "Noted: no peanuts or sesame in anything I suggest.",
                ),
                ("user", "Suggest a quick lunch with eggs, spinach and feta."),
            ],
        ),
        (
            "orders",
            [
                ("user", "Where is my order A-7731? It was due on Friday."),
                ("assistant", "Order A-7731 left the warehouse on Thursday."),
                ("user", "Please also cancel the subscription renewal."),
            ],
        ),
    ];
    for (session, turns) in sessions {
        let texts: Vec<&str> = turns.iter().map(|(_, text)| *text).collect();
        let vectors = embedder.embed(&texts)?;
        let messages = turns
            .iter()
            .zip(vectors)
            .map(|((role, text), vector)| {
                json!({"name": role, "role": role, "content": text, "embedding": vector}).into()
            })
            .collect();
        let memory = mnemon.session(session)?;
        memory.add_with_model(messages, &Default::default(), embedder.model())?;
    }

    let question = "food I cannot eat, and order A-7731";
    let query = RetrievalQuery::Vector(embedder.embed(&[question])?.remove(0));
    let every_session = ScopeFilter::all();
    let modes = [
        ("vector (meaning, through the embedder)", SearchMode::Vector),
        (
            "keyword (exact words: names, ids, rare terms)",
            SearchMode::Keyword {
                text: question.to_owned(),
            },
        ),
        (
            "hybrid (reciprocal rank fusion of both, k = 60)",
            SearchMode::Hybrid {
                text: question.to_owned(),
                weights: HybridWeights::default(),
            },
        ),
    ];
    println!("model {model}; question: {question:?}");
    for (name, mode) in modes {
        let mut request = SearchRequest::new(every_session.clone(), query.clone(), 3);
        request.mode = mode;
        show(
            name,
            &mnemon
                .search_memory(&request, Some(embedder.as_ref()))?
                .hits,
        );
    }

    // A filter applies before the top-k cut: only the user's own words, in every mode.
    let users_only = Filter::from_json(r#"{"eq": {"path": "role", "value": "user"}}"#)?;
    let mut request = SearchRequest::new(every_session, query, 3).with_filter(users_only);
    request.mode = SearchMode::Hybrid {
        text: question.to_owned(),
        weights: HybridWeights::default(),
    };
    show(
        "hybrid, role = user only",
        &mnemon
            .search_memory(&request, Some(embedder.as_ref()))?
            .hits,
    );
    Ok(())
}

fn show(name: &str, hits: &[mnemon::memory::SearchHit]) {
    println!("\n{name}:");
    for hit in hits {
        let session = hit.scope.session_id.as_deref().unwrap_or("-");
        println!(
            "  {:.4}  {session}#{}  {}",
            hit.score,
            hit.index,
            hit.message.content_text()
        );
    }
}
