//! The fill's pet names (issue 40): a few thousand given names, the listed ones of
//! `names.txt` first and made-up ones of two or three syllables after them, drawn with a
//! Zipf-like skew, so that a common word matches tens of thousands of pets at 1M and the tail
//! a few dozen; some names have two words ("Sir Belvedere", "Bella Rose"). Deterministic: a
//! position always gets the same name. Answers are checked by the server's own rules for names
//! (`src/search.rs`, included).

use std::sync::OnceLock;

/// The listed names, the most common first.
const LISTED: &str = include_str!("names.txt");
/// Distinct given names in all: the listed ones, then made-up ones up to this many.
pub const GIVEN_NAMES: usize = 3_000;
/// The given name of rank r (1-based) is drawn with a weight of r^-ZIPF_EXPONENT: with 3,000
/// names, the first takes about 7.8% of the pets, the 10th 1%, the 100th 0.13%, the last 0.006%.
const ZIPF_EXPONENT: f64 = 0.9;
/// A title before the given name, for one name in ten (each title about 1% of the pets).
const TITLES: [&str; 10] = [
    "Sir", "Lady", "Miss", "Mister", "Captain", "Little", "Princess", "Duke", "Doctor", "Baron",
];
/// The made-up names: an onset, maybe a middle, an ending ("Ka" "ri" "na", "Lo" "" "x").
const ONSETS: [&str; 28] = [
    "Ka", "Lo", "Mi", "Ta", "Be", "Ro", "Sa", "Ni", "Da", "Fe", "Jo", "Ze", "Vi", "Ma", "Pe", "Ru",
    "Li", "Co", "Ge", "Ha", "Bo", "Tu", "Ne", "Wi", "Ar", "El", "Is", "Or",
];
const MIDDLES: [&str; 12] = [
    "", "ri", "la", "no", "be", "si", "ta", "me", "do", "ren", "lin", "mar",
];
const ENDINGS: [&str; 12] = [
    "n", "na", "s", "lo", "ra", "ty", "x", "lie", "do", "mi", "bel", "ko",
];

/// The given names in rank order and the cumulative weights of the draw.
struct Names {
    given: Vec<String>,
    cumulative: Vec<f64>,
}

fn names() -> &'static Names {
    static NAMES: OnceLock<Names> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut given: Vec<String> = Vec::with_capacity(GIVEN_NAMES);
        let mut seen = std::collections::HashSet::new();
        let listed = LISTED
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'));
        // The made-up ones in an order of their own hash, so that ranks mix their shapes.
        let mut made: Vec<String> = ONSETS
            .iter()
            .flat_map(|onset| {
                MIDDLES.iter().flat_map(move |middle| {
                    ENDINGS
                        .iter()
                        .map(move |ending| format!("{onset}{middle}{ending}"))
                })
            })
            .collect();
        made.sort_by_key(|name| {
            mix(name
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b))))
        });
        for name in listed.map(str::to_owned).chain(made) {
            if given.len() == GIVEN_NAMES {
                break;
            }
            // A made-up name may be a listed one ("Max"); spellings that fold alike ("Zoë",
            // "Zoé") are kept apart, as a shop has both.
            if seen.insert(name.clone()) {
                given.push(name);
            }
        }
        assert_eq!(given.len(), GIVEN_NAMES, "enough syllable combinations");
        let mut total = 0.0;
        let cumulative = (1..=given.len())
            .map(|rank| {
                total += (rank as f64).powf(-ZIPF_EXPONENT);
                total
            })
            .collect();
        Names { given, cumulative }
    })
}

/// splitmix64's finalizer: a well-spread hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A given name drawn by the skew from the hash `h`.
fn draw(h: u64) -> &'static str {
    let names = names();
    let total = names.cumulative.last().copied().unwrap_or(0.0);
    // 53 bits of the hash as a uniform number in [0, total).
    let at = (h >> 11) as f64 / (1u64 << 53) as f64 * total;
    let rank = names.cumulative.partition_point(|&c| c <= at);
    &names.given[rank.min(names.given.len() - 1)]
}

/// The name of the pet at `position` (0-based, in the fill's order): a given name; one in ten
/// with a title before it, one in twenty with a second given name after it.
pub fn name(position: u64) -> String {
    let h = mix(position);
    let given = draw(h);
    let shape = mix(h);
    match shape % 20 {
        0 | 1 => format!("{} {given}", TITLES[((shape >> 8) % 10) as usize]),
        2 => format!("{given} {}", draw(mix(shape))),
        _ => given.to_owned(),
    }
}

/// The most common given name: the first listed.
pub fn most_common() -> &'static str {
    &names().given[0]
}

/// The server's own rules for names (`src/search.rs`, included by `main.rs`): the bench checks
/// pages and counts matches by them, not by a model of its own.
pub use crate::name_rules::{Search, fold, sort_key};

/// Whether a pet named `name` matches the search `q` (a `q` the server refuses matches none).
pub fn matches(q: &str, name: &str) -> bool {
    Search::parse(q).is_ok_and(|search| search.matches(name))
}

/// How many of the pets at positions `0..pets` match each of `queries`, and how many of those
/// `available` says are available.
pub fn counts(queries: &[&str], pets: u64, available: fn(u64) -> bool) -> Vec<(u64, u64)> {
    let queries: Vec<Search> = queries
        .iter()
        .map(|q| Search::parse(q).expect("the bench's queries are valid"))
        .collect();
    let mut counts = vec![(0, 0); queries.len()];
    for position in 0..pets {
        // A pet's terms once, for every query.
        let terms = crate::name_rules::prefixes(&name(position));
        for (count, search) in counts.iter_mut().zip(&queries) {
            if search.terms().iter().all(|term| terms.contains(term)) {
                count.0 += 1;
                count.1 += u64::from(available(position));
            }
        }
    }
    counts
}
