//! `petstore webhooks add | list | remove | enable | rotate`: the operator's side of the
//! endpoints file (`endpoints` owns its format). Each edit locks the file and replaces it
//! whole (`durable::LockedFile`), as `petstore keys` does: a server reloading reads the old
//! file or the new one, and every line an edit does not touch, comments included, is kept
//! byte for byte. A line an edit rewrites keeps its comment and line break. A file that does
//! not parse is never edited. A new secret goes to standard output alone on the first line.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::endpoints::{self, Endpoint, Secret};
use crate::config::WebhooksCommand;
use crate::durable::LockedFile;
use crate::keys::RELOAD_HINT;

/// What the file is, in errors about its owner.
const KIND: &str = "webhooks file";

pub fn run(file: &Path, command: WebhooksCommand) -> anyhow::Result<()> {
    match command {
        WebhooksCommand::Add {
            url,
            types,
            label,
            from_start,
        } => add(file, &url, types.as_deref(), label, from_start),
        WebhooksCommand::List { db: None, .. } => list(file, &[], &|_| Vec::new()),
        WebhooksCommand::List {
            db: Some(db),
            db_password_file,
            db_ca,
        } => {
            let db = crate::config::Database::from_flag("--db", db)?;
            let (states, newest) = read_states(&db, db_password_file, db_ca)?;
            list_with_state(file, states, newest)
        }
        WebhooksCommand::Remove { id } => remove(file, &id),
        WebhooksCommand::Enable { id } => enable(file, &id),
        WebhooksCommand::Rotate { id, finish } => rotate(file, &id, finish),
    }
}

fn add(
    file: &Path,
    url: &str,
    types: Option<&str>,
    label: Option<String>,
    from_start: bool,
) -> anyhow::Result<()> {
    // Everything the operator typed is checked before the file is touched.
    let url = endpoints::parse_url(url).with_context(|| format!("URL {url}"))?;
    let types = match types {
        Some(types) => endpoints::parse_types(types).context("--types")?,
        None => crate::event::Types::ALL,
    };
    if let Some(label) = &label {
        endpoints::check_label(label).with_context(|| format!("--label {label}"))?;
    }
    let secret = Secret::generate()?;
    let edit = EndpointsFile::open(file, true)?;
    let id = endpoints::new_id(|id| edit.index_of(id).is_some())?;
    let endpoint = Endpoint {
        id,
        url,
        secrets: vec![secret],
        types,
        label,
        from_start,
        resume: 0,
    };
    let mut text = edit.file.text.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&endpoint.line());
    text.push('\n');
    edit.file.replace(&text)?;
    // Only once it is in the file: a secret printed for an endpoint that is not would mislead.
    print_secret(&endpoint.secrets[0], Some(&endpoint.id))?;
    eprintln!(
        "added {} ({}) to {}; the first line is its signing secret: give it to the receiver, \
         which verifies each delivery with it (the file keeps it too: keep the file private); \
         {RELOAD_HINT}",
        endpoint.id,
        describe(&endpoint),
        edit.file.path.display()
    );
    Ok(())
}

