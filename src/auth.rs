//! API keys: the keys file's lines (`Entry`: label, hash, scope, expiry), `KeySet` (SHA-256 of
//! a key to its entry), `Keys` (the set in force, swapped whole by a reload), bearer parsing
//! and key generation. Keys exist in clear only in the client's request and in the output of
//! `new-key` and `keys add`; everything kept is a hash, and nothing here ever formats a key.
//! Invariant: a presented key is hashed and looked up, so no comparison touches the secret; a
//! failed reload keeps the old set.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::clock::{self, Precision, unix_now};

/// Why a request's credential was refused; the 401 tells the client which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization` header, or one with another scheme (RFC 6750 3.1: no error code).
    Missing,
    /// A bearer credential that is malformed or matches no key (`error="invalid_token"`).
    Invalid,
    /// A listed key whose `expires=` time has passed; the label is for the log line.
    Expired { label: Arc<str> },
    /// A console session cookie that admits nobody now: signed out, idle too long, unknown,
    /// or its key revoked or expired.
    SessionEnded,
}

/// The key set in force and the file it came from.
#[derive(Debug)]
pub struct Keys {
    path: PathBuf,
    current: RwLock<Arc<KeySet>>,
}

impl Keys {
    /// Reads the keys file; a bad line stops it, naming the file and the line.
    pub fn load(path: &Path) -> anyhow::Result<Keys> {
        Ok(Keys {
            path: path.to_owned(),
            current: RwLock::new(Arc::new(KeySet::load(path)?)),
        })
    }

    /// Reads the file again and puts the new set in force for the next request; returns how
    /// many keys it holds.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let fresh = KeySet::load(&self.path)?;
        let count = fresh.len();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(count)
    }

    pub fn len(&self) -> usize {
        self.set().len()
    }

    /// Checks an `Authorization` header (all of its values) and returns who sent it.
    pub fn check<'a>(&self, values: impl Iterator<Item = &'a [u8]>) -> Result<Caller, AuthFailure> {
        // Under the read lock rather than on a clone of the set: a reload waits for one hash,
        // and a request saves an `Arc` count up and down.
        let set = self.current.read().unwrap_or_else(PoisonError::into_inner);
        set.check(values, unix_now)
    }

    /// Who holds the key `key` (a console's sign-in), checked as a bearer key is.
    pub fn check_key(&self, key: &[u8]) -> Result<Caller, AuthFailure> {
        self.by_hash(&hash_key(key))
    }

    /// Who holds the key whose SHA-256 is `hash`, if it is in force now: what a console
    /// session admits at each use, so a key revoked (and reloaded) or expired ends its
    /// sessions at once.
    pub fn by_hash(&self, hash: &[u8; 32]) -> Result<Caller, AuthFailure> {
        let set = self.current.read().unwrap_or_else(PoisonError::into_inner);
        set.entry(*hash, unix_now)
    }

    fn set(&self) -> Arc<KeySet> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The client of a request, as its key identifies it.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The key's label, for the logs.
    pub label: Arc<str>,
    /// The SHA-256 of the key: what sets one key's requests apart from another's (labels may
    /// repeat). Never logged.
    pub key_hash: [u8; 32],
    /// The key may read but not create, change or delete (403 `forbidden`).
    pub read_only: bool,
}

/// One key line of the keys file: `LABEL SHA256HEX [read-only] [expires=TIME]`. The words
/// after the hash are optional and in any order, so a line of the first format (label and
/// hash only) is a read-write key that never expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub label: Arc<str>,
    pub hash: [u8; 32],
    pub read_only: bool,
    /// Seconds since the Unix epoch (UTC) from which the key is refused.
    pub expires: Option<u64>,
}

impl Entry {
    /// The line as `keys add` writes it, the time in its full RFC 3339 form.
    pub fn line(&self) -> String {
        let mut line = format!("{} {}", self.label, encode_hex(&self.hash));
        if self.read_only {
            line.push_str(" read-only");
        }
        if let Some(expires) = self.expires {
            let _ = write!(line, " expires={}", format_time(expires));
        }
        line
    }

    /// Whether the key is refused at `now` (seconds since the epoch).
    pub fn expired_at(&self, now: u64) -> bool {
        self.expires.is_some_and(|expires| now >= expires)
    }
}

