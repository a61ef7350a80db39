//! Conversation memory: add a conversation, mark what matters, recall the most recent messages
//! that fit a token budget, search by embedding, and export an AgentScope-compatible file.
//!
//! Run it with `cargo run --example memory_recall`.

use mnemon::embed::{Cl100kTokenizer, Embedder, HashingEmbedder};
use mnemon::memory::{
    BudgetOptions, ExportOptions, ExportTarget, Exported, InMemoryMemory, Memory, MemoryQuery,
    RetrievalQuery, RetrieveOptions,
};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `InMemoryMemory` lives in the process; `mnemon::Mnemon::open(dir)?.session(id)?` gives
    // the same trait over a durable SQLite file.
    let memory = InMemoryMemory::new();
    let embedder = HashingEmbedder::new(HashingEmbedder::DEFAULT_DIMENSION)?;
    let conversation = [
        (
            "user",
            "Mara",
            "I am allergic to peanuts, please remember that.",
        ),
        (
            "assistant",
            "Agent",
            "Noted: no peanuts in any recipe I suggest.",
        ),
        (
            "user",
            "Mara",
            "Suggest a quick lunch with what is in my fridge: eggs, spinach, feta.",
        ),
        (
            "assistant",
            "Agent",
            "A spinach and feta omelette takes ten minutes.",
        ),
        ("user", "Mara", "And a dessert for Sunday?"),
        (
            "assistant",
            "Agent",
            "Baked apples with cinnamon and oats, no nuts.",
        ),
    ];
    let texts: Vec<&str> = conversation.iter().map(|(_, _, text)| *text).collect();
    let vectors = embedder.embed(&texts)?;
    let messages = conversation
        .iter()
        .zip(vectors)
        .enumerate()
        .map(|(i, ((role, name, text), vector))| {
            json!({"id": format!("m{i}"), "name": name, "role": role, "content": text,
                   "embedding": vector})
            .into()
        })
        .collect();
    memory.add(messages)?;

    // Marks tag messages worth keeping in view, whatever their age.
    memory.mark(&["m0"], "pinned")?;
    let pinned = memory.render(&MemoryQuery {
        mark: Some("pinned"),
        ..MemoryQuery::default()
    })?;
    println!("# pinned\n{pinned}");

    // The newest messages that fit 40 cl100k_base tokens, oldest first.
    let recent = memory.recall_within_budget(40, &Cl100kTokenizer, &BudgetOptions::default())?;
    println!(
        "\n# the last {} messages fit in {} tokens",
        recent.messages.len(),
        recent.total
    );
    for message in &recent.messages {
        println!("{}", message.to_str());
    }

    // Semantic-style recall (lexical here: the hashing embedder matches shared words).
    let question = embedder
        .embed(&["is Mara allergic to anything"])?
        .pop()
        .ok_or("the embedder returned no vector")?;
    let options = RetrieveOptions {
        top_k: Some(2),
        preserve_order: false,
        ..RetrieveOptions::default()
    };
    println!("\n# recalled for \"is Mara allergic to anything\"");
    for hit in memory.retrieve_by_embedding(RetrievalQuery::Vector(question), &options, None)? {
        println!("{:.3}  #{}  {}", hit.score, hit.index, hit.message.to_str());
    }

    // The export is an AgentScope 0.0.4 file, readable by the original and by `mnemon memory`.
    if let Exported::Json(text) = memory.export(ExportTarget::Json, &ExportOptions::default())? {
        println!("\n# export: {} bytes of AgentScope JSON", text.len());
    }
    Ok(())
}
