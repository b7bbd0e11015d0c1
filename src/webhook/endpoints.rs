//! The webhook endpoints file (`--webhooks FILE`): one endpoint a line, `ID url=… secret=…
//! [secret=…] [types=…] [label=…] [start=oldest] [resume=N]`, with `#` comments and blank
//! lines, as `Endpoint::line` writes it. This module reads and checks it (`load`, `parse_lines`)
//! and makes what goes in it (ids, secrets); `command` edits it. Invariant: an `Endpoint` is
//! whole and valid (an https URL with a host and no user, at least one secret, known types);
//! one bad line fails the whole file, so a server keeps its previous endpoints rather than a
//! part of the new ones. No DNS here: where a URL's host points is checked at delivery.

use std::fmt;
use std::path::Path;

use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::Uri;

use crate::event::{EventType, Types};

/// One receiver of events, as a line of the endpoints file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `ep_` and 8 lowercase hex digits, unique in the file.
    pub id: String,
    /// An absolute `https://` URL with a host, no user and no fragment.
    pub url: Uri,
    /// Every secret deliveries are signed with, oldest first; never empty. More than one
    /// during a rotation, so that the receiver may verify with the old one or the new.
    pub secrets: Vec<Secret>,
    /// The event types delivered; `Types::ALL` when the line names none.
    pub types: Types,
    /// A name for the metrics and logs (the same characters as an API key's label).
    pub label: Option<String>,
    /// A new endpoint starts at the oldest event the store keeps, not at the newest.
    pub from_start: bool,
    /// Bumped by `petstore webhooks enable`; a server resumes a disabled endpoint when it sees
    /// a larger value than the one it last applied. 0 when the line has none.
    pub resume: u64,
}

/// A signing key: the bytes HMAC-SHA256 takes, written `whsec_` + standard base64 (the
/// Standard Webhooks form). Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
}

/// Bytes in a new secret: 256 bits, the size of HMAC-SHA256's output.
const SECRET_BYTES: usize = 32;

/// The prefix Standard Webhooks gives a secret's text.
const SECRET_PREFIX: &str = "whsec_";

impl Secret {
    /// A new secret of 32 bytes from the OS random number generator.
    pub fn generate() -> anyhow::Result<Secret> {
        let mut key = vec![0; SECRET_BYTES];
        getrandom::fill(&mut key)
            .map_err(|e| anyhow::anyhow!("the OS random number generator failed: {e}"))?;
        Ok(Secret { key })
    }

    /// Reads `whsec_` + standard base64 with padding. Errors never quote the text: it is the
    /// key.
    pub fn parse(text: &str) -> anyhow::Result<Secret> {
        let encoded = text.strip_prefix(SECRET_PREFIX).with_context(|| {
            format!("a secret is {SECRET_PREFIX} followed by base64 (as `petstore webhooks add` makes it)")
        })?;
        let key = STANDARD.decode(encoded).map_err(|e| {
            anyhow::anyhow!(
                "a secret is {SECRET_PREFIX} followed by standard base64, with its padding: {e}"
            )
        })?;
        anyhow::ensure!(!key.is_empty(), "the secret after {SECRET_PREFIX} is empty");
        Ok(Secret { key })
    }

    /// The key's bytes, for the HMAC.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// `whsec_` + base64: the form the file and the receiver take.
    pub fn encoded(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.key))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({SECRET_PREFIX}…)")
    }
}

impl Endpoint {
    /// The line as `petstore webhooks` writes it: the id, `url=`, each `secret=` oldest first,
    /// then `types=`, `label=`, `start=oldest` and `resume=` when they say something.
    pub fn line(&self) -> String {
        let mut line = format!("{} url={}", self.id, self.url);
        for secret in &self.secrets {
            line.push_str(" secret=");
            line.push_str(&secret.encoded());
        }
        if !self.types.is_all() {
            line.push_str(" types=");
            line.push_str(&type_names(self.types).join(","));
        }
        if let Some(label) = &self.label {
            line.push_str(" label=");
            line.push_str(label);
        }
        if self.from_start {
            line.push_str(" start=oldest");
        }
        if self.resume > 0 {
            line.push_str(&format!(" resume={}", self.resume));
        }
        line
    }
}

