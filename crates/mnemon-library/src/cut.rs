//! The cut of a ranked order (`docs/reference/library.md#query-pipeline`, step 5): by a number of
//! bits or a token budget. Shared by query results and [`Library::slice`](crate::Library::slice).

/// How to cut a result or a slice: by number of bits or by total tokens. On the wire
/// (`count_type`) it is written `token` or `bit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "schema",
    derive(schemars::JsonSchema),
    schemars(rename_all = "lowercase")
)]
pub enum CountType {
    /// Sum `token_count` up to the budget.
    #[default]
    Token,
    /// Take a number of bits.
    Bit,
}

/// Walks ranked candidates and applies the cut (docs/reference/library.md#query-pipeline step 5).
/// Returns how many are kept, the text limit for a lone over-budget first bit, and whether the
/// candidates ran out before the cut was decided.
pub(crate) fn cut_ranked(
    ranked: impl Iterator<Item = usize>,
    count: i64,
    count_type: CountType,
    token_counts: &[i64],
) -> (usize, Option<usize>, bool) {
    let mut kept = 0usize;
    let mut sum: i64 = 0;
    for i in ranked {
        if count >= 0 {
            match count_type {
                CountType::Bit => {
                    if kept as i64 >= count {
                        return (kept, None, false);
                    }
                }
                CountType::Token => {
                    let tc = token_counts.get(i).copied().unwrap_or(0);
                    if sum.saturating_add(tc) > count {
                        if kept == 0 {
                            return (1, Some(count as usize), false);
                        }
                        return (kept, None, false);
                    }
                    sum = sum.saturating_add(tc);
                }
            }
        }
        kept += 1;
    }
    (kept, None, true)
}

/// Applies the cut to an order: the kept indices and the first bit's text limit, if any.
pub(crate) fn cut(
    order: &mut dyn Iterator<Item = usize>,
    count: i64,
    count_type: CountType,
    token_counts: &[i64],
) -> (Vec<usize>, Option<usize>) {
    let mut taken = Vec::new();
    let (n, truncate, _) = cut_ranked(
        std::iter::from_fn(|| {
            let i = order.next()?;
            taken.push(i);
            Some(i)
        }),
        count,
        count_type,
        token_counts,
    );
    taken.truncate(n);
    (taken, truncate)
}
