//! What one call may make the process hold: [`Limits`] on the references a call resolves and
//! the bytes its output takes, and the buffer that enforces the byte limit.
//!
//! A render's text and a parameter map come from the caller (a model, a client with a read key)
//! while each marker or reference can stand for a whole stored payload, so without a cap a small
//! request asks for its size times the number of markers: 100,000 markers of a 2 MiB image in a
//! 2 MiB body are about 280 GB of `data:` URLs. The limits bound both factors, and the output is
//! checked before each piece is added, so a refused call never holds more than the limit.

use crate::error::RefsError;

/// The default of [`Limits::max_output_bytes`]: 32 MiB, the same as the library host's result
/// cap (`mnemon_host::DEFAULT_MAX_RESULT_BYTES`), so one query and one render are bounded
/// alike.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 32 * 1024 * 1024;

/// The default of [`Limits::max_references`]: each reference is a store read of a whole asset,
/// and 10,000 leaves room for any text or tool call a model writes.
pub const DEFAULT_MAX_REFERENCES: usize = 10_000;

/// What one [`render_limited`](crate::render_limited) or
/// [`resolve_params_limited`](crate::resolve_params_limited) call may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes the output may take: for a render, the rendered text plus the markers
    /// left as written and their messages; for parameters, the substituted parameters written
    /// as compact JSON (bytes as `data:` URLs).
    pub max_output_bytes: usize,
    /// The most markers a text may hold (every marker counts, resolvable or not), or
    /// references a parameter map may ask to substitute.
    pub max_references: usize,
}

impl Limits {
    /// No limits: for input the caller trusts (its own files), never for a server's clients.
    pub const NONE: Limits = Limits {
        max_output_bytes: usize::MAX,
        max_references: usize::MAX,
    };

    /// These limits with `max_output_bytes` instead.
    pub fn with_max_output_bytes(self, max_output_bytes: usize) -> Limits {
        Limits {
            max_output_bytes,
            ..self
        }
    }

    /// These limits with `max_references` instead.
    pub fn with_max_references(self, max_references: usize) -> Limits {
        Limits {
            max_references,
            ..self
        }
    }
}

impl Default for Limits {
    /// [`DEFAULT_MAX_OUTPUT_BYTES`] and [`DEFAULT_MAX_REFERENCES`].
    fn default() -> Limits {
        Limits {
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            max_references: DEFAULT_MAX_REFERENCES,
        }
    }
}

/// Text that refuses to grow past a byte limit: every addition is checked before it is made,
/// and the capacity never goes past the limit either (a `String` doubles its capacity, which
/// would otherwise let a text of just over half the limit hold the whole of it again).
///
/// The text is sent as a JSON string, where a control character takes up to six bytes
/// (`\u0001`), so each piece counts as the bytes it takes there: a text of control characters
/// within the limit would otherwise answer with six times the limit.
pub(crate) struct CappedText {
    text: String,
    max: usize,
    /// Bytes counted against the limit that are not part of the text (reports of markers left
    /// as written).
    charged: usize,
    /// What to refuse with.
    over: fn(usize) -> RefsError,
}

impl CappedText {
    /// An empty text of at most `max` bytes, refusing with `over(max)`; `capacity` is a hint.
    pub(crate) fn new(max: usize, capacity: usize, over: fn(usize) -> RefsError) -> CappedText {
        CappedText {
            text: String::with_capacity(capacity.min(max)),
            max,
            charged: 0,
            over,
        }
    }

    /// How many more bytes fit.
    pub(crate) fn room(&self) -> usize {
        self.max
            .saturating_sub(self.text.len())
            .saturating_sub(self.charged)
    }

    /// The text's length so far.
    pub(crate) fn len(&self) -> usize {
        self.text.len()
    }

    /// Counts `bytes` held elsewhere against the limit, or refuses if they do not fit.
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<(), RefsError> {
        if bytes > self.room() {
            return Err((self.over)(self.max));
        }
        self.charged += bytes;
        Ok(())
    }

    /// The refusal of a piece that does not fit.
    pub(crate) fn refusal(&self) -> RefsError {
        (self.over)(self.max)
    }

    /// Appends `piece`, or refuses if it does not fit (leaving the text as it was).
    pub(crate) fn push(&mut self, piece: &str) -> Result<(), RefsError> {
        // What JSON's escapes add to the piece (its quotes aside), charged beside the text.
        let escapes = crate::size::json_str_len(piece)
            .saturating_sub(2)
            .saturating_sub(piece.len());
        if piece.len().saturating_add(escapes) > self.room() {
            return Err(self.refusal());
        }
        self.charged += escapes;
        let needed = self.text.len() + piece.len();
        if needed > self.text.capacity() {
            // Grow as a String would (doubling), but never past the limit.
            let target = needed
                .max(self.text.capacity().saturating_mul(2))
                .min(self.max);
            self.text.reserve_exact(target - self.text.len());
        }
        self.text.push_str(piece);
        Ok(())
    }

    /// Appends again the bytes at `range` of the text (an earlier piece), or refuses if they do
    /// not fit.
    pub(crate) fn repeat(&mut self, range: std::ops::Range<usize>) -> Result<(), RefsError> {
        if range.len() > self.room() {
            return Err(self.refusal());
        }
        // The range is one this text handed out (a piece's start and end), so it lies on
        // character boundaries; copied out first because the text cannot lend itself to itself.
        let piece = self.text.get(range).unwrap_or_default().to_owned();
        self.push(&piece)
    }

    /// The text.
    pub(crate) fn into_string(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(max: usize) -> RefsError {
        RefsError::RenderTooLarge { limit: max }
    }

    #[test]
    fn capped_text_refuses_before_it_grows_past_the_limit() {
        let mut text = CappedText::new(10, 1_000, over);
        assert!(text.text.capacity() <= 10);
        text.push("hello").unwrap();
        text.repeat(0..5).unwrap();
        assert_eq!(text.room(), 0);
        assert!(matches!(
            text.push("!"),
            Err(RefsError::RenderTooLarge { limit: 10 })
        ));
        assert!(text.text.capacity() <= 10, "{}", text.text.capacity());
        assert_eq!(text.into_string(), "hellohello");

        let mut text = CappedText::new(10, 0, over);
        text.push("abc").unwrap();
        text.charge(6).unwrap();
        assert_eq!(text.room(), 1);
        assert!(text.charge(2).is_err());
        assert!(text.repeat(0..3).is_err());
        assert_eq!(text.len(), 3);

        // Control characters count as their escapes (`\u0001`: six bytes), quotes as two.
        let mut text = CappedText::new(12, 0, over);
        text.push("\u{1}").unwrap();
        assert_eq!(text.room(), 6);
        assert!(text.push("\u{1}\u{1}").is_err());
        text.push("\"\"\"").unwrap();
        assert_eq!(text.room(), 0);
        assert_eq!(text.len(), 4);
    }
}
