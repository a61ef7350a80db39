//! The words keyword search matches (docs/reference/memory.md#keyword-and-hybrid-search): the
//! rules of SQLite's FTS5 `unicode61` tokenizer, which the SQLite memory indexes with, written
//! once in Rust so that the PostgreSQL memory indexes the same words and both backends split a
//! query alike. PostgreSQL's own parser would keep `alice@example.com`, `report.pdf`,
//! `/usr/bin/env`, `3.14` and `1.2.3` whole and leave accents on, so the same search found
//! different messages on the two backends.
//!
//! The rules, as `unicode61` (with its default `remove_diacritics 1`) applies them:
//! - a word is a run of letters (general categories `L*`), numbers (`N*`) and private-use
//!   characters (`Co`); every other character separates words, combining and spacing marks
//!   included, except the Latin combining diacritics U+0300–U+036F, which are dropped;
//! - a Latin letter carrying one diacritic loses it (`é` → `e`, `İ` → `i`); a letter with two
//!   keeps both (`ǖ`);
//! - letters are lower-cased one by one (no final-sigma rule: `ΣΑΣ` → `σασ`), except Cherokee
//!   and Georgian capitals, which `unicode61` leaves as they are; `ς`, `ſ` and the Greek symbol
//!   variants (`ϐ`, `ϑ`, `ϕ`, …) fold as Unicode's case folding has them (`σ`, `s`, `β`, …).
//!
//! The tests check these rules against SQLite's own tokenizer (`fts5vocab`), on examples and
//! on random text of many scripts.

use unicode_general_category::{GeneralCategory, get_general_category};

/// Whether `c` belongs to a word (letters, numbers and private-use characters).
fn is_word_char(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric();
    }
    use GeneralCategory as G;
    matches!(
        get_general_category(c),
        G::UppercaseLetter
            | G::LowercaseLetter
            | G::TitlecaseLetter
            | G::ModifierLetter
            | G::OtherLetter
            | G::DecimalNumber
            | G::LetterNumber
            | G::OtherNumber
            | G::PrivateUse
    )
}

/// The Latin combining diacritics, which `unicode61` drops from a word rather than splitting
/// it there.
fn is_latin_diacritic(c: char) -> bool {
    ('\u{300}'..='\u{36F}').contains(&c)
}

/// Whether `c` is a base letter `unicode61` removes diacritics from: the ASCII letters and the
/// long s.
fn is_latin_base(c: char) -> bool {
    c.is_ascii_alphabetic() || c == 'ſ'
}

/// `c` without its diacritic when it is a Latin letter carrying exactly one: its canonical
/// decomposition is an ASCII letter and one Latin combining diacritic.
fn without_diacritic(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    let mut parts = ['\0'; 2];
    let mut count = 0usize;
    unicode_normalization::char::decompose_canonical(c, |part| {
        if let Some(slot) = parts.get_mut(count) {
            *slot = part;
        }
        count += 1;
    });
    match (count, parts) {
        (2, [base, mark]) if is_latin_base(base) && is_latin_diacritic(mark) => base,
        _ => c,
    }
}

/// Capitals `unicode61` does not lower-case: Cherokee (U+13A0–U+13F5) and Georgian Mtavruli
/// (U+1C90–U+1CBF).
fn keeps_case(c: char) -> bool {
    ('\u{13A0}'..='\u{13F5}').contains(&c) || ('\u{1C90}'..='\u{1CBF}').contains(&c)
}

/// The letters `unicode61` folds to another letter beyond lower-casing (Unicode's case folding
/// of the final sigma, the long s and the Greek symbol variants).
fn folded_variant(c: char) -> char {
    match c {
        'ς' => 'σ',
        'ſ' => 's',
        'ϐ' => 'β',
        'ϑ' => 'θ',
        'ϕ' => 'φ',
        'ϖ' => 'π',
        'ϰ' => 'κ',
        'ϱ' => 'ρ',
        'ϵ' => 'ε',
        other => other,
    }
}

/// Appends `c`, folded (diacritic removed, lower-cased), to `word`.
fn push_folded(word: &mut String, c: char) {
    let base = folded_variant(without_diacritic(c));
    if keeps_case(base) {
        word.push(base);
    } else {
        word.extend(base.to_lowercase());
    }
}

