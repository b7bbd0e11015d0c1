//! Finding a pet by its name: how a name and a query are folded (Unicode case folding and
//! compatibility decomposition, combining marks dropped: "Zoë" is "zoe"), split into words,
//! and turned into the terms both stores index (`prefixes`) and look up (`Search::terms`),
//! and the folded name a list sorts by (`sort_key`). Pure: no store, no HTTP. Invariant: a
//! pet's name matches a search exactly when every term of the search is among the name's
//! prefixes, so a store answers from its index alone and never reads a name back to check it.

use std::fmt;

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// Most words a query may have.
pub const MAX_QUERY_WORDS: usize = 8;
/// Most characters a query may have, as sent (after percent-decoding).
pub const MAX_QUERY_CHARS: usize = 100;
/// The characters of a word that count: a word's prefixes are indexed up to this length, and a
/// longer query word is cut to it. Nobody types more to find an animal, and it bounds what one
/// pet costs its index.
pub const WORD_CHARS: usize = 16;
/// The words of a name that count, the first ones: the same bound, for a name of many words.
pub const NAME_WORDS: usize = 16;
/// The bytes of the folded name a list sorts by; two names alike that far sort by id.
pub const SORT_KEY_BYTES: usize = 64;

/// `text` folded for comparison: compatibility-decomposed (NFKD), case-folded, decomposed
/// again (folding can compose), and without combining marks.
pub fn fold(text: &str) -> String {
    let decomposed: String = text.nfkd().collect();
    caseless::default_case_fold_str(&decomposed)
        .nfkd()
        .filter(|c| !is_combining_mark(*c))
        .collect()
}

/// The folded words of `text`: runs of letters and digits, in order, anything else a break.
pub fn words(text: &str) -> Vec<String> {
    fold(text)
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `word` cut to `WORD_CHARS` characters.
fn cut(word: &str) -> &str {
    match word.char_indices().nth(WORD_CHARS) {
        Some((end, _)) => &word[..end],
        None => word,
    }
}

/// What a pet named `name` is indexed by: its sort key and its terms, from one folding.
pub struct Indexed {
    pub sort_key: String,
    pub terms: Vec<String>,
}

/// `sort_key` and `prefixes` of `name`, folding it once: what each write of a pet keeps.
pub fn index(name: &str) -> Indexed {
    let words = words(name);
    Indexed {
        sort_key: key_of(&words),
        terms: terms_of(&words),
    }
}

/// Every term a pet named `name` is found by: each prefix (one character and up) of each of
/// its first `NAME_WORDS` words as cut to `WORD_CHARS`, once each, in no particular order.
pub fn prefixes(name: &str) -> Vec<String> {
    terms_of(&words(name))
}

fn terms_of(words: &[String]) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in words.iter().take(NAME_WORDS) {
        let word = cut(word);
        for (end, c) in word.char_indices() {
            let prefix = &word[..end + c.len_utf8()];
            if !terms.iter().any(|term| term == prefix) {
                terms.push(prefix.to_owned());
            }
        }
    }
    terms
}

/// What `sort=name` orders pets by, before their ids: the folded words of the name, one space
/// between them, cut to `SORT_KEY_BYTES` at a character's end.
pub fn sort_key(name: &str) -> String {
    key_of(&words(name))
}

fn key_of(words: &[String]) -> String {
    let mut key = words.join(" ");
    if key.len() > SORT_KEY_BYTES {
        let mut end = SORT_KEY_BYTES;
        while !key.is_char_boundary(end) {
            end -= 1;
        }
        key.truncate(end);
    }
    key
}

/// The order of a list: by id (the default, oldest first), newest first, or by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sort {
    #[default]
    Id,
    /// `-id`.
    Newest,
    /// By `sort_key`, then id.
    Name,
}

impl Sort {
    /// The value of `sort` that asks for this order.
    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Id => "id",
            Sort::Newest => "-id",
            Sort::Name => "name",
        }
    }

    pub fn parse(text: &str) -> Option<Sort> {
        [Sort::Id, Sort::Newest, Sort::Name]
            .into_iter()
            .find(|sort| sort.as_str() == text)
    }

    /// Its code in a cursor.
    pub fn code(self) -> u8 {
        match self {
            Sort::Id => 0,
            Sort::Newest => 1,
            Sort::Name => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<Sort> {
        [Sort::Id, Sort::Newest, Sort::Name]
            .into_iter()
            .find(|sort| sort.code() == code)
    }
}

/// A query's `q`, read: the terms a pet's name must all have among its prefixes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Search {
    /// Sorted, without repeats, and without a term that is the start of another (a word that
    /// starts with the longer one starts with the shorter too).
    terms: Vec<String>,
}

/// Why a `q` is refused, in words meant for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSearch(pub &'static str);

