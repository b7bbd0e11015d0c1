//! The README and docs/ say what they show: every `sh` block runs as written, in order, in one
//! bash, in a fresh directory laid out like a clone after `cargo build --release` (`certs/`,
//! and `target/release/petstore` being the binary under test), against a real server started
//! with the flags of the README's run command. Each command's output holds the lines the
//! document shows under it (`#   ` lines). A block whose first line is `# needs: …` is for
//! another machine (a server with the package, PostgreSQL, root): it must parse (`bash -n`),
//! and that line says what it needs. The only change to a command is the port: the server
//! listens on a free one, not 8443.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A `sh` block of a document: where it starts, and its lines.
struct Block {
    origin: String,
    lines: Vec<String>,
}

impl Block {
    fn needs(&self) -> Option<&str> {
        self.lines.first()?.strip_prefix("# needs:")
    }
}

/// One command of a block (its lines, continuations included) and the lines shown under it.
struct Step {
    origin: String,
    command: String,
    shown: Vec<String>,
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn sh_blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).expect("the document reads");
    let name = path
        .strip_prefix(repository())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in text.lines().enumerate() {
        match (&mut open, line.trim_start().starts_with("```")) {
            (None, true) if line.trim() == "```sh" => {
                open = Some(Block {
                    origin: format!("{name}:{}", n + 1),
                    lines: Vec::new(),
                });
            }
            (Some(_), true) => blocks.extend(open.take()),
            (Some(block), false) => block.lines.push(line.to_owned()),
            (None, _) => {}
        }
    }
    assert!(open.is_none(), "{name}: a sh block is not closed");
    blocks
}

/// Every document a newcomer reads: the README, then docs/ in name order.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repository().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    let mut all = vec![repository().join("README.md")];
    all.extend(docs);
    all
}

/// A block's commands. A command is a run of lines that are not comments, joined where a line
/// ends in `\` or a heredoc or function body is open; the `#   ` lines after it are what the
/// document shows of its output.
fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut pending = String::new();
    for line in &block.lines {
        if let Some(shown) = line.strip_prefix("#   ") {
            if let Some(step) = steps.last_mut() {
                step.shown.push(shown.trim().to_owned());
            }
            continue;
        }
        if pending.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        pending.push_str(line);
        pending.push('\n');
        if !line.ends_with('\\') {
            steps.push(Step {
                origin: block.origin.clone(),
                command: std::mem::take(&mut pending),
                shown: Vec::new(),
            });
        }
    }
    steps
}

/// The README's run command's flags, after `cargo run --release --`.
fn run_flags(readme: &[Block]) -> Vec<String> {
    let run = readme
        .iter()
        .flat_map(steps)
        .find(|step| step.command.contains("cargo run --release --"))
        .expect("the README gives a run command");
    let flags = run
        .command
        .split_once("cargo run --release --")
        .expect("checked above")
        .1
        .replace("\\\n", " ");
    flags.split_whitespace().map(str::to_owned).collect()
}

/// A directory laid out like a clone after a release build, with the binary under test.
fn clone_like() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(repository().join("certs"), dir.path().join("certs"))
        .expect("certs link");
    std::fs::create_dir_all(dir.path().join("target/release")).expect("target dir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_petstore"),
        dir.path().join("target/release/petstore"),
    )
    .expect("binary link");
    dir
}

/// The server as the README starts it, on a free port; returns it and the port.
fn start(dir: &Path, flags: &[String]) -> (Child, u16) {
    let mut child = Command::new(dir.join("target/release/petstore"))
        .args(flags)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let stderr = child.stderr.take().expect("piped");
    let (found, port) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let port = line
                .split_once("address=")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .and_then(|address| address.rsplit_once(':'))
                .and_then(|(_, port)| port.parse::<u16>().ok());
            if let (true, Some(port)) = (line.contains("listening on"), port) {
                let _ = found.send(port);
            }
        }
    });
    let port = port
        .recv_timeout(Duration::from_secs(30))
        .expect("the server says where it listens");
    (child, port)
}

#[test]
fn every_shell_block_of_the_readme_and_docs_runs_or_says_what_it_needs() {
    let readme = sh_blocks(&repository().join("README.md"));
    let flags = run_flags(&readme);
    let dir = clone_like();
    let (mut server, port) = start(dir.path(), &flags);

    let mut script = String::from("set -u\n");
    let mut run = Vec::new();
    for document in documents() {
        for block in sh_blocks(&document) {
            let text = block.lines.join("\n");
            if let Some(needs) = block.needs() {
                assert!(
                    !needs.trim().is_empty(),
                    "{}: say what it needs",
                    block.origin
                );
                let parsed = Command::new("bash")
                    .args(["-n", "-c", &text])
                    .status()
                    .expect("bash runs");
                assert!(parsed.success(), "{}: bash -n fails", block.origin);
                continue;
            }
            for step in steps(&block) {
                let command = step
                    .command
                    .replace("localhost:8443", &format!("localhost:{port}"))
                    .replace("127.0.0.1:8443", &format!("127.0.0.1:{port}"));
                let n = run.len();
                script.push_str(&format!(
                    "{{\n{command}}} > out/{n} 2>&1\necho $? > out/{n}.status\n"
                ));
                run.push(step);
            }
        }
    }
    assert!(run.len() > 20, "the curl session and the keys are run");
    std::fs::create_dir(dir.path().join("out")).expect("out dir");
    let bash = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .status()
        .expect("bash runs");
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let stopped = server.wait().expect("the server stops");
    assert!(bash.success(), "the script as a whole failed");
    for (n, step) in run.iter().enumerate() {
        let out = std::fs::read_to_string(dir.path().join(format!("out/{n}")))
            .unwrap_or_else(|_| panic!("{}: never ran:\n{}", step.origin, step.command));
        let status =
            std::fs::read_to_string(dir.path().join(format!("out/{n}.status"))).expect("a status");
        assert_eq!(
            status.trim(),
            "0",
            "{}: exit status of\n{}\noutput:\n{out}",
            step.origin,
            step.command
        );
        for shown in &step.shown {
            assert!(
                out.contains(shown.as_str()),
                "{}: the document shows {shown:?} for\n{}\nbut the output was:\n{out}",
                step.origin,
                step.command
            );
        }
    }
    assert!(stopped.success(), "the server stops cleanly: {stopped:?}");
}
