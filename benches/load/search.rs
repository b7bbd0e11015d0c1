//! The search part (issue 40, "Find any animal"; `BENCH_ONLY=search`): on the 1M store, whose
//! pets the fill named from `names.rs`'s list, a search's first page against list20, and a
//! deep page of a common word and of `sort=name` (with and without `q`) against its first
//! page, each group as back-to-back rounds on the same server. A deep page is reached as a
//! client reaches it, by following `Link: rel="next"` from the first page, every page of the
//! walk checked; first, one search is walked to its end and its count held against the
//! fill's. The goals hold the rounds' req/s a core against each other.

use crate::check::{self, Expect};
use crate::client::Conn;
use crate::figures::Kind;
use crate::process::Server;
use crate::report::thousands;
use crate::{Bench, Spec, fill, names};

/// The list's most common given name, folded: its pets run to tens of thousands at 1M.
const COMMON: &str = "bella";
/// list20 on the big store, the first pages' yardstick.
pub const LIST20: &str = "search list20";
/// The first pages held against list20, as (scenario, path): a common word, two words (a
/// title and the start of a name, as a shop assistant types it), a word and a status.
pub const FIRST_PAGES: [(&str, &str); 3] = [
    ("search bella", "/v1/pets?q=bella&limit=20"),
    ("search sir bel", "/v1/pets?q=sir%20bel&limit=20"),
    (
        "search bella available",
        "/v1/pets?q=bella&status=available&limit=20",
    ),
];
/// The deep pages, as (first-page scenario, deep-page scenario, first page): the `DEEP_PAGE`th
/// page of 20 of the common word, of every pet by name, and of the common word by name.
pub const DEEP_PAGES: [(&str, &str, &str); 3] = [
    (
        "search bella p1",
        "search bella p1000",
        "/v1/pets?q=bella&limit=20",
    ),
    (
        "search name p1",
        "search name p1000",
        "/v1/pets?sort=name&limit=20",
    ),
    (
        "search bella name p1",
        "search bella name p1000",
        "/v1/pets?q=bella&sort=name&limit=20",
    ),
];
/// Which page of 20 the deep pages are.
pub const DEEP_PAGE: u64 = 1_000;
/// The measured page size, and the walk's (the API's largest).
const PAGE: u64 = 20;
const WALK: u64 = 100;
/// Walked to its end and counted: the two-word search, a thousand pets or so at 1M.
const COUNTED: (&str, &str) = ("sir bel", "/v1/pets?q=sir%20bel&limit=100");

/// Where a walk got to: the pets it passed, and the sort key of the last one.
struct Walked {
    pets: u64,
    last: Option<(String, i64)>,
    conn: Option<Conn>,
}