impl fmt::Display for InvalidSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl Search {
    /// Reads `q` as sent: at most `MAX_QUERY_CHARS` characters and `MAX_QUERY_WORDS` words.
    /// A `q` without a word (empty, or only spaces and punctuation) is no filter.
    pub fn parse(q: &str) -> Result<Search, InvalidSearch> {
        const INVALID: InvalidSearch = InvalidSearch(
            "q must be at most 100 characters and 8 words (a word: letters and digits)",
        );
        if q.chars().count() > MAX_QUERY_CHARS {
            return Err(INVALID);
        }
        let words = words(q);
        if words.len() > MAX_QUERY_WORDS {
            return Err(INVALID);
        }
        let mut terms: Vec<String> = words.iter().map(|word| cut(word).to_owned()).collect();
        terms.sort();
        terms.dedup();
        let implied = |term: &String| {
            terms
                .iter()
                .any(|other| other != term && other.starts_with(term.as_str()))
        };
        let kept = terms
            .iter()
            .filter(|term| !implied(term))
            .cloned()
            .collect();
        Ok(Search { terms: kept })
    }

    /// Whether this search filters nothing.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms, each of which a match's name has among its `prefixes`.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// Whether a pet named `name` matches, as the stores' indexes answer it.
    pub fn matches(&self, name: &str) -> bool {
        let prefixes = prefixes(name);
        self.terms.iter().all(|term| prefixes.contains(term))
    }

    /// The terms as one text: what the next link's `q` carries (it reads back as the same
    /// search).
    pub fn canonical(&self) -> String {
        self.terms.join(" ")
    }

    /// A hash of the terms (FNV-1a, 64 bits), for a cursor's check that it is used with the
    /// search it was made for; 0 for no search. Stable across builds and instances.
    pub fn fingerprint(&self) -> u64 {
        if self.terms.is_empty() {
            return 0;
        }
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.canonical().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(name: &str, q: &str) -> bool {
        Search::parse(q).expect("a valid q").matches(name)
    }

    #[test]
    fn every_word_of_the_query_starts_a_word_of_the_name_ignoring_case_and_accents() {
        for (name, q, expected) in [
            ("Bella", "bel", true),
            ("Sir Belvedere", "bel", true),
            ("Sir Belvedere", "sir bel", true),
            ("Bella", "sir bel", false),
            ("Zoë", "zoe", true),
            ("ZOE", "zoë", true),
            ("Zoe", "oe", false),
            ("Amélie-Rose", "rose", true),
            ("Amélie-Rose", "AMELIE", true),
            ("O'Malley", "malley", true),
            ("O'Malley", "o", true),
            ("Rex 2", "2", true),
            ("Rex2", "2", false),
            ("Rex2", "rex2", true),
            ("Straße", "strasse", true),
            ("ﬁfi", "fifi", true),
            ("Ｍａｘ", "max", true),
            ("Ἀθηνᾶ", "αθηνα", true),
            ("Şule", "sule", true),
            ("🐶 Biscuit", "biscuit", true),
            ("Biscuit🐶Crumb", "crumb", true),
            ("Bella", "bellamy", false),
            ("Bella", "bella bel", true),
            ("Bella", "", true),
            ("Bella", "🐶", true),
            ("Dog_Buddy", "buddy", true),
            ("x".repeat(40).as_str(), &"x".repeat(20), true),
        ] {
            assert_eq!(found(name, q), expected, "{name:?} by {q:?}");
        }
    }

    #[test]
    fn a_query_of_too_many_words_or_characters_is_refused() {
        assert!(Search::parse(&"a ".repeat(8)).is_ok());
        assert!(Search::parse(&"a ".repeat(9)).is_err());
        assert!(Search::parse(&"é".repeat(100)).is_ok());
        assert!(Search::parse(&"é".repeat(101)).is_err());
        assert!(Search::parse("!!! ...").expect("no words").is_empty());
    }

    #[test]
    fn terms_are_sorted_once_each_and_without_a_start_of_another() {
        let search = Search::parse("Bel bella  ZOË bel b").expect("valid");
        assert_eq!(search.terms(), ["bella", "zoe"]);
        assert_eq!(search.canonical(), "bella zoe");
    }

    #[test]
    fn a_name_is_indexed_by_each_prefix_of_its_words_once() {
        let mut terms = prefixes("Bel Bella");
        terms.sort();
        assert_eq!(terms, ["b", "be", "bel", "bell", "bella"]);
        assert_eq!(prefixes(&"y".repeat(100)).len(), WORD_CHARS);
        let many = (0..40)
            .map(|n| format!("w{n}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(prefixes(&many).len() <= NAME_WORDS * 3);
    }

    #[test]
    fn the_sort_key_is_the_folded_words_cut_at_a_character() {
        assert_eq!(sort_key("  Sir   Belvedere!"), "sir belvedere");
        assert_eq!(sort_key("Émile"), "emile");
        let long = sort_key(&"ж".repeat(100));
        assert!(long.len() <= SORT_KEY_BYTES && long.chars().all(|c| c == 'ж'));
    }
}