/// Prints the endpoints as a table: ID, LABEL, URL, TYPES (`*`: all), SECRETS (how many),
/// START, then the columns named by `headings`, whose cells `cells` gives by endpoint id (a
/// missing cell shows as `-`). The delivery state a server keeps can be shown this way.
/// Every endpoint's delivery state in the store `db`, and the feed's newest event.
fn read_states(
    db: &crate::config::Database,
    password_file: Option<PathBuf>,
    ca: Option<PathBuf>,
) -> anyhow::Result<(Vec<(String, crate::store::WebhookState)>, u64)> {
    let url = match db {
        crate::config::Database::Redb(path) => {
            return match crate::store::redb_file::webhook_states(path) {
                Ok(read) => Ok(read),
                // The server holds the file: it shows the state in its status file.
                Err(crate::store::StoreError::Locked) => status_of_server(path),
                Err(e) => Err(anyhow::anyhow!(
                    "reading the delivery state in {}: {e}",
                    path.display()
                )),
            };
        }
        crate::config::Database::Postgres(url) => url,
    };
    let target = crate::store::parse_postgres(
        url,
        password_file.as_deref(),
        ca.as_deref(),
        1,
        std::time::Duration::from_secs(10),
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime
        .block_on(crate::store::postgres_db::webhook_states(target))
        .with_context(|| format!("reading the delivery state in {url}"))
}

/// The state a running server on the redb file `db` last wrote to its status file.
fn status_of_server(db: &Path) -> anyhow::Result<(Vec<(String, crate::store::WebhookState)>, u64)> {
    let file = super::status_file(db);
    let text = std::fs::read(&file).map_err(|e| {
        anyhow::anyhow!(
            "{} is open in a server, and its status file {} does not read ({e}): a server \
             with --webhooks writes it every few seconds",
            db.display(),
            file.display()
        )
    })?;
    let status: super::Status =
        serde_json::from_slice(&text).with_context(|| format!("reading {}", file.display()))?;
    let age = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| at.elapsed().ok())
        .map_or_else(String::new, |age| format!(", {}s old", age.as_secs()));
    eprintln!(
        "state as the running server last wrote it to {}{age}",
        file.display()
    );
    Ok((status.states, status.newest))
}

/// `list` with each endpoint's delivery state.
fn list_with_state(
    file: &Path,
    states: Vec<(String, crate::store::WebhookState)>,
    newest: u64,
) -> anyhow::Result<()> {
    let states: std::collections::HashMap<String, crate::store::WebhookState> =
        states.into_iter().collect();
    list(file, &["STATE", "BEHIND"], &|id| match states.get(id) {
        None => vec!["not started".to_owned(), "-".to_owned()],
        Some(state) => vec![
            describe_state(state),
            format!("{} events", newest.saturating_sub(state.position)),
        ],
    })
}

/// An endpoint's state as `list` shows it.
fn describe_state(state: &crate::store::WebhookState) -> String {
    let at = |ms: u64| crate::auth::format_time(ms / 1000);
    if let Some(reason) = &state.disabled {
        return format!("disabled: {reason}");
    }
    if state.attempts > 0 {
        return format!(
            "retrying since {} ({} tries, next {}; last: {})",
            at(state.failing_since_ms),
            state.attempts,
            at(state.next_try_ms),
            state.last_error.as_deref().unwrap_or("?")
        );
    }
    "delivering".to_owned()
}

pub fn list(
    file: &Path,
    headings: &[&str],
    cells: &dyn Fn(&str) -> Vec<String>,
) -> anyhow::Result<()> {
    let edit = EndpointsFile::open(file, false)?;
    let endpoints: Vec<&Endpoint> = edit.endpoints().collect();
    let out = table(&endpoints, headings, cells);
    // Nothing is edited: the lock need not last while the table is written.
    drop(edit);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing the list")
}

