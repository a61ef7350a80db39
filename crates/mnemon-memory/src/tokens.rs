//! Token-budgeted recall (docs/reference/memory.md#recall-by-token-budget). Tokens are counted by
//! any
//! [`Tokenizer`], the trait `mnemon-types` keeps beside `Embedder`.

use mnemon_types::{Msg, Tokenizer};
use serde::Serialize;

/// Options of [`Memory::recall_within_budget`](crate::Memory::recall_within_budget).
#[derive(Debug, Clone, Default)]
pub struct BudgetOptions {
    /// Tokens added to every message's count (chat formats add a few per message).
    pub per_message_overhead: usize,
    /// Consider only messages carrying this mark.
    pub mark: Option<String>,
    /// Leave out messages carrying this mark.
    pub exclude_mark: Option<String>,
}

/// The result of a budgeted recall: a contiguous tail of the candidates, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetRecall {
    /// The messages, oldest first.
    pub messages: Vec<Msg>,
    /// Each message's cost (tokens of `to_str` plus the overhead), aligned with `messages`.
    pub counts: Vec<usize>,
    /// The sum of `counts`; never above the budget.
    pub total: usize,
}

/// Walks `candidates` from newest to oldest, keeping messages while the total fits `budget`
/// and stopping at the first that does not.
pub(crate) fn recall_tail(
    mut candidates: Vec<Msg>,
    budget: usize,
    tokenizer: &dyn Tokenizer,
    overhead: usize,
) -> BudgetRecall {
    let mut counts = Vec::new();
    let mut total = 0usize;
    for msg in candidates.iter().rev() {
        let cost = tokenizer.count(&msg.to_str()).saturating_add(overhead);
        match total.checked_add(cost) {
            Some(next) if next <= budget => {
                total = next;
                counts.push(cost);
            }
            _ => break,
        }
    }
    counts.reverse();
    let start = candidates.len() - counts.len();
    let messages = candidates.split_off(start);
    BudgetRecall {
        messages,
        counts,
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_factory;
    use mnemon_types::WhitespaceTokenizer;

    #[test]
    fn tail_stops_at_first_misfit() {
        let f = test_factory();
        let msgs: Vec<Msg> = ["a b c d e", "a", "a b"]
            .iter()
            .map(|t| f.msg("n", *t).build().unwrap())
            .collect();
        // to_str adds "n:" as one more whitespace token.
        let r = recall_tail(msgs.clone(), 5, &WhitespaceTokenizer, 0);
        assert_eq!(r.counts, vec![2, 3]);
        assert_eq!(r.total, 5);
        assert_eq!(r.messages, msgs[1..].to_vec());
        assert!(
            recall_tail(msgs, 2, &WhitespaceTokenizer, 0)
                .messages
                .is_empty()
        );
    }

    proptest::proptest! {
        /// `Memory::recall_within_budget` reads a growing window from the end: whatever the
        /// sizes, budget and mark filters, it equals the tail of every candidate.
        #[test]
        fn windowed_recall_equals_the_whole_tail(
            words in proptest::collection::vec((1usize..40, proptest::bool::ANY), 0..400),
            budget in 0usize..6_000,
            overhead in 0usize..4,
            by_mark in 0u8..3,
        ) {
            use crate::{InMemoryMemory, Memory, MemoryQuery};
            let memory = InMemoryMemory::with_factory(test_factory());
            let inputs: Vec<crate::MsgInput> = words
                .iter()
                .enumerate()
                .map(|(i, (n, _))| {
                    serde_json::json!({"id": format!("m{i}"), "name": "n",
                                       "content": vec!["w"; *n].join(" ")})
                    .into()
                })
                .collect();
            memory.add(inputs).unwrap();
            let marked: Vec<String> = words
                .iter()
                .enumerate()
                .filter(|(_, (_, mark))| *mark)
                .map(|(i, _)| format!("m{i}"))
                .collect();
            let marked: Vec<&str> = marked.iter().map(String::as_str).collect();
            memory.mark(&marked, "keep").unwrap();
            let options = BudgetOptions {
                per_message_overhead: overhead,
                mark: (by_mark == 1).then(|| "keep".to_owned()),
                exclude_mark: (by_mark == 2).then(|| "keep".to_owned()),
            };
            let all = memory
                .get_memory(&MemoryQuery {
                    mark: options.mark.as_deref(),
                    exclude_mark: options.exclude_mark.as_deref(),
                    ..MemoryQuery::default()
                })
                .unwrap();
            let want = recall_tail(all, budget, &WhitespaceTokenizer, overhead);
            let got = memory
                .recall_within_budget(budget, &WhitespaceTokenizer, &options)
                .unwrap();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
