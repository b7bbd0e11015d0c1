//! `petstore keys add | list | revoke`: the operator's side of the keys file the server reads
//! (`auth` owns its format). An edit holds an exclusive lock on the file, so two edits at once
//! never lose one, and is atomic (`durable::LockedFile`): the new text goes to a temp file
//! beside the old one, with the old one's owner and mode, is fsynced and renamed over it, then
//! the directory is fsynced. A server reloading (SIGHUP) reads the old file or the new one,
//! never half of one. Every line an edit does not add or remove, comments included, is kept
//! byte for byte.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

use crate::auth::{self, Entry};
use crate::config::KeysCommand;
use crate::durable::LockedFile;

/// What to run after an edit so that a running server takes it: the documented reload, and
/// the signal only where there is no systemd to send it.
pub const RELOAD_HINT: &str = "a running server takes it on reload: `systemctl reload \
                               petstore` (without systemd: `kill -HUP <pid>`, the pid of its \
                               `listening on` log line)";

pub fn run(file: &Path, command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Add {
            label,
            read_only,
            expires,
        } => add(file, &label, read_only, expires),
        KeysCommand::List => list(file),
        KeysCommand::Revoke { label } => revoke(file, &label),
    }
}

fn add(file: &Path, label: &str, read_only: bool, expires: Option<u64>) -> anyhow::Result<()> {
    if let Some(expires) = expires {
        anyhow::ensure!(
            expires > crate::clock::unix_now(),
            "--expires {} is already past",
            auth::format_time(expires)
        );
    }
    // Checks the label before the file is touched.
    let (key, entry) = auth::new_entry(label, read_only, expires)?;
    let keys = KeysFile::open(file, true)?;
    anyhow::ensure!(
        !keys
            .lines
            .iter()
            .any(|(_, e)| e.as_ref().is_some_and(|e| &*e.label == label)),
        "{}: a key labelled {label} is already there; revoke it first or pick another label",
        keys.file.path.display()
    );
    let mut text = keys.file.text.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&entry.line());
    text.push('\n');
    keys.file.replace(&text)?;
    // The key goes out only once it is in the file, and only here: the one time it is shown.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{key}")
        .and_then(|()| stdout.flush())
        .context("printing the key (it is in the file: revoke it and add another)")?;
    eprintln!(
        "added {label} ({}) to {}; the first line is the key, shown only this once: give it to \
         the client; {RELOAD_HINT}",
        describe(&entry),
        keys.file.path.display()
    );
    Ok(())
}