/// The endpoints in `path`; `Ok(None)` when the file does not exist (the server then has no
/// endpoints and logs it). A line that does not parse fails the whole file, naming the file
/// and the line.
pub fn load(path: &Path) -> anyhow::Result<Option<Vec<Endpoint>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("reading webhooks file {}", path.display()));
        }
    };
    let lines = parse_lines(&text, |n| {
        format!("webhooks file {}, line {n}", path.display())
    })?;
    Ok(Some(lines.into_iter().filter_map(|(_, e)| e).collect()))
}

/// Each line of the file's `text` with its line break, and its endpoint if it holds one. An
/// error carries `context(line number)`. Ids must be unique.
pub fn parse_lines(
    text: &str,
    context: impl Fn(usize) -> String,
) -> anyhow::Result<Vec<(&str, Option<Endpoint>)>> {
    let mut lines: Vec<(&str, Option<Endpoint>)> = Vec::new();
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let endpoint = parse_line(raw).with_context(|| context(index + 1))?;
        if let Some(endpoint) = &endpoint
            && let Some(first) = lines
                .iter()
                .position(|(_, e)| e.as_ref().is_some_and(|e| e.id == endpoint.id))
        {
            return Err(anyhow::anyhow!(
                "{} is already the id of line {}; ids are unique",
                endpoint.id,
                first + 1
            ))
            .with_context(|| context(index + 1));
        }
        lines.push((raw, endpoint));
    }
    Ok(lines)
}

/// Parses one line: `Ok(None)` for a blank or comment-only line. `#` to the end of a line is
/// a comment. The words after the id may come in any order; `secret=` keeps its order.
pub fn parse_line(raw: &str) -> anyhow::Result<Option<Endpoint>> {
    let line = raw.split('#').next().unwrap_or_default().trim();
    let mut words = line.split_whitespace();
    let Some(id) = words.next() else {
        return Ok(None);
    };
    anyhow::ensure!(
        is_id(id),
        "expected `ep_XXXXXXXX url=https://… secret=whsec_…`: {id:?} is not an endpoint id \
         (ep_ and 8 lowercase hex digits)"
    );
    let mut url = None;
    let mut secrets = Vec::new();
    let (mut types, mut label, mut from_start, mut resume) = (None, None, None, None);
    for word in words {
        let Some((name, value)) = word.split_once('=') else {
            anyhow::bail!("{word:?} is not NAME=VALUE; {WORDS}");
        };
        let once = |given: bool| {
            anyhow::ensure!(!given, "{name}= is given twice");
            Ok(())
        };
        match name {
            "url" => {
                once(url.is_some())?;
                url = Some(parse_url(value).with_context(|| format!("url={value}"))?);
            }
            "secret" => secrets.push(
                Secret::parse(value)
                    .with_context(|| format!("secret number {}", secrets.len() + 1))?,
            ),
            "types" => {
                once(types.is_some())?;
                types = Some(parse_types(value).context("types=")?);
            }
            "label" => {
                once(label.is_some())?;
                check_label(value).with_context(|| format!("label={value}"))?;
                label = Some(value.to_owned());
            }
            "start" => {
                once(from_start.is_some())?;
                anyhow::ensure!(
                    value == "oldest",
                    "start={value}: the only start is `oldest` (without it, an endpoint \
                     starts at the newest event)"
                );
                from_start = Some(true);
            }
            "resume" => {
                once(resume.is_some())?;
                let n = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .with_context(|| {
                        format!(
                            "resume={value}: a whole number from 1 (`petstore webhooks enable` \
                             counts it up; no resume= is 0)"
                        )
                    })?;
                resume = Some(n);
            }
            _ => anyhow::bail!("{name}= is not a word of an endpoint line; {WORDS}"),
        }
    }
    let url = url.context("no url=: every endpoint has one")?;
    anyhow::ensure!(
        !secrets.is_empty(),
        "no secret=: every endpoint has at least one (`petstore webhooks add` makes it)"
    );
    Ok(Some(Endpoint {
        id: id.to_owned(),
        url,
        secrets,
        types: types.unwrap_or(Types::ALL),
        label,
        from_start: from_start.unwrap_or(false),
        resume: resume.unwrap_or(0),
    }))
}

/// What may follow an id, for the errors.
const WORDS: &str = "after the id a line has url=, one or more secret=, and optionally \
                     types=, label=, start=oldest and resume=N";

