//! API keys: the keys file, `KeySet` (SHA-256 of a key to its label), `Keys` (the set in
//! force, swapped whole by a reload), bearer parsing and key generation. Keys exist in clear
//! only in the client's request and in `new-key`'s output; everything kept is a hash, and
//! nothing here ever formats a key. Invariant: a presented key is hashed and looked up, so no
//! comparison touches the secret; a failed reload keeps the old set.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use anyhow::Context;
use sha2::{Digest, Sha256};

/// Why a request's credential was refused; the 401 tells the client which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization` header, or one with another scheme (RFC 6750 3.1: no error code).
    Missing,
    /// A bearer credential that is malformed or matches no key (`error="invalid_token"`).
    Invalid,
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
        let set = self.set();
        let (label, key_hash) = set.check(values)?;
        Ok(Caller {
            label: Arc::clone(label),
            key_hash,
        })
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
}

/// The keys the server accepts, each known only by its SHA-256 and a label for the logs.
#[derive(Debug, Default)]
pub struct KeySet {
    labels: HashMap<[u8; 32], Arc<str>>,
}

impl KeySet {
    fn load(path: &Path) -> anyhow::Result<KeySet> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading API keys file {}", path.display()))?;
        KeySet::parse(&text).with_context(|| format!("API keys file {}", path.display()))
    }

    /// Parses the keys file format: `LABEL SHA256HEX` a line, `#` to the end of a line is a
    /// comment, blank lines are skipped.
    fn parse(text: &str) -> anyhow::Result<KeySet> {
        let mut labels = HashMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = raw.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(label), Some(hash), None) = (fields.next(), fields.next(), fields.next())
            else {
                anyhow::bail!("line {line_number}: expected `LABEL SHA256HEX`");
            };
            if !is_label(label) {
                anyhow::bail!(
                    "line {line_number}: a label is 1 to 64 of the characters A-Z a-z 0-9 . _ -"
                );
            }
            let hash = decode_hash(hash).with_context(|| {
                format!(
                    "line {line_number}: expected 64 lowercase hex digits (the SHA-256 of the key)"
                )
            })?;
            if labels.insert(hash, Arc::from(label)).is_some() {
                anyhow::bail!("line {line_number}: this key hash is listed twice");
            }
        }
        if labels.is_empty() {
            anyhow::bail!("no keys: add a line made by `petstore new-key LABEL`");
        }
        Ok(KeySet { labels })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Checks an `Authorization` header (all of its values) and returns the key's label and
    /// hash.
    pub fn check<'a>(
        &self,
        mut values: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(&Arc<str>, [u8; 32]), AuthFailure> {
        let header = values.next().ok_or(AuthFailure::Missing)?;
        // Two Authorization headers make the credential ambiguous; refuse rather than pick one.
        if values.next().is_some() {
            return Err(AuthFailure::Invalid);
        }
        let hash = hash_key(bearer_token(header)?);
        let label = self.labels.get(&hash).ok_or(AuthFailure::Invalid)?;
        Ok((label, hash))
    }
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

fn decode_hash(hex: &str) -> anyhow::Result<[u8; 32]> {
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

fn encode_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, b| {
            let _ = write!(text, "{b:02x}");
            text
        })
}

/// A fresh key with 256 bits from the OS RNG, as URL-safe text, and its keys-file line.
pub fn new_key(label: &str) -> anyhow::Result<(String, String)> {
    anyhow::ensure!(
        is_label(label),
        "a label is 1 to 64 of the characters A-Z a-z 0-9 . _ -"
    );
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)
        .map_err(|e| anyhow::anyhow!("the OS random number generator failed: {e}"))?;
    let key = format!("pk_{}", encode_hex(&secret));
    let line = format!("{label} {}", encode_hex(&hash_key(key.as_bytes())));
    Ok((key, line))
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
        set.check(headers.iter().map(|h| h.as_bytes()))
            .map(|(label, _)| label.to_string())
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
            ("dev\n", "line 1: expected `LABEL SHA256HEX`"),
            (
                &format!("# c\ndev {DEV_HASH} extra\n") as &str,
                "line 2: expected `LABEL SHA256HEX`",
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
                prop_assert_eq!(set.labels.get(hash).map(|l| &**l), Some(label.as_str()));
            }
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
