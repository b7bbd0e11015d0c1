//! The staff console in a real browser (issue 31): `tests/console/console.mjs` drives Debian's
//! Chromium with playwright-core (and checks each view with axe-core) against the real server
//! started here, with the development key, a read-only key and a key to revoke. When the
//! script asks (`ASK restart`, `ASK revoke`), the test restarts the server on the same address
//! or revokes the key and reloads. Needs `/usr/bin/chromium`, `node` and the npm packages that
//! `tests/run` installs into `target/console-node`: without them each test fails, saying so.
//! One browser runs at a time (the machine has two cores); budgets print to the test log.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::support::{DEV_KEY, Options, Server, cert, run};

/// The whole run of one script, past which it is stopped and the test fails.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(600);

/// One browser at a time.
static BROWSER: Mutex<()> = Mutex::new(());

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where `tests/run` puts playwright-core and axe-core.
fn node_dir() -> PathBuf {
    std::env::var_os("CONSOLE_NODE")
        .map_or_else(|| root().join("target/console-node"), PathBuf::from)
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Fails the test, saying what to install, when the browser or its driver is missing.
fn require_browser() {
    let how = "the console's browser tests need Debian's chromium and nodejs (with npm), and \
               the npm packages playwright-core and axe-core in target/console-node: `bash \
               tests/run` installs them all (or: apt-get install chromium nodejs npm; npm \
               install --prefix target/console-node playwright-core@1.61.1 axe-core@4.14.1)";
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|out| out.status.success()),
        "no node ({node:?}): {how}"
    );
    assert!(chromium().is_file(), "no {}: {how}", chromium().display());
    for file in [
        "node_modules/playwright-core/index.mjs",
        "node_modules/axe-core/axe.min.js",
    ] {
        let path = node_dir().join(file);
        assert!(path.is_file(), "no {}: {how}", path.display());
    }
}

/// The keys the scripts use: the development key, `reader` (read-only) and `till` (revoked by
/// the `revoked` scenario), in a copy of the development keys file.
struct Keys {
    file: PathBuf,
    reader: String,
    till: String,
    _dir: tempfile::TempDir,
}

fn keys() -> Keys {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("api-keys");
    std::fs::copy(cert("dev-keys.txt"), &file).expect("copy the keys");
    let add = |label: &str, read_only: bool| {
        let mut args = vec!["keys", "add", label, "--api-keys"];
        let file = file.to_str().expect("a UTF-8 temp path");
        args.push(file);
        if read_only {
            args.push("--read-only");
        }
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, Some(0), "{stderr}");
        stdout.trim().to_owned()
    };
    Keys {
        reader: add("reader", true),
        till: add("till", false),
        file,
        _dir: dir,
    }
}

/// A loopback address free now, for a server that must come back on the same one.
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
}

fn start(keys: &Keys, listen: Option<SocketAddr>, args: &[&str]) -> Server {
    Server::start_with(Options {
        api_keys: keys.file.clone(),
        listen,
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..Options::default()
    })
}

/// Runs the script's `scenarios` against `server`; `asked` does what the script asks for
/// (`restart`, `revoke`) and may replace the server. Returns the script's whole output,
/// asserting that it exited 0 with no failed step.
fn browse(
    server: &mut Option<Server>,
    keys: &Keys,
    scenarios: &[&str],
    asked: impl FnMut(&str, &mut Option<Server>),
) -> String {
    browse_at("/console", server, keys, scenarios, asked)
}

/// `browse`, for a console served under `path` (`--console-path`).
fn browse_at(
    path: &str,
    server: &mut Option<Server>,
    keys: &Keys,
    scenarios: &[&str],
    mut asked: impl FnMut(&str, &mut Option<Server>),
) -> String {
    require_browser();
    let _one = BROWSER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let port = server.as_ref().expect("a server").addr.port();
    let origin = format!("https://localhost:{port}");
    let screenshots = root().join("target/console-screenshots");
    let mut child = Command::new("node")
        .arg(root().join("tests/console/console.mjs"))
        .args(scenarios)
        .env("CONSOLE_URL", format!("{origin}{path}"))
        .env("API_URL", &origin)
        .env("DEV_KEY", DEV_KEY)
        .env("READ_ONLY_KEY", &keys.reader)
        .env("REVOCABLE_KEY", &keys.till)
        .env("SCREENSHOTS", &screenshots)
        .env("CONSOLE_NODE", node_dir())
        .env("CHROMIUM", chromium())
        .env("NODE_EXTRA_CA_CERTS", cert("dev-ca.pem"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let (lines, received) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let out_lines = lines.clone();
    let readers = [
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = out_lines.send(line);
            }
        }),
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = lines.send(format!("stderr: {line}"));
            }
        }),
    ];
    let deadline = Instant::now() + SCRIPT_DEADLINE;
    let mut output = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => {
                if let Some(what) = line.strip_prefix("ASK ") {
                    asked(what, server);
                    writeln!(stdin, "done").expect("the script reads its answer");
                }
                // Budgets go to the log whether or not the test passes (past the capture).
                if line.starts_with("BUDGET ") {
                    let _ = writeln!(std::io::stderr().lock(), "console {line}");
                }
                output.push_str(&line);
                output.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("the browser script ran past {SCRIPT_DEADLINE:?}:\n{output}");
            }
        }
    }
    for reader in readers {
        reader.join().expect("an output reader");
    }
    let status = child.wait().expect("node exits");
    println!("{output}");
    assert!(
        status.success() && output.contains(" 0 failed") && !output.contains("not ok"),
        "the browser script failed ({status}):\n{output}"
    );
    output
}