/// Checks a receiver's URL: absolute `https://` with a host, no user or password, no
/// fragment, no whitespace. Where the host resolves is for delivery to check.
pub fn parse_url(text: &str) -> anyhow::Result<Uri> {
    anyhow::ensure!(
        !text.contains(|c: char| c.is_whitespace() || c.is_control()),
        "a URL has no spaces or control characters (percent-encode them)"
    );
    // http::Uri drops a fragment without a word; receivers never see one anyway.
    anyhow::ensure!(
        !text.contains('#'),
        "a webhook URL has no fragment (#…): it is never sent to the receiver"
    );
    let url: Uri = text
        .parse()
        .context("not a URL (expected https://HOST/PATH)")?;
    match url.scheme_str() {
        Some("https") => {}
        Some("http") => anyhow::bail!(
            "http:// is refused: events go to receivers over https:// only, so that no one \
             on the way reads or replays them"
        ),
        Some(other) => anyhow::bail!("{other}:// is not https://; a webhook URL is https://"),
        None => anyhow::bail!("not an absolute URL: expected https://HOST/PATH"),
    }
    let authority = url
        .authority()
        .context("no host: expected https://HOST/PATH")?;
    anyhow::ensure!(
        !authority.as_str().contains('@'),
        "a user or password in the URL (user@host) is refused: receivers check each \
         delivery's signature instead, and the file would show the password"
    );
    anyhow::ensure!(
        !authority.host().is_empty(),
        "no host: expected https://HOST/PATH"
    );
    anyhow::ensure!(
        authority.port_u16() != Some(0),
        "port 0 is no port to send to"
    );
    Ok(url)
}

/// Reads a comma-separated list of event type names (`pet.created,order.placed`). An unknown
/// name is named, with the list of known ones.
pub fn parse_types(text: &str) -> anyhow::Result<Types> {
    let mut types = Vec::new();
    for name in text.split(',').map(str::trim) {
        anyhow::ensure!(
            !name.is_empty(),
            "an empty event type in {text:?}; the types are {}",
            all_names()
        );
        let kind = EventType::from_name(name).with_context(|| {
            format!("unknown event type {name:?}; the types are {}", all_names())
        })?;
        types.push(kind);
    }
    Ok(Types::only(types))
}

/// The names of the types in `types`, in the feed's order.
pub fn type_names(types: Types) -> Vec<&'static str> {
    EventType::ALL
        .into_iter()
        .filter(|t| types.contains(t.code()))
        .map(EventType::name)
        .collect()
}

fn all_names() -> String {
    type_names(Types::ALL).join(", ")
}

/// Checks a label: 1 to 64 of A-Z a-z 0-9 . _ -, as a metrics label value takes without
/// escaping.
pub fn check_label(label: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=64).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')),
        "a label is 1 to 64 of the characters A-Z a-z 0-9 . _ -"
    );
    Ok(())
}