/// Parses one line of the keys file: `Ok(None)` for a blank or comment-only line. `#` to the
/// end of a line is a comment.
pub fn parse_line(raw: &str) -> anyhow::Result<Option<Entry>> {
    let line = raw.split('#').next().unwrap_or_default().trim();
    if line.is_empty() {
        return Ok(None);
    }
    let mut fields = line.split_whitespace();
    let (Some(label), Some(hash)) = (fields.next(), fields.next()) else {
        anyhow::bail!("expected `LABEL SHA256HEX [read-only] [expires=TIME]`");
    };
    anyhow::ensure!(
        is_label(label),
        "a label is 1 to 64 of the characters A-Z a-z 0-9 . _ -"
    );
    let hash =
        decode_hash(hash).context("expected 64 lowercase hex digits (the SHA-256 of the key)")?;
    let mut entry = Entry {
        label: Arc::from(label),
        hash,
        read_only: false,
        expires: None,
    };
    for option in fields {
        if option == "read-only" && !entry.read_only {
            entry.read_only = true;
        } else if let Some(time) = option.strip_prefix("expires=")
            && entry.expires.is_none()
        {
            entry.expires = Some(parse_time(time).with_context(|| format!("expires={time}"))?);
        } else {
            anyhow::bail!(
                "{option:?}: after the hash a line may only have `read-only` and \
                 `expires=TIME`, each at most once"
            );
        }
    }
    Ok(Some(entry))
}

/// The keys the server accepts, each known only by its SHA-256, with a label for the logs.
#[derive(Debug, Default)]
pub struct KeySet {
    entries: HashMap<[u8; 32], Entry, BuildHasherDefault<DigestHasher>>,
}