/// Restarts the server on its own address (its sessions and pets are in its store).
fn restart(what: &str, server: &mut Option<Server>) {
    assert_eq!(what, "restart", "the script asked for {what}");
    *server = Some(server.take().expect("a server").restart());
}

fn no_asking(what: &str, _: &mut Option<Server>) {
    panic!("the script asked for {what}");
}

#[test]
fn staff_sign_in_and_manage_pets_categories_and_orders_and_see_conflicts_in_a_browser() {
    let keys = keys();
    let mut server = Some(start(&keys, None, &[]));
    browse(&mut server, &keys, &["tasks", "conflict"], no_asking);
}

#[test]
fn a_read_only_key_gets_no_write_controls_under_another_console_path() {
    let keys = keys();
    let mut server = Some(start(&keys, None, &["--console-path", "/shop/admin"]));
    let output = browse_at("/shop/admin", &mut server, &keys, &["read-only"], no_asking);
    assert!(output.contains("ok - a read-only key gets a console without write controls"));
}

#[test]
fn changes_made_elsewhere_reach_an_open_console_live() {
    let keys = keys();
    let mut server = Some(start(&keys, None, &[]));
    let output = browse(&mut server, &keys, &["live"], no_asking);
    assert!(output.contains("BUDGET live-update-p99="), "{output}");
}

/// Issue 40, on a fresh store: the first category made from the add-pet form, the API's field
/// messages in the staff's words, and finding pets and orders by name as one types (the
/// address keeps the search and the sort; the feed respects them).
#[test]
fn staff_find_pets_and_orders_by_name_as_they_type_and_create_the_first_category_on_the_spot() {
    let keys = keys();
    let mut server = Some(start(&keys, None, &[]));
    let output = browse(&mut server, &keys, &["search"], no_asking);
    assert!(output.contains("ok - an older search's answer never replaces a newer one"));
}

#[test]
fn the_console_resumes_the_feed_from_its_cursor_after_the_connection_drops() {
    let keys = keys();
    let mut server = Some(start(&keys, Some(free_addr()), &[]));
    browse(&mut server, &keys, &["resume"], restart);
}

#[test]
fn a_console_whose_feed_position_was_purged_lists_again() {
    let keys = keys();
    let mut server = Some(start(&keys, Some(free_addr()), &["--events-keep", "1s"]));
    browse(&mut server, &keys, &["expired"], restart);
}

#[test]
fn a_revoked_key_returns_its_console_to_sign_in() {
    let keys = keys();
    let mut server = Some(start(&keys, None, &[]));
    let file = keys.file.clone();
    browse(&mut server, &keys, &["revoked"], |what, server| {
        assert_eq!(what, "revoke", "the script asked for {what}");
        let args = ["keys", "revoke", "till", "--api-keys"];
        let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        args.push(file.as_os_str());
        let (code, _, stderr) = run(&args);
        assert_eq!(code, Some(0), "{stderr}");
        let server = server.as_ref().expect("a server");
        server.signal("HUP");
        server.wait_for_log("reload done", 1);
    });
}

#[test]
fn every_view_works_at_375_and_1280_px_light_and_dark_by_keyboard_and_passes_axe() {
    let keys = keys();
    let mut server = Some(start(&keys, None, &[]));
    browse(&mut server, &keys, &["access"], no_asking);
    for view in [
        "sign-in",
        "overview",
        "pets",
        "pet",
        "pet-held",
        "new-pet",
        "orders",
        "categories",
    ] {
        for width in [375, 1280] {
            let shot = root().join(format!("target/console-screenshots/{view}-{width}.png"));
            assert!(shot.is_file(), "no screenshot {}", shot.display());
        }
    }
}

#[test]
fn the_first_load_is_within_100_kb_and_its_time_to_interactive_is_printed() {
    let keys = keys();
    let mut server = Some(start(&keys, None, &[]));
    let output = browse(&mut server, &keys, &["budgets"], no_asking);
    assert!(output.contains("BUDGET first-load-bytes="), "{output}");
    assert!(output.contains("BUDGET time-to-interactive="), "{output}");
}