impl Bench<'_> {
    /// The search pairs on `server`, whose store holds the fill's first `pets` pets.
    pub async fn search(&mut self, server: &Server, pets: u64) {
        if names::fold(names::most_common()) != COMMON {
            self.report.fail(format!(
                "search: the list's first name is {}, not {COMMON}",
                names::most_common()
            ));
            return;
        }
        let [(common, common_available), (counted, _)] =
            names::counts(&[COMMON, COUNTED.0], pets, fill::is_available)[..]
        else {
            unreachable!("one count a query");
        };
        self.report.note(format!(
            "search: of the fill's {} pets, q={COMMON} matches {} ({} available), q={} {}",
            thousands(pets),
            thousands(common),
            thousands(common_available),
            COUNTED.0,
            thousands(counted)
        ));
        self.count_walk(server, counted).await;

        for round in 0..self.settings.rounds {
            for (scenario, path) in [(LIST20, crate::LIST20)].into_iter().chain(FIRST_PAGES) {
                let expect = if scenario == LIST20 {
                    Expect::List20
                } else {
                    Expect::Found
                };
                let spec = Spec::paired(scenario, path, expect, round, self.settings, true);
                self.measure(&spec, server, Kind::Petstore, Some(pets))
                    .await;
            }
        }

        let deep_skip = (DEEP_PAGE - 1) * PAGE;
        for (first_name, deep_name, first) in DEEP_PAGES {
            if first.contains("q=") && common < deep_skip + PAGE {
                self.report.fail(format!(
                    "{deep_name}: q={COMMON} matches {common} pets, fewer than page {DEEP_PAGE} needs (a larger BENCH_BIG_STORE)"
                ));
                continue;
            }
            let Some(deep) = self.walk_to_page(server, first, deep_name).await else {
                continue;
            };
            for round in 0..self.settings.rounds {
                for (scenario, path) in [(first_name, first), (deep_name, deep.as_str())] {
                    let spec =
                        Spec::paired(scenario, path, Expect::Found, round, self.settings, false);
                    self.measure(&spec, server, Kind::Petstore, Some(pets))
                        .await;
                }
            }
        }
    }

    /// Walks `COUNTED` to its last page and holds the pets seen against `expected`, the fill's
    /// count: the index finds every match, once.
    async fn count_walk(&mut self, server: &Server, expected: u64) {
        let started = std::time::Instant::now();
        let mut walked = Walked {
            pets: 0,
            last: None,
            conn: None,
        };
        let mut path = Some(COUNTED.1.to_owned());
        while let Some(at) = path {
            match self.step(server, &mut walked, &at, true).await {
                Ok(next) => path = next,
                Err(why) => {
                    self.report
                        .fail(format!("search walk of {}: {why}", COUNTED.1));
                    return;
                }
            }
        }
        self.report.note(format!(
            "search: q={} walked to its end in pages of {WALK}: {} pets in {:.1} s",
            COUNTED.0,
            thousands(walked.pets),
            started.elapsed().as_secs_f64()
        ));
        if walked.pets != expected {
            self.report.fail(format!(
                "search: q={} listed {} pets, the fill made {expected} that match",
                COUNTED.0, walked.pets
            ));
        }
    }

    /// Follows next links from `first` past `(DEEP_PAGE - 1) * PAGE` pets, in pages of `WALK`
    /// while that many remain to pass and then of `PAGE` (so the 1,000th page of 20 is 199
    /// pages of 100, 4 of 20, then the next link), every page checked; returns the link to the
    /// deep page, after checking that page too. `None` (and a failure in the report) when the
    /// walk broke.
    async fn walk_to_page(
        &mut self,
        server: &Server,
        first: &str,
        deep_name: &str,
    ) -> Option<String> {
        let started = std::time::Instant::now();
        let skip = (DEEP_PAGE - 1) * PAGE;
        let mut walked = Walked {
            pets: 0,
            last: None,
            conn: None,
        };
        let (mut path, mut pages) = (first.to_owned(), 0u64);
        let outcome = loop {
            let remaining = skip - walked.pets;
            let limit = if remaining >= WALK { WALK } else { PAGE };
            path = match with_limit(&path, limit) {
                Ok(path) => path,
                Err(why) => break Err(why),
            };
            if remaining == 0 {
                // The deep page itself, checked as the walk's pages are.
                break match self.step(server, &mut walked, &path, false).await {
                    Ok(_) => Ok(path),
                    Err(why) => Err(why),
                };
            }
            match self.step(server, &mut walked, &path, false).await {
                Ok(Some(next)) => path = next,
                Ok(None) => break Err(format!("no next link after {} pets", walked.pets)),
                Err(why) => break Err(why),
            }
            pages += 1;
        };
        match outcome {
            Ok(deep) => {
                self.report.note(format!(
                    "{deep_name}: {deep} (from {first}: {pages} pages, {} pets, by next links in {:.1} s)",
                    thousands(skip),
                    started.elapsed().as_secs_f64()
                ));
                Some(deep)
            }
            Err(why) => {
                self.report
                    .fail(format!("{deep_name}: walk from {first}: {why}"));
                None
            }
        }
    }

    /// One page of a walk at `path`: checked (`check::found`; the last page of a walk to the
    /// end may be short) and starting after the page before it in the sort's order. Its next
    /// link, if any.
    async fn step(
        &self,
        server: &Server,
        walked: &mut Walked,
        path: &str,
        to_end: bool,
    ) -> Result<Option<String>, String> {
        let page = self.fetch(server, &mut walked.conn, path).await?;
        let short = to_end && page.next.is_none();
        check::found_page(path, &page.pets, short).map_err(|why| format!("{path}: {why}"))?;
        let by_name = check::query_param(path, "sort").as_deref() == Some("name");
        let key = |pet: &serde_json::Value| {
            let name = pet["name"].as_str().unwrap_or_default();
            let id = pet["id"].as_i64().unwrap_or_default();
            (
                if by_name {
                    names::sort_key(name)
                } else {
                    String::new()
                },
                id,
            )
        };
        let pets = page.pets.as_array().map(Vec::as_slice).unwrap_or_default();
        if let (Some(last), Some(first)) = (&walked.last, pets.first().map(&key))
            && first <= *last
        {
            return Err(format!(
                "{path} starts at {first:?}, not after the page before it ({last:?})"
            ));
        }
        walked.pets += pets.len() as u64;
        walked.last = pets.last().map(&key).or(walked.last.take());
        Ok(page.next)
    }
}

/// `path` with its `limit` parameter set to `limit`; an error when it has none.
fn with_limit(path: &str, limit: u64) -> Result<String, String> {
    let (route, query) = path
        .split_once('?')
        .ok_or_else(|| format!("{path} has no query"))?;
    let mut found = false;
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| {
            if pair.starts_with("limit=") {
                found = true;
                format!("limit={limit}")
            } else {
                pair.to_owned()
            }
        })
        .collect();
    if !found {
        return Err(format!("{path} has no limit"));
    }
    Ok(format!("{route}?{}", pairs.join("&")))
}