/// Whether `id` is `ep_` and 8 lowercase hex digits.
pub fn is_id(id: &str) -> bool {
    id.strip_prefix("ep_").is_some_and(|hex| {
        hex.len() == 8
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A new random id that `taken` says is not in use.
pub fn new_id(taken: impl Fn(&str) -> bool) -> anyhow::Result<String> {
    // 2^32 ids: a file would need tens of thousands of endpoints before a draw collides
    // often; the bound only stops a broken RNG from looping forever.
    for _ in 0..100 {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes)
            .map_err(|e| anyhow::anyhow!("the OS random number generator failed: {e}"))?;
        let id = format!("ep_{:08x}", u32::from_be_bytes(bytes));
        if !taken(&id) {
            return Ok(id);
        }
    }
    anyhow::bail!("no free endpoint id after 100 random draws: is the OS RNG broken?")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn parse(line: &str) -> anyhow::Result<Endpoint> {
        parse_line(line)?.context("a blank line")
    }

    fn refusal(line: &str) -> String {
        format!("{:#}", parse(line).expect_err(line))
    }

    #[test]
    fn a_full_line_parses_and_is_written_back_as_it_was() {
        let line = format!(
            "ep_3f9a1c2b url=https://shop.example/hooks?x=1 secret={SECRET} secret=whsec_AAEC \
             types=pet.created,order.placed label=web-site.1 start=oldest resume=2"
        );
        let endpoint = parse(&line).expect("parses");
        assert_eq!(endpoint.id, "ep_3f9a1c2b");
        assert_eq!(endpoint.url, "https://shop.example/hooks?x=1");
        assert_eq!(endpoint.secrets.len(), 2);
        assert_eq!(endpoint.secrets[1].key(), [0, 1, 2]);
        assert_eq!(endpoint.secrets[0].encoded(), SECRET);
        assert!(endpoint.types.contains(EventType::PetCreated.code()));
        assert!(endpoint.types.contains(EventType::OrderPlaced.code()));
        assert!(!endpoint.types.contains(EventType::PetUpdated.code()));
        assert_eq!(endpoint.label.as_deref(), Some("web-site.1"));
        assert!(endpoint.from_start);
        assert_eq!(endpoint.resume, 2);
        assert_eq!(endpoint.line(), line);
        assert_eq!(parse(&endpoint.line()).expect("again"), endpoint);
    }

    #[test]
    fn a_minimal_line_takes_every_type_from_the_newest_event() {
        let line = format!("ep_00000000 url=https://[::1]:8443 secret={SECRET}  # mine\r\n");
        let endpoint = parse(&line).expect("parses");
        assert!(endpoint.types.is_all());
        assert_eq!((endpoint.label, endpoint.from_start), (None, false));
        assert_eq!(endpoint.resume, 0);
        // Words in any order: the written line has its own.
        let shuffled = format!("ep_00000001 resume=1 secret={SECRET} url=https://a.example/");
        let endpoint = parse(&shuffled).expect("parses");
        assert_eq!(
            endpoint.line(),
            format!("ep_00000001 url=https://a.example/ secret={SECRET} resume=1")
        );
        for blank in ["", "\n", "   # a comment\n", "#ep_00000000 url=x\r\n"] {
            assert!(parse_line(blank).expect("blank").is_none(), "{blank:?}");
        }
    }

    #[test]
    fn only_an_https_url_with_a_host_and_no_user_or_fragment_is_taken() {
        for (url, says) in [
            ("http://shop.example/hooks", "http:// is refused"),
            ("ftp://shop.example/", "ftp:// is not https://"),
            ("/hooks", "not an absolute URL"),
            ("shop.example", "not an absolute URL"),
            ("https://user:pw@shop.example/", "a user or password"),
            ("https://user@shop.example/", "a user or password"),
            ("https://shop.example/#top", "no fragment"),
            ("https://shop.example/a b", "no spaces"),
            ("https://shop.example:0/", "port 0"),
            ("https:///hooks", "not a URL"),
        ] {
            let message = format!("{:#}", parse_url(url).expect_err(url));
            assert!(message.contains(says), "{url}: {message}");
        }
        let url = parse_url("HTTPS://Shop.example:8443/h?a=b").expect("parses");
        assert_eq!(url.scheme_str(), Some("https"));
        assert_eq!(url.to_string(), "https://Shop.example:8443/h?a=b");
        let error = refusal(&format!(
            "ep_00000000 url=http://a.example/ secret={SECRET}"
        ));
        assert!(
            error.starts_with("url=http://a.example/: http:// is refused"),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_type_is_named_with_the_known_ones() {
        let error = format!(
            "{:#}",
            parse_types("pet.created,pet.sold").expect_err("unknown")
        );
        assert_eq!(
            error,
            "unknown event type \"pet.sold\"; the types are pet.created, pet.updated, \
             pet.deleted, order.placed, order.completed, order.cancelled, order.expired, \
             category.created, category.updated, category.deleted"
        );
        assert!(parse_types("").is_err());
        assert!(parse_types("pet.created,").is_err());
        let types = parse_types(" pet.deleted , category.created").expect("trimmed");
        assert_eq!(type_names(types), ["pet.deleted", "category.created"]);
        let line = format!("ep_00000000 url=https://a.example/ secret={SECRET} types=pets");
        assert!(refusal(&line).starts_with("types=: unknown event type \"pets\""));
    }

    #[test]
    fn a_bad_secret_is_refused_without_being_quoted() {
        for (secret, says) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "followed by base64"),
            ("whsec_", "is empty"),
            ("whsec_not*base64!", "standard base64"),
            ("whsec_AAE", "standard base64"),
            ("whsec_AAE-", "standard base64"),
        ] {
            let message = format!("{:#}", Secret::parse(secret).expect_err(secret));
            assert!(message.contains(says), "{secret}: {message}");
            let line =
                format!("ep_00000000 url=https://a.example/ secret={SECRET} secret={secret}");
            let message = refusal(&line);
            assert!(message.starts_with("secret number 2: "), "{message}");
            if secret != "whsec_" {
                assert!(!message.contains(secret), "the secret is quoted: {message}");
            }
        }
        let generated = Secret::generate().expect("secret");
        assert_eq!(generated.key().len(), 32);
        assert_ne!(generated, Secret::generate().expect("another"));
        assert_eq!(
            Secret::parse(&generated.encoded()).expect("parses"),
            generated
        );
    }

    #[test]
    fn a_line_without_a_url_or_a_secret_or_with_a_bad_id_label_or_word_is_refused() {
        let url = "url=https://a.example/";
        let secret = format!("secret={SECRET}");
        for (line, says) in [
            (format!("ep_00000000 {secret}"), "no url="),
            (format!("ep_00000000 {url}"), "no secret="),
            (
                format!("shop {url} {secret}"),
                "\"shop\" is not an endpoint id",
            ),
            (
                format!("ep_3F9A1C2B {url} {secret}"),
                "is not an endpoint id",
            ),
            (
                format!("ep_3f9a1c2 {url} {secret}"),
                "is not an endpoint id",
            ),
            (
                format!("ep_00000000 {url} {url} {secret}"),
                "url= is given twice",
            ),
            (
                format!("ep_00000000 {url} {secret} label=a/b"),
                "label=a/b: a label is",
            ),
            (
                format!("ep_00000000 {url} {secret} label="),
                "label=: a label is",
            ),
            (
                format!("ep_00000000 {url} {secret} label={}", "a".repeat(65)),
                "a label is",
            ),
            (
                format!("ep_00000000 {url} {secret} start=newest"),
                "start=newest",
            ),
            (format!("ep_00000000 {url} {secret} resume=0"), "resume=0"),
            (format!("ep_00000000 {url} {secret} resume=-1"), "resume=-1"),
            (
                format!("ep_00000000 {url} {secret} retries=3"),
                "retries= is not a word",
            ),
            (
                format!("ep_00000000 {url} {secret} read-only"),
                "is not NAME=VALUE",
            ),
        ] {
            let message = refusal(&line);
            assert!(message.contains(says), "{line}: {message}");
        }
    }

    #[test]
    fn a_file_with_a_bad_line_or_an_id_twice_fails_naming_the_line() {
        let good = format!("ep_00000001 url=https://a.example/ secret={SECRET}\n");
        let text = format!(
            "# endpoints\n\n{good}{}",
            good.replace("url=https", "url=http")
        );
        let error = parse_lines(&text, |n| format!("f, line {n}")).expect_err("line 4");
        assert!(
            format!("{error:#}").starts_with("f, line 4: url=http://a.example/: http://"),
            "{error:#}"
        );
        let text = format!("{good}# again\n{good}");
        let error = parse_lines(&text, |n| format!("f, line {n}")).expect_err("twice");
        assert_eq!(
            format!("{error:#}"),
            "f, line 3: ep_00000001 is already the id of line 1; ids are unique"
        );
        let text = format!("# x\n{good}");
        let lines = parse_lines(&text, |n| n.to_string()).expect("parses");
        assert_eq!(lines[0], ("# x\n", None));
        assert_eq!(lines[1].0, good);
    }

    #[test]
    fn load_reads_the_endpoints_and_a_missing_file_is_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("webhooks");
        assert!(load(&path).expect("missing is fine").is_none());
        let good = format!("ep_00000001 url=https://a.example/ secret={SECRET}\n");
        std::fs::write(&path, format!("# mine\n{good}")).expect("write");
        let endpoints = load(&path).expect("loads").expect("a file");
        assert_eq!(endpoints.len(), 1);
        std::fs::write(&path, format!("{good}oops\n")).expect("write");
        let error = format!("{:#}", load(&path).expect_err("bad line"));
        let wanted = format!("webhooks file {}, line 2: ", path.display());
        assert!(error.starts_with(&wanted), "{error}");
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let endpoint = parse(&format!(
            "ep_00000001 url=https://a.example/ secret={SECRET}"
        ))
        .expect("line");
        let shown = format!("{endpoint:?} {:?}", endpoint.secrets[0]);
        assert!(shown.contains("Secret(whsec_…)"), "{shown}");
        assert!(!shown.contains(&SECRET["whsec_".len()..]), "{shown}");
        assert!(!shown.contains("49, 242"), "no key bytes: {shown}");
    }

    #[test]
    fn new_ids_are_unique_and_well_formed() {
        let id = new_id(|_| false).expect("an id");
        assert!(is_id(&id), "{id}");
        let taken = new_id(|candidate| candidate != "ep_never").expect_err("always taken");
        assert!(taken.to_string().contains("100 random draws"), "{taken}");
    }
}