/// The table `list` prints (see there), columns two spaces apart.
pub fn table(
    endpoints: &[&Endpoint],
    headings: &[&str],
    cells: &dyn Fn(&str) -> Vec<String>,
) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        ["ID", "LABEL", "URL", "TYPES", "SECRETS", "START"]
            .iter()
            .chain(headings)
            .map(|h| (*h).to_owned())
            .collect(),
    ];
    for endpoint in endpoints {
        let mut row = vec![
            endpoint.id.clone(),
            endpoint.label.clone().unwrap_or_else(|| "-".to_owned()),
            endpoint.url.to_string(),
            types_cell(endpoint),
            endpoint.secrets.len().to_string(),
            start_cell(endpoint).to_owned(),
        ];
        let mut extra = cells(&endpoint.id);
        extra.resize(headings.len(), "-".to_owned());
        row.extend(extra);
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:width$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn remove(file: &Path, id: &str) -> anyhow::Result<()> {
    let edit = EndpointsFile::open(file, false)?;
    let index = edit.find(id)?;
    let removed = edit.endpoint(index);
    let said = format!("{} ({})", removed.id, describe(removed));
    edit.file.replace(&edit.text_with(index, None))?;
    eprintln!(
        "removed {said} from {}; its deliveries stop: {RELOAD_HINT}",
        edit.file.path.display()
    );
    Ok(())
}

fn enable(file: &Path, id: &str) -> anyhow::Result<()> {
    let edit = EndpointsFile::open(file, false)?;
    let index = edit.find(id)?;
    let mut endpoint = edit.endpoint(index).clone();
    endpoint.resume = endpoint
        .resume
        .checked_add(1)
        .with_context(|| format!("{id}: resume= cannot count higher"))?;
    edit.file.replace(&edit.text_with(index, Some(&endpoint)))?;
    eprintln!(
        "enabled {id} (resume={} in {}): if the server disabled it, it resumes from where it \
         stopped, the event it could not deliver first (an endpoint that is not disabled goes \
         on as it was); {RELOAD_HINT}",
        endpoint.resume,
        edit.file.path.display()
    );
    Ok(())
}

fn rotate(file: &Path, id: &str, finish: bool) -> anyhow::Result<()> {
    let edit = EndpointsFile::open(file, false)?;
    let index = edit.find(id)?;
    let mut endpoint = edit.endpoint(index).clone();
    let shown = edit.file.path.display();
    if finish {
        let older = endpoint.secrets.len() - 1;
        if older == 0 {
            eprintln!("{id} has one secret in {shown}: nothing to finish");
            return Ok(());
        }
        endpoint.secrets.drain(..older);
        edit.file.replace(&edit.text_with(index, Some(&endpoint)))?;
        eprintln!(
            "{id} keeps only its newest secret in {shown} ({older} older removed): deliveries \
             are signed with it alone; {RELOAD_HINT}"
        );
        return Ok(());
    }
    let secret = Secret::generate()?;
    endpoint.secrets.push(secret.clone());
    edit.file.replace(&edit.text_with(index, Some(&endpoint)))?;
    print_secret(&secret, None)?;
    eprintln!(
        "added a secret to {id} in {shown}; the first line is the new secret: give it to the \
         receiver. Deliveries are signed with each of its {} secrets, so the receiver may \
         verify with the old one or the new; once it has only the new one: `petstore webhooks \
         rotate {id} --finish`; {RELOAD_HINT}",
        endpoint.secrets.len()
    );
    Ok(())
}

/// Prints the secret alone on the first line of standard output, then `id ID` when given.
fn print_secret(secret: &Secret, id: Option<&str>) -> anyhow::Result<()> {
    let mut out = format!("{}\n", secret.encoded());
    if let Some(id) = id {
        out.push_str(&format!("id {id}\n"));
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("printing the secret (it is in the file: read it there, or rotate it)")
}

/// The endpoint in a few words, for the messages: its URL, types, label and start.
fn describe(endpoint: &Endpoint) -> String {
    let types = if endpoint.types.is_all() {
        "every type".to_owned()
    } else {
        format!("types {}", types_cell(endpoint))
    };
    let mut said = format!("{}, {types}", endpoint.url);
    if let Some(label) = &endpoint.label {
        said.push_str(&format!(", label {label}"));
    }
    said.push_str(&format!(", from the {} event", start_cell(endpoint)));
    said
}

fn types_cell(endpoint: &Endpoint) -> String {
    if endpoint.types.is_all() {
        "*".to_owned()
    } else {
        endpoints::type_names(endpoint.types).join(",")
    }
}

fn start_cell(endpoint: &Endpoint) -> &'static str {
    if endpoint.from_start {
        "oldest"
    } else {
        "newest"
    }
}

/// The endpoints file, locked and parsed, for one edit.
struct EndpointsFile {
    file: LockedFile,
    /// Each line's end in `file.text` (its line break included), and its endpoint if any.
    lines: Vec<(usize, Option<Endpoint>)>,
}

impl EndpointsFile {
    /// Opens, locks and parses the file; `create`: a missing file is made empty, mode 0600.
    /// A line that does not parse stops here: an edit must not carry a broken file on.
    fn open(given: &Path, create: bool) -> anyhow::Result<EndpointsFile> {
        let file = if create {
            LockedFile::open_or_create(given, KIND, "add the endpoint again")?
        } else {
            if !given.try_exists().unwrap_or(true) {
                anyhow::bail!(
                    "{}: no such file; `petstore webhooks add URL` makes it",
                    given.display()
                );
            }
            LockedFile::open(given, KIND)?
        };
        let shown = given.display();
        let mut end = 0;
        let lines = endpoints::parse_lines(&file.text, |n| {
            format!("{shown}, line {n}: fix it by hand first")
        })?
        .into_iter()
        .map(|(raw, endpoint)| {
            end += raw.len();
            (end, endpoint)
        })
        .collect();
        Ok(EndpointsFile { file, lines })
    }

    fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.lines.iter().filter_map(|(_, e)| e.as_ref())
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.lines
            .iter()
            .position(|(_, e)| e.as_ref().is_some_and(|e| e.id == id))
    }

    /// The line of the endpoint `id`, or an error that says where to look.
    fn find(&self, id: &str) -> anyhow::Result<usize> {
        self.index_of(id).with_context(|| {
            format!(
                "{}: no endpoint has the id {id} (`petstore webhooks list` shows them)",
                self.file.path.display()
            )
        })
    }

    /// The endpoint of a line `find` returned.
    fn endpoint(&self, index: usize) -> &Endpoint {
        self.lines[index]
            .1
            .as_ref()
            .expect("find returns only lines with an endpoint")
    }

    fn raw(&self, index: usize) -> &str {
        let start = index
            .checked_sub(1)
            .map_or(0, |before| self.lines[before].0);
        &self.file.text[start..self.lines[index].0]
    }

    /// The file's text with line `index` removed (`None`) or rewritten as `endpoint`, every
    /// other line as it was. A rewritten line keeps its comment and its line break.
    fn text_with(&self, index: usize, endpoint: Option<&Endpoint>) -> String {
        let text = &self.file.text;
        let start = index
            .checked_sub(1)
            .map_or(0, |before| self.lines[before].0);
        let end = self.lines[index].0;
        let mut out = String::with_capacity(text.len() + 64);
        out.push_str(&text[..start]);
        if let Some(endpoint) = endpoint {
            let raw = self.raw(index);
            let content = raw
                .find('#')
                .unwrap_or(raw.trim_end_matches(['\r', '\n']).len());
            let body = &raw[..content];
            // The spacing before the comment (or the line break), then the comment itself.
            out.push_str(&endpoint.line());
            out.push_str(&body[body.trim_end().len()..]);
            out.push_str(&raw[content..]);
        }
        out.push_str(&text[end..]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::PermissionsExt;

    fn ids(path: &Path) -> Vec<String> {
        endpoints::load(path)
            .expect("loads")
            .expect("a file")
            .into_iter()
            .map(|e| e.id)
            .collect()
    }

    #[test]
    fn webhook_edits_keep_every_other_line_and_a_rewritten_lines_comment() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("webhooks");
        let mine = "ep_0000000a url=https://a.example/ secret=whsec_AAEC";
        let original = format!("# receivers\n\n{mine}   # the shop\r\n# end");
        std::fs::write(&path, &original).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");

        add(
            &path,
            "https://b.example/h",
            Some("pet.created"),
            None,
            true,
        )
        .expect("add");
        let added = std::fs::read_to_string(&path).expect("read");
        let (before, last) = added
            .rsplit_once("# end\n")
            .expect("a line break was added");
        assert_eq!(before, &original[..original.len() - "# end".len()]);
        let new = endpoints::parse_line(last)
            .expect("parses")
            .expect("a line");
        assert!(
            last.ends_with(" types=pet.created start=oldest\n"),
            "{last}"
        );
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o7777, 0o640);

        enable(&path, "ep_0000000a").expect("enable");
        enable(&path, "ep_0000000a").expect("enable again");
        rotate(&path, "ep_0000000a", false).expect("rotate");
        let text = std::fs::read_to_string(&path).expect("read");
        let line = text.lines().nth(2).expect("line 3");
        assert!(text.contains("   # the shop\r\n# end\n"), "{text}");
        let (words, _) = line.split_once("   # the shop").expect("comment kept");
        let endpoint = endpoints::parse_line(words)
            .expect("parses")
            .expect("a line");
        assert_eq!(endpoint.resume, 2);
        assert_eq!(endpoint.secrets.len(), 2);
        assert_eq!(endpoint.secrets[0].key(), [0, 1, 2], "the old one first");

        rotate(&path, "ep_0000000a", true).expect("finish");
        let text = std::fs::read_to_string(&path).expect("read");
        let finished = endpoints::parse_line(text.lines().nth(2).expect("line 3"))
            .expect("parses")
            .expect("a line");
        assert_eq!(finished.secrets, endpoint.secrets[1..]);
        rotate(&path, "ep_0000000a", true).expect("finishing twice is no error");

        remove(&path, &new.id).expect("remove");
        assert_eq!(ids(&path), ["ep_0000000a"]);
        remove(&path, "ep_0000000a").expect("remove");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "# receivers\n\n# end\n"
        );
        let error = remove(&path, "ep_0000000a").expect_err("gone");
        assert!(
            format!("{error:#}").contains("no endpoint has the id ep_0000000a"),
            "{error:#}"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["webhooks"], "no temp file is left");
    }

    #[test]
    fn webhook_add_refuses_bad_input_before_touching_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("webhooks");
        for (url, types, label, says) in [
            (
                "http://a.example/",
                None,
                None,
                "URL http://a.example/: http:// is refused",
            ),
            (
                "https://a.example/",
                Some("pet.born"),
                None,
                "--types: unknown event type",
            ),
            (
                "https://a.example/",
                None,
                Some("a b"),
                "--label a b: a label is",
            ),
        ] {
            let error = add(&path, url, types, label.map(str::to_owned), false).expect_err(url);
            assert!(format!("{error:#}").starts_with(says), "{error:#}");
        }
        assert!(!path.exists(), "nothing was made");
        let error = list(&path, &[], &|_| Vec::new()).expect_err("no file");
        assert!(format!("{error:#}").contains("no such file"), "{error:#}");

        add(&path, "https://a.example/", None, None, false).expect("made");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o7777, 0o600);
        std::fs::write(&path, "ep_0000000a url=https://a.example/\n").expect("break");
        let error = add(&path, "https://b.example/", None, None, false).expect_err("broken");
        assert!(
            format!("{error:#}").contains("line 1: fix it by hand first: no secret="),
            "{error:#}"
        );
    }

    #[test]
    fn webhook_table_lines_up_its_columns_and_takes_extra_ones() {
        let a = endpoints::parse_line(
            "ep_0000000a url=https://a.example/ secret=whsec_AAEC label=shop",
        )
        .expect("parses")
        .expect("a line");
        let b = endpoints::parse_line(
            "ep_0000000b url=https://hooks.b.example/x secret=whsec_AAEC secret=whsec_AAEC \
             types=order.placed,pet.created start=oldest",
        )
        .expect("parses")
        .expect("a line");
        let state = |id: &str| {
            if id == "ep_0000000b" {
                vec!["disabled".to_owned(), "since 12:00".to_owned()]
            } else {
                Vec::new()
            }
        };
        assert_eq!(
            table(&[&a, &b], &["STATE", "SINCE"], &state),
            "ID           LABEL  URL                        TYPES                     \
             SECRETS  START   STATE     SINCE\n\
             ep_0000000a  shop   https://a.example/         *                         \
             1        newest  -         -\n\
             ep_0000000b  -      https://hooks.b.example/x  pet.created,order.placed  \
             2        oldest  disabled  since 12:00\n"
        );
        assert_eq!(
            table(&[], &[], &|_| Vec::new()),
            "ID  LABEL  URL  TYPES  SECRETS  START\n"
        );
    }
}