/// The words keyword search matches in `text`, in order: runs of letters, numbers and
/// private-use characters, diacritics removed from Latin letters, lower-cased, as SQLite's FTS5
/// `unicode61` tokenizer reads them (the module's rules; docs/reference/memory.md#keyword-words).
/// A keyword query matches a message when one of its words is one of the message's.
///
/// ```
/// assert_eq!(
///     mnemon_memory::keyword_words("Mail alice@example.com: Café v1.2"),
///     ["mail", "alice", "example", "com", "cafe", "v1", "2"]
/// );
/// ```
pub fn keyword_words(text: &str) -> Vec<String> {
    words(text).collect()
}

/// The words of `text`, folded, in order.
pub(crate) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut chars = text.chars().peekable();
    std::iter::from_fn(move || {
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if is_word_char(c) {
                push_folded(&mut word, c);
            } else if is_latin_diacritic(c) && !word.is_empty() {
                // Dropped inside a word (decomposed text: `e` U+0301).
            } else if !word.is_empty() {
                break;
            }
            chars.next();
        }
        (!word.is_empty()).then_some(word)
    })
}

/// The text PostgreSQL indexes for `text`: its words, folded, one space between each, which
/// PostgreSQL's `simple` parser reads back as the same words.
#[cfg(feature = "postgres")]
pub(crate) fn indexed_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in words(text) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<String> {
        words(text).collect()
    }

    #[test]
    fn punctuation_splits_addresses_paths_and_numbers() {
        assert_eq!(
            split("mail alice@example.com about report.pdf"),
            ["mail", "alice", "example", "com", "about", "report", "pdf"]
        );
        assert_eq!(
            split("/usr/bin/env 3.14 v1.2.3"),
            ["usr", "bin", "env", "3", "14", "v1", "2", "3"]
        );
    }

    #[test]
    fn latin_diacritics_and_case_fold() {
        assert_eq!(
            split("Café CAFÉ cafe\u{301} İstanbul"),
            ["cafe", "cafe", "cafe", "istanbul"]
        );
        // Two diacritics: kept.
        assert_eq!(split("ǖ"), ["ǖ"]);
        assert_eq!(split("ΣΑΣ"), ["σασ"]);
    }

    #[test]
    fn marks_of_other_scripts_split_words() {
        assert_eq!(split("हिन्दी"), ["ह", "न", "द"]);
    }

    /// The oracle: SQLite's own `unicode61` tokenizer, read back through `fts5vocab`.
    #[cfg(feature = "sqlite")]
    fn fts5_words(conn: &rusqlite::Connection, text: &str) -> Vec<String> {
        conn.execute_batch("DELETE FROM t;").unwrap();
        conn.execute("INSERT INTO t (x) VALUES (?1)", [text])
            .unwrap();
        let mut stmt = conn.prepare("SELECT term FROM v ORDER BY offset").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[cfg(feature = "sqlite")]
    fn oracle() -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(x);
             CREATE VIRTUAL TABLE v USING fts5vocab(t, instance);",
        )
        .unwrap();
        conn
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn the_examples_split_as_fts5_splits_them() {
        let conn = oracle();
        for text in [
            "mail alice@example.com about report.pdf",
            "/usr/bin/env 3.14 v1.2.3",
            "Café CAFÉ cafe\u{301} İstanbul ǖ ΣΑΣ ᾈ ß ẞ",
            "हिन्दी 日本語のテキスト привет Ꭰ Ა ǅ",
            "ς ſ ϐ ϑ ϕ ϖ ϰ ϱ ϵ ẛ ι ͅ ﬀ ŉ K Å Ω",
            "ά ё й ǘ ṩ ḉ ø đ ł æ œ þ ĳ ǆ ǳ ᾳ ὰ ѐ ї ồ ẫ ệ ǻ",
        ] {
            assert_eq!(split(text), fts5_words(&conn, text), "{text:?}");
        }
    }

    #[cfg(feature = "sqlite")]
    proptest::proptest! {
        /// Any text over letters of many scripts, marks, digits and punctuation splits into the
        /// words SQLite's tokenizer finds.
        #[test]
        fn words_are_fts5s_words(text in "[a-zA-Z0-9 .@/_\\-éÉèçÇñÑüÜöİıßẞǖǅΣσςΑαᾈЖжअि्ीाह日本ー\u{301}\u{308}\u{2028}\u{a0}\u{E000}Ꭰ Ა½²٣]{0,40}") {
            let conn = oracle();
            proptest::prop_assert_eq!(split(&text), fts5_words(&conn, &text), "{:?}", text);
        }
    }
}
