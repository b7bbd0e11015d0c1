//! The generated files the Debian package ships (Cargo.toml `[package.metadata.deb]`): the man
//! pages (clap_mangen) and the bash, zsh and fish completions (clap_complete), all made from the
//! clap definitions in `config/cli.rs`. They are committed in pkg/deb/ so that a `cargo deb`
//! needs nothing run before it; a build script could not make them, since it cannot reach the
//! binary crate's `Cli`. The test here fails when a committed file no longer matches the
//! definitions; regenerate them all with
//!
//!     PETSTORE_REGENERATE=1 cargo test --bin petstore packaging
//!
//! Every subcommand at every depth has its page, and another test has man-db's `man` render
//! each one at 80 columns without a warning.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

use crate::config::Cli;

/// The committed files, relative to the repository root, each with what it should hold now.
fn generated() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new("pkg/deb");
    let mut files = Vec::new();

    // clap's own `help` subcommand gets no page (`petstore help` is --help), so no page lists
    // it either; the full names (`petstore-keys-add`) come from build().
    let mut cli = Cli::command().disable_help_subcommand(true);
    cli.build();
    let source = format!("petstore {}", env!("CARGO_PKG_VERSION"));
    // Every subcommand at every depth (`keys`, then `keys add`) has its page: each page's
    // SUBCOMMANDS section names the pages below it.
    let mut pages = vec![(cli.clone(), true)];
    let mut next = 0;
    while next < pages.len() {
        let below: Vec<_> = pages[next]
            .0
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set())
            .map(|sub| (sub.clone(), false))
            .collect();
        pages.extend(below);
        next += 1;
    }
    for (page, main) in pages {
        let man = clap_mangen::Man::new(page).source(&source);
        let mut roff = Vec::new();
        man.render(&mut roff)
            .expect("rendering to memory cannot fail");
        if main {
            roff.extend_from_slice(installed_files().as_bytes());
        }
        files.push((dir.join("man").join(man.get_filename()), roff));
    }

    for (shell, file) in [
        (Shell::Bash, "petstore.bash"),
        (Shell::Zsh, "_petstore"),
        (Shell::Fish, "petstore.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "petstore", &mut script);
        files.push((dir.join("completions").join(file), script));
    }
    files
}

/// The main page's FILES and SEE ALSO sections: where the package puts the unit and where that
/// unit looks for its secrets and keeps the database (pets.service, docs/packaging.md).
/// No apostrophes: this text is appended after the page's apostrophe handling.
fn installed_files() -> String {
    use clap_mangen::roff::{Roff, bold, italic, roman};
    let mut roff = Roff::new();
    roff.control("SH", ["FILES"]);
    for (path, what) in [
        (
            "/usr/lib/systemd/system/petstore.service",
            "The systemd unit: serves HTTPS on [::]:8443 as a transient user, with the \
             PETSTORE_* settings shown above. Not enabled on install.",
        ),
        (
            "/etc/petstore/tls.pem, /etc/petstore/tls.key",
            "The certificate chain and its private key, readable by root only; the unit hands \
             them to the server with LoadCredential=.",
        ),
        (
            "/etc/petstore/api-keys",
            "The API keys file, one line per key from petstore new-key.",
        ),
        (
            "/usr/share/doc/petstore/examples/petstore-acme.service",
            "The unit for a certificate over ACME (--acme-domain) on port 443, in place of \
             the certificate files.",
        ),
        (
            "/var/lib/petstore/acme",
            "With --acme-domain under systemd: the ACME account key and the certificate, \
             mode 0600 in a 0700 directory.",
        ),
        (
            "/var/lib/petstore/pets.redb",
            "The pets, in the StateDirectory= of the unit. Removing or purging the package \\
             leaves them.",
        ),
    ] {
        roff.control("TP", []);
        roff.text([bold(path)]);
        roff.text([roman(what)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("systemctl"),
        roman("(1), "),
        bold("systemd.exec"),
        roman("(5), "),
        italic("/usr/share/doc/petstore/README.md"),
    ]);
    roff.to_roff()
}

#[test]
fn committed_man_pages_and_completions_match_the_command_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let regenerate = std::env::var_os("PETSTORE_REGENERATE").is_some();
    let files = generated();
    let mut stale = Vec::new();
    // A page left from a subcommand that is gone would still be packaged (pkg/deb/man/*.1).
    let man_dir = root.join("pkg/deb/man");
    for entry in std::fs::read_dir(&man_dir).expect("pkg/deb/man/") {
        let path = entry.expect("pkg/deb/man/ entry").path();
        let relative = path
            .strip_prefix(root)
            .expect("under the root")
            .to_path_buf();
        if !files.iter().any(|(generated, _)| *generated == relative) {
            if regenerate {
                std::fs::remove_file(&path).expect("remove a page no longer generated");
            } else {
                stale.push(relative.display().to_string());
            }
        }
    }
    for (path, want) in files {
        let full = root.join(&path);
        if regenerate {
            std::fs::create_dir_all(full.parent().expect("a file in pkg/deb/")).expect("mkdir");
            std::fs::write(&full, &want).expect("write a generated file");
            continue;
        }
        if std::fs::read(&full).ok().as_deref() != Some(want.as_slice()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "stale against the clap definitions: {}\nregenerate with: \
         PETSTORE_REGENERATE=1 cargo test --bin petstore packaging",
        stale.join(", ")
    );
}

#[test]
fn every_man_page_renders_without_a_warning() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("temp dir");
    let mut warned = Vec::new();
    for (path, roff) in generated() {
        if path.extension().is_none_or(|ext| ext != "1") {
            continue;
        }
        let page = dir.path().join(path.file_name().expect("a file name"));
        std::fs::write(&page, roff).expect("write a page");
        // 80 columns, as a terminal gives by default: the width decides where lines break,
        // and so whether one cannot be adjusted.
        let output = Command::new("man")
            .args(["--warnings", "--local-file"])
            .arg(&page)
            .env("MANWIDTH", "80")
            .env_remove("COLUMNS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output();
        let output = match output {
            Ok(output) => output,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "`man` is missing, so the man pages cannot be checked: install man-db \
                 (apt-get install man-db)"
            ),
            Err(e) => panic!("running man: {e}"),
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() || !stderr.is_empty() {
            warned.push(format!("{} ({}):\n{stderr}", path.display(), output.status));
        }
    }
    assert!(warned.is_empty(), "{}", warned.join("\n"));
}