fn list(file: &Path) -> anyhow::Result<()> {
    let keys = KeysFile::open(file, false)?;
    let entries: Vec<&Entry> = keys.lines.iter().filter_map(|(_, e)| e.as_ref()).collect();
    let width = entries
        .iter()
        .map(|e| e.label.len())
        .max()
        .unwrap_or(0)
        .max("LABEL".len());
    let now = crate::clock::unix_now();
    let mut out = format!("{:width$}  {:10}  EXPIRES\n", "LABEL", "SCOPE");
    for entry in entries {
        let scope = if entry.read_only {
            "read-only"
        } else {
            "read-write"
        };
        let expires = match entry.expires {
            None => "never".to_owned(),
            Some(at) if entry.expired_at(now) => format!("{} (expired)", auth::format_time(at)),
            Some(at) => auth::format_time(at),
        };
        out.push_str(&format!("{:width$}  {scope:10}  {expires}\n", entry.label));
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing the list")
}

fn revoke(file: &Path, label: &str) -> anyhow::Result<()> {
    let keys = KeysFile::open(file, false)?;
    let (mut kept, mut removed, mut left) = (String::new(), 0, 0);
    for (text, entry) in &keys.lines {
        match entry {
            Some(entry) if &*entry.label == label => removed += 1,
            Some(_) => {
                left += 1;
                kept.push_str(text);
            }
            None => kept.push_str(text),
        }
    }
    anyhow::ensure!(
        removed > 0,
        "{}: no key is labelled {label}",
        keys.file.path.display()
    );
    // The server refuses a file without keys and would keep the old set, this key included.
    anyhow::ensure!(
        left > 0,
        "{}: {label} is the last key, and a server keeps its old keys rather than take a file \
         with none; add another key first (or stop the server)",
        keys.file.path.display()
    );
    keys.file.replace(&kept)?;
    eprintln!(
        "revoked {removed} key{} labelled {label} in {}; {RELOAD_HINT}",
        if removed == 1 { "" } else { "s" },
        keys.file.path.display()
    );
    Ok(())
}

fn describe(entry: &Entry) -> String {
    let scope = if entry.read_only {
        "read-only"
    } else {
        "read-write"
    };
    match entry.expires {
        Some(at) => format!("{scope}, expires {}", auth::format_time(at)),
        None => format!("{scope}, no expiry"),
    }
}

/// The keys file, read under an exclusive lock that lasts until it is dropped.
struct KeysFile {
    file: LockedFile,
    /// Each line with its line break, and its key if it holds one.
    lines: Vec<(String, Option<Entry>)>,
}

impl KeysFile {
    /// Opens, locks and parses the file; `create`: a missing file is made empty, mode 0600.
    /// A line that does not parse stops here: an edit must not carry a broken file on.
    fn open(given: &Path, create: bool) -> anyhow::Result<KeysFile> {
        let file = if create {
            LockedFile::open_or_create(given, "keys file", "add the key again")?
        } else {
            LockedFile::open(given, "keys file")?
        };
        let shown = given.display();
        let lines = file
            .text
            .split_inclusive('\n')
            .enumerate()
            .map(|(index, line)| {
                let entry = auth::parse_line(line).with_context(|| {
                    format!("{shown}, line {}: fix it by hand first", index + 1)
                })?;
                Ok((line.to_owned(), entry))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(KeysFile { file, lines })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs::Permissions;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn add_then_revoke_keeps_every_other_line_byte_for_byte() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("api-keys");
        let (_, dev) = auth::new_key("dev").expect("key");
        let original = format!("# the keys\n\n{dev}   # laptop\r\n# end");
        std::fs::write(&path, &original).expect("write");
        std::fs::set_permissions(&path, Permissions::from_mode(0o640)).expect("chmod");

        add(&path, "alice", true, None).expect("add");
        let added = std::fs::read_to_string(&path).expect("read");
        let (before, last) = added
            .rsplit_once("# end\n")
            .expect("a line break was added");
        assert_eq!(before, &original[..original.len() - "# end".len()]);
        assert!(
            last.starts_with("alice ") && last.ends_with(" read-only\n"),
            "{last}"
        );
        let mode = std::fs::metadata(&path).expect("stat").mode() & 0o7777;
        assert_eq!(mode, 0o640);
        assert!(
            add(&path, "alice", false, None).is_err(),
            "labels are unique"
        );

        revoke(&path, "alice").expect("revoke");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            format!("{original}\n")
        );
        assert!(revoke(&path, "alice").is_err(), "nothing left to revoke");
        assert!(revoke(&path, "dev").is_err(), "the last key stays");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["api-keys"], "no temp file is left");
    }

    #[test]
    fn add_into_a_missing_directory_makes_nothing_and_says_how_to_make_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("etc/petstore");
        let error = add(&missing.join("api-keys"), "alice", false, None).expect_err("refused");
        let wanted = format!("mkdir -p {}", missing.display());
        assert!(format!("{error:#}").contains(&wanted), "{error:#}");
        assert!(!dir.path().join("etc").exists());
    }

    #[test]
    fn a_broken_file_is_not_edited_and_a_missing_one_is_made_by_add() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("api-keys");
        assert!(list(&path).is_err());
        add(&path, "first", false, Some(crate::clock::unix_now() + 3600)).expect("add");
        let mode = std::fs::metadata(&path).expect("stat").mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert!(add(&path, "past", false, Some(1)).is_err());
        std::fs::write(&path, "dev nothex\n").expect("break");
        let error = add(&path, "second", false, None).expect_err("refused");
        assert!(
            format!("{error:#}").contains("line 1: fix it by hand first"),
            "{error:#}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "dev nothex\n"
        );
    }
}