/// Hashes a SHA-256 digest by its first bytes. The digest is already uniform, and a client
/// cannot place entries (they come from the keys file), so SipHash's defence against chosen
/// collisions buys nothing here; it cost about 250 instructions on every authenticated request.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        // `[u8; 32]` hashes as its length, then its bytes: fold in the first 8 of each write.
        let mut word = [0; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(17) ^ u64::from_ne_bytes(word);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl KeySet {
    fn load(path: &Path) -> anyhow::Result<KeySet> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading API keys file {}", path.display()))?;
        KeySet::parse(&text).with_context(|| format!("API keys file {}", path.display()))
    }

    /// Parses the keys file (see `parse_line`); blank lines are skipped.
    fn parse(text: &str) -> anyhow::Result<KeySet> {
        let mut entries = HashMap::default();
        for (index, raw) in text.lines().enumerate() {
            let line_number = index + 1;
            let Some(entry) = parse_line(raw).with_context(|| format!("line {line_number}"))?
            else {
                continue;
            };
            if entries.insert(entry.hash, entry).is_some() {
                anyhow::bail!("line {line_number}: this key hash is listed twice");
            }
        }
        if entries.is_empty() {
            anyhow::bail!("no keys: add one with `petstore keys add LABEL`");
        }
        Ok(KeySet { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Checks an `Authorization` header (all of its values) at `now` (seconds since the
    /// epoch) and returns who sent it.
    pub fn check<'a>(
        &self,
        mut values: impl Iterator<Item = &'a [u8]>,
        now: impl FnOnce() -> u64,
    ) -> Result<Caller, AuthFailure> {
        let header = values.next().ok_or(AuthFailure::Missing)?;
        // Two Authorization headers make the credential ambiguous; refuse rather than pick one.
        if values.next().is_some() {
            return Err(AuthFailure::Invalid);
        }
        self.entry(hash_key(bearer_token(header)?), now)
    }

    /// The caller whose key hashes to `hash`, if it is listed and not expired at `now`.
    fn entry(&self, hash: [u8; 32], now: impl FnOnce() -> u64) -> Result<Caller, AuthFailure> {
        let entry = self.entries.get(&hash).ok_or(AuthFailure::Invalid)?;
        // The clock is read only for a key that can expire: most never do.
        if entry.expires.is_some() && entry.expired_at(now()) {
            return Err(AuthFailure::Expired {
                label: Arc::clone(&entry.label),
            });
        }
        Ok(Caller {
            label: Arc::clone(&entry.label),
            key_hash: hash,
            read_only: entry.read_only,
        })
    }
}

/// Parses an expiry time: an RFC 3339 date (`2027-01-01`: the key expires at the start of that
/// day, 00:00:00 UTC) or date-time (`2027-01-01T12:00:00Z`, any offset, fractions of a
/// second dropped); years 1970 to 9999. Returns seconds since the Unix epoch.
pub fn parse_time(text: &str) -> anyhow::Result<u64> {
    const FORMS: &str = "expected an RFC 3339 date (2027-01-31) or date-time \
                         (2027-01-31T12:00:00Z, 2027-01-31T14:00:00+02:00)";
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> anyhow::Result<i64> {
        let part = bytes.get(range).context(FORMS)?;
        anyhow::ensure!(part.iter().all(u8::is_ascii_digit), FORMS);
        Ok(part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let at = |index: usize, expected: &[u8]| bytes.get(index).is_some_and(|b| expected.contains(b));
    anyhow::ensure!(at(4, b"-") && at(7, b"-"), FORMS);
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    anyhow::ensure!(
        (1970..=9999).contains(&year),
        "the year must be 1970 to 9999"
    );
    anyhow::ensure!(
        (1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day),
        "{} is not a day of the calendar",
        &text[..10]
    );
    let mut seconds = days_from_civil(year, month, day) * 86_400;
    if bytes.len() > 10 {
        anyhow::ensure!(at(10, b"Tt") && at(13, b":") && at(16, b":"), FORMS);
        let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
        // 60 is a leap second: counted as the next second, as POSIX time does.
        anyhow::ensure!(
            hour < 24 && minute < 60 && second <= 60,
            "{} is not a time of day",
            &text[11..19]
        );
        let mut rest = 19;
        if at(rest, b".") {
            rest += 1;
            let start = rest;
            while at(rest, b"0123456789") {
                rest += 1;
            }
            anyhow::ensure!(rest > start, FORMS);
        }
        let offset = match bytes.get(rest) {
            Some(b'Z' | b'z') if bytes.len() == rest + 1 => 0,
            Some(sign @ (b'+' | b'-')) if bytes.len() == rest + 6 && at(rest + 3, b":") => {
                let (hours, minutes) = (digits(rest + 1..rest + 3)?, digits(rest + 4..rest + 6)?);
                anyhow::ensure!(
                    hours < 24 && minutes < 60,
                    "the offset is not a time of day"
                );
                let offset = hours * 3600 + minutes * 60;
                if *sign == b'+' { offset } else { -offset }
            }
            _ => anyhow::bail!("{FORMS}; a date-time needs its offset, e.g. Z for UTC"),
        };
        seconds += hour * 3600 + minute * 60 + second - offset;
    }
    u64::try_from(seconds).context("the time is before 1970")
}

/// A time as RFC 3339 in UTC, to the second: `2027-01-01T00:00:00Z`.
pub fn format_time(seconds: u64) -> String {
    clock::rfc3339(
        UNIX_EPOCH + Duration::from_secs(seconds),
        Precision::Seconds,
    )
    .to_string()
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The token of a `Bearer` credential. The scheme is case-insensitive (RFC 9110 11.1); a
/// credential of another scheme counts as none.
fn bearer_token(header: &[u8]) -> Result<&[u8], AuthFailure> {
    let header = header.trim_ascii();
    let split = header
        .iter()
        .position(|&b| b == b' ')
        .unwrap_or(header.len());
    let (scheme, rest) = header.split_at(split);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(AuthFailure::Missing);
    }
    let token = rest.trim_ascii_start();
    if token.is_empty() || !token.iter().all(|&b| is_token68(b)) {
        return Err(AuthFailure::Invalid);
    }
    Ok(token)
}

/// RFC 9110 11.2: token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
fn is_token68(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
}

fn is_label(label: &str) -> bool {
    (1..=64).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn hash_key(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

pub fn decode_hash(hex: &str) -> anyhow::Result<[u8; 32]> {
    let digits = hex.as_bytes();
    anyhow::ensure!(digits.len() == 64, "found {} characters", digits.len());
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(digits.chunks_exact(2)) {
        let nibble = |d: u8| match d {
            b'0'..=b'9' => Ok(d - b'0'),
            b'a'..=b'f' => Ok(d - b'a' + 10),
            _ => Err(anyhow::anyhow!(
                "{:?} is not a lowercase hex digit",
                char::from(d)
            )),
        };
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(hash)
}

pub fn encode_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, b| {
            let _ = write!(text, "{b:02x}");
            text
        })
}

/// A fresh key with 256 bits from the OS RNG, as URL-safe text, and its keys-file line.
pub fn new_key(label: &str) -> anyhow::Result<(String, String)> {
    let (key, entry) = new_entry(label, false, None)?;
    Ok((key, entry.line()))
}

/// A fresh key with 256 bits from the OS RNG, as URL-safe text, and the entry that admits it.
pub fn new_entry(
    label: &str,
    read_only: bool,
    expires: Option<u64>,
) -> anyhow::Result<(String, Entry)> {
    anyhow::ensure!(
        is_label(label),
        "a label is 1 to 64 of the characters A-Z a-z 0-9 . _ -"
    );
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)
        .map_err(|e| anyhow::anyhow!("the OS random number generator failed: {e}"))?;
    let key = format!("pk_{}", encode_hex(&secret));
    let entry = Entry {
        label: Arc::from(label),
        hash: hash_key(key.as_bytes()),
        read_only,
        expires,
    };
    Ok((key, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV_KEY: &str = "petstore-dev-key-not-for-production";
    const DEV_HASH: &str = "210275069083244ad9da99dbb01cc91a0b5ec4bcd57e7225d4067fa7e7730867";

    fn dev_set() -> KeySet {
        KeySet::parse(&format!(
            "# keys\n\ndev {DEV_HASH}  # the development key\n"
        ))
        .expect("valid file")
    }

    fn check(set: &KeySet, headers: &[&str]) -> Result<String, AuthFailure> {
        set.check(headers.iter().map(|h| h.as_bytes()), unix_now)
            .map(|caller| caller.label.to_string())
    }

    #[test]
    fn a_bearer_key_is_found_whatever_the_scheme_case() {
        let set = dev_set();
        assert_eq!(set.len(), 1);
        for scheme in ["Bearer", "bearer", "BEARER"] {
            assert_eq!(
                check(&set, &[&format!("{scheme} {DEV_KEY}")]),
                Ok("dev".into())
            );
        }
        assert_eq!(
            check(&set, &[&format!("Bearer   {DEV_KEY}  ")]),
            Ok("dev".into())
        );
    }

    #[test]
    fn missing_other_scheme_wrong_and_malformed_credentials_are_told_apart() {
        let set = dev_set();
        assert_eq!(check(&set, &[]), Err(AuthFailure::Missing));
        assert_eq!(
            check(&set, &["Basic dXNlcjpwYXNz"]),
            Err(AuthFailure::Missing)
        );
        assert_eq!(check(&set, &["Bearer"]), Err(AuthFailure::Invalid));
        assert_eq!(
            check(&set, &["Bearer wrong-key"]),
            Err(AuthFailure::Invalid)
        );
        assert_eq!(check(&set, &["Bearer a b"]), Err(AuthFailure::Invalid));
        let twice = format!("Bearer {DEV_KEY}");
        assert_eq!(check(&set, &[&twice, &twice]), Err(AuthFailure::Invalid));
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let cases = [
            ("dev\n", "line 1: expected `LABEL SHA256HEX"),
            (
                &format!("# c\ndev {DEV_HASH} extra\n") as &str,
                "line 2: \"extra\": after the hash",
            ),
            (
                &format!("dev {DEV_HASH} read-only read-only\n"),
                "line 1: \"read-only\": after the hash",
            ),
            (
                &format!("dev {DEV_HASH} expires=2027-02-30\n"),
                "line 1: expires=2027-02-30: 2027-02-30 is not a day",
            ),
            ("dev abc\n", "line 1: expected 64 lowercase hex digits"),
            (
                &format!("dev {}\n", DEV_HASH.to_uppercase()),
                "line 1: expected 64 lowercase hex digits",
            ),
            (&format!("dev\u{e9} {DEV_HASH}\n"), "line 1: a label is"),
            (
                &format!("a {DEV_HASH}\nb {DEV_HASH}\n"),
                "line 2: this key hash is listed twice",
            ),
            ("# only comments\n", "no keys"),
        ];
        for (text, expected) in cases {
            let message = format!("{:#}", KeySet::parse(text).expect_err(text));
            assert!(message.starts_with(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn a_new_key_matches_its_line_and_is_url_safe() {
        let (key, line) = new_key("alice").expect("new key");
        assert!(key.len() >= 3 + 64 && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        let set = KeySet::parse(&line).expect("the printed line parses");
        assert_eq!(check(&set, &[&format!("Bearer {key}")]), Ok("alice".into()));
        assert_ne!(new_key("alice").expect("new key").0, key);
        assert!(new_key("no spaces").is_err());
    }

    #[test]
    fn a_reload_swaps_the_whole_set_and_a_broken_file_keeps_the_old() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("keys");
        std::fs::write(&path, format!("dev {DEV_HASH}\n")).expect("write");
        let keys = Keys::load(&path).expect("load");
        let (alice, line) = new_key("alice").expect("new key");
        let with = |key: &str| {
            keys.check([format!("Bearer {key}")].iter().map(|h| h.as_bytes()))
                .map(|caller| caller.label.to_string())
        };

        std::fs::write(&path, format!("{line}\n")).expect("write");
        assert_eq!(keys.reload().expect("reload"), 1);
        assert_eq!(with(&alice), Ok("alice".into()));
        assert_eq!(with(DEV_KEY), Err(AuthFailure::Invalid), "revoked");

        std::fs::write(&path, "garbage\n").expect("write");
        assert!(keys.reload().is_err());
        assert_eq!(
            with(&alice),
            Ok("alice".into()),
            "the old set stays in force"
        );
    }

    #[test]
    fn scope_and_expiry_follow_the_hash_in_any_order_and_old_lines_are_read_write() {
        let (key, line) = new_key("old").expect("new key");
        let hash = line.split(' ').nth(1).expect("hash");
        let set = KeySet::parse(&format!("{line}\n")).expect("parses");
        let caller = set
            .check([format!("Bearer {key}")].iter().map(|h| h.as_bytes()), || 0)
            .expect("accepted");
        assert!(!caller.read_only);

        let entry = |text: &str| parse_line(text).expect(text).expect("an entry");
        let both = entry(&format!("ro {hash} expires=2027-01-01 read-only # why"));
        assert_eq!((both.read_only, both.expires), (true, Some(1_798_761_600)));
        assert_eq!(
            entry(&format!("ro {hash} read-only expires=2027-01-01T00:00:00Z")),
            both
        );
        assert_eq!(
            both.line(),
            format!("ro {hash} read-only expires=2027-01-01T00:00:00Z")
        );
        assert_eq!(entry(&both.line()), both, "a written line reads back");
    }

    #[test]
    fn an_expired_key_is_told_apart_from_an_unknown_one_at_its_second() {
        let (key, entry) = new_entry("temp", true, Some(1_000)).expect("new key");
        let set = KeySet::parse(&entry.line()).expect("parses");
        let at = |now| {
            set.check(
                [format!("Bearer {key}")].iter().map(|h| h.as_bytes()),
                || now,
            )
            .map(|caller| caller.read_only)
        };
        assert_eq!(at(999), Ok(true));
        let expired = Err(AuthFailure::Expired {
            label: Arc::from("temp"),
        });
        assert_eq!(at(1_000), expired);
        assert_eq!(at(5_000), expired);
    }

    #[test]
    fn expiry_times_are_rfc_3339_dates_or_date_times_in_utc() {
        let cases = [
            ("1970-01-01", 0),
            ("2027-01-01", 1_798_761_600),
            ("2024-02-29", 1_709_164_800),
            ("2027-01-01T00:00:00Z", 1_798_761_600),
            ("2027-01-01t00:00:01z", 1_798_761_601),
            ("2027-01-01T12:30:00.999Z", 1_798_761_600 + 45_000),
            ("2027-01-01T02:00:00+02:00", 1_798_761_600),
            ("2026-12-31T23:00:00-01:00", 1_798_761_600),
            ("9999-12-31T23:59:59Z", 253_402_300_799),
        ];
        for (text, seconds) in cases {
            assert_eq!(parse_time(text).expect(text), seconds, "{text}");
        }
        assert_eq!(format_time(1_798_761_600), "2027-01-01T00:00:00Z");
        for bad in [
            "",
            "2027",
            "2027-1-1",
            "2027-13-01",
            "2023-02-29",
            "1969-12-31",
            "2027-01-01T00:00:00",
            "2027-01-01 00:00:00Z",
            "2027-01-01T24:00:00Z",
            "2027-01-01T00:00Z",
            "2027-01-01T00:00:00.Z",
            "2027-01-01T00:00:00+0200",
            "2027-01-01T00:00:00Zjunk",
            "1970-01-01T00:00:00+01:00",
            "２０２７-01-01",
            "2027-01-01T00:00:0é",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    // Property tests: any keys file is a key set or a start-up error, never a panic; any
    // Authorization value is a token or an `AuthFailure` (a 401), never a panic.
    use proptest::prelude::*;

    /// One keys-file line for `label` and `hash`, with the spacing and comments a person adds.
    fn line(label: &str, hash: &[u8; 32], indent: &str, gap: &str, comment: &str) -> String {
        format!(
            "{indent}{label}{gap}{}{indent}{comment}\n",
            encode_hex(hash)
        )
    }

    proptest! {
        #[test]
        fn any_keys_file_is_a_key_set_or_an_error_without_panicking(
            text in prop_oneof![any::<String>(), "[a-f0-9A-Z ._#\t\n-]{0,200}"],
        ) {
            if let Ok(set) = KeySet::parse(&text) {
                prop_assert!(set.len() >= 1);
            }
        }

        #[test]
        fn a_file_of_valid_lines_holds_one_key_per_line(
            keys in prop::collection::hash_map(
                any::<[u8; 32]>(),
                ("[A-Za-z0-9._-]{1,64}", "[ \t]{0,2}", "[ \t]{1,3}", "(# [ -~]{0,20})?", "(\n|\n# a comment\n)?"),
                1..8,
            ),
        ) {
            let mut text = String::new();
            for (hash, (label, indent, gap, comment, after)) in &keys {
                text.push_str(&line(label, hash, indent, gap, comment));
                text.push_str(after);
            }
            let set = KeySet::parse(&text).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
            prop_assert_eq!(set.len(), keys.len());
            for (hash, (label, ..)) in &keys {
                let entry = set.entries.get(hash).map(|e| (&*e.label, e.read_only, e.expires));
                prop_assert_eq!(entry, Some((label.as_str(), false, None)));
            }
        }

        #[test]
        fn any_time_text_is_a_time_or_an_error_without_panicking(text in "\\PC{0,40}|[0-9T:Zz.+-]{0,30}") {
            if let Ok(seconds) = parse_time(&text) {
                prop_assert!(seconds <= 253_402_300_800);
            }
        }

        #[test]
        fn a_time_written_reads_back(seconds in 0u64..253_402_300_800) {
            prop_assert_eq!(parse_time(&format_time(seconds)).ok(), Some(seconds));
        }

        #[test]
        fn any_authorization_value_is_a_token_or_a_failure_without_panicking(
            header in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..128),
                "(?i)(bearer|basic)?[ \t]{0,2}[ -~]{0,40}".prop_map(String::into_bytes),
            ],
        ) {
            if let Ok(token) = bearer_token(&header) {
                prop_assert!(!token.is_empty() && token.iter().all(|&b| is_token68(b)));
            }
        }

        #[test]
        fn a_bearer_credential_in_any_case_gives_back_its_token68(
            scheme in "[Bb][Ee][Aa][Rr][Ee][Rr]",
            token in "[A-Za-z0-9._~+/-]{1,64}={0,3}",
            before in "[ \t]{0,2}",
            gap in " {1,3}",
            after in "[ \t]{0,2}",
        ) {
            let header = format!("{before}{scheme}{gap}{token}{after}");
            prop_assert_eq!(bearer_token(header.as_bytes()), Ok(token.as_bytes()));
        }
    }
}
