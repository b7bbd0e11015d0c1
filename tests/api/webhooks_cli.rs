//! `petstore webhooks add | list | remove | enable | rotate` with the real binary: the secret
//! alone on standard output's first line, the file private when made and every other line
//! kept byte for byte, and the refusals an operator meets (an http:// URL, an unknown type, no
//! file named) said in one clear line, with nothing written.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

/// What the commands end their messages with: how a running server takes the edit.
const RELOAD_HINT: &str = "a running server takes it on reload: `systemctl reload petstore` \
                           (without systemd: `kill -HUP <pid>`, the pid of its `listening on` \
                           log line)";

/// Runs `petstore webhooks ARGS` on `file`, named by `PETSTORE_WEBHOOKS` as the server's unit
/// would, or by `--webhooks` when `by_flag`.
fn webhooks(file: &Path, by_flag: bool, args: &[&str]) -> (Option<i32>, String, String) {
    let named = ("--webhooks", "PETSTORE_WEBHOOKS");
    crate::support::run_on_file("webhooks", named, file, by_flag, args)
}

/// Runs a command expected to succeed and end its message with the reload hint; returns
/// standard output.
fn edit(file: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = webhooks(file, false, args);
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
    assert!(
        stderr.trim_end().ends_with(RELOAD_HINT),
        "{args:?}: {stderr}"
    );
    stdout
}

/// `add`: the secret alone on the first line, `id ep_…` on the second; returns both.
fn add(file: &Path, args: &[&str]) -> (String, String) {
    let stdout = edit(file, &[&["add"], args].concat());
    let lines: Vec<&str> = stdout.lines().collect();
    let [secret, id] = lines[..] else {
        panic!("two lines: {stdout:?}");
    };
    assert!(is_secret(secret), "{stdout:?}");
    let id = id.strip_prefix("id ").expect("the id line");
    assert!(id.starts_with("ep_") && id.len() == 11, "{stdout:?}");
    (secret.to_owned(), id.to_owned())
}

fn is_secret(text: &str) -> bool {
    text.strip_prefix("whsec_").is_some_and(|base64| {
        base64.len() == 44 && base64.ends_with('=') && !base64.contains(char::is_whitespace)
    })
}

/// The line of the file holding `id`.
fn line_of(file: &Path, id: &str) -> String {
    let text = std::fs::read_to_string(file).expect("read");
    text.lines()
        .find(|line| line.starts_with(id))
        .unwrap_or_else(|| panic!("no line for {id}:\n{text}"))
        .to_owned()
}

/// The secrets on `id`'s line, oldest first.
fn secrets_of(file: &Path, id: &str) -> Vec<String> {
    line_of(file, id)
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("secret="))
        .map(str::to_owned)
        .collect()
}

#[test]
fn add_prints_the_secret_alone_on_the_first_line_and_makes_the_file_private() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("webhooks");
    let (secret, id) = add(&file, &["https://shop.example/hooks"]);
    let meta = std::fs::metadata(&file).expect("made");
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        format!("{id} url=https://shop.example/hooks secret={secret}\n")
    );
    let (code, stdout, stderr) = webhooks(&file, true, &["list"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stdout.contains(&secret) && !stdout.contains("whsec_"),
        "{stdout}"
    );
}

#[test]
fn add_list_enable_rotate_finish_and_remove_keep_every_other_line_byte_for_byte() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("webhooks");
    // Someone else's hand-written file: comments, a blank line, CRLF, an endpoint of its own.
    let original = "# receivers, by hand\n\n\
                    ep_0000000a url=https://a.example/in secret=whsec_AAECAw==  # kept\r\n\
                    # end";
    std::fs::write(&file, original).expect("write");
    std::os::unix::fs::chown(&file, Some(4321), Some(4322)).expect("chown");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");

    let (first, shop) = add(
        &file,
        &[
            "https://shop.example/hooks",
            "--types",
            "pet.created,order.placed",
            "--label",
            "shop",
            "--from-start",
        ],
    );
    let (_, crm) = add(&file, &["https://crm.example:8443/petstore?source=pets"]);
    let text = std::fs::read_to_string(&file).expect("read");
    let added = text
        .strip_prefix(original)
        .expect("every line kept")
        .strip_prefix('\n')
        .expect("a line break after the last line");
    assert_eq!(
        added,
        format!(
            "{shop} url=https://shop.example/hooks secret={first} \
             types=pet.created,order.placed label=shop start=oldest\n\
             {crm} url=https://crm.example:8443/petstore?source=pets secret={}\n",
            secrets_of(&file, &crm)[0]
        )
    );
    let meta = std::fs::metadata(&file).expect("stat");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (4321, 4322, 0o640),
        "owner and mode kept"
    );

    let (code, listed, stderr) = webhooks(&file, true, &["list"]);
    assert_eq!(code, Some(0), "{stderr}");
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["ID", "LABEL", "URL", "TYPES", "SECRETS", "START"],
            vec![
                "ep_0000000a",
                "-",
                "https://a.example/in",
                "*",
                "1",
                "newest"
            ],
            vec![
                shop.as_str(),
                "shop",
                "https://shop.example/hooks",
                "pet.created,order.placed",
                "1",
                "oldest"
            ],
            vec![
                crm.as_str(),
                "-",
                "https://crm.example:8443/petstore?source=pets",
                "*",
                "1",
                "newest"
            ],
        ]
    );

    assert_eq!(edit(&file, &["enable", &shop]), "");
    assert!(line_of(&file, &shop).ends_with(" start=oldest resume=1"));
    edit(&file, &["enable", &shop]);
    assert!(line_of(&file, &shop).ends_with(" start=oldest resume=2"));

    let stdout = edit(&file, &["rotate", &shop]);
    let second = stdout.strip_suffix('\n').expect("one line");
    assert!(is_secret(second), "{stdout:?}");
    assert_eq!(
        secrets_of(&file, &shop),
        [first.as_str(), second],
        "oldest first"
    );
    assert_eq!(edit(&file, &["rotate", &shop, "--finish"]), "");
    assert_eq!(secrets_of(&file, &shop), [second]);
    assert!(
        line_of(&file, &shop).ends_with(" label=shop start=oldest resume=2"),
        "the rest of the line is kept"
    );

    // The hand-written line, rewritten, keeps its comment and its CRLF.
    edit(&file, &["enable", "ep_0000000a"]);
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(
        text.contains(
            "\nep_0000000a url=https://a.example/in secret=whsec_AAECAw== resume=1  # kept\r\n"
        ),
        "{text:?}"
    );

    edit(&file, &["remove", &shop]);
    edit(&file, &["remove", &crm]);
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        format!("{}\n", original.replace("== ", "== resume=1 "))
    );
    let (code, _, stderr) = webhooks(&file, true, &["remove", &crm]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr,
        format!(
            "error: {}: no endpoint has the id {crm} (`petstore webhooks list` shows them)\n",
            file.display()
        )
    );
}

#[test]
fn an_http_url_is_refused_with_a_clear_message_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("webhooks");
    let (code, stdout, stderr) = webhooks(&file, true, &["add", "http://shop.example/hooks"]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert_eq!(
        stderr,
        "error: URL http://shop.example/hooks: http:// is refused: events go to receivers over \
         https:// only, so that no one on the way reads or replays them\n"
    );
    for (url, says) in [
        (
            "https://user:pw@shop.example/",
            "a user or password in the URL",
        ),
        ("https://shop.example/#hooks", "no fragment"),
        (
            "shop.example/hooks",
            "not a URL (expected https://HOST/PATH)",
        ),
        ("/hooks", "not an absolute URL: expected https://HOST/PATH"),
    ] {
        let (code, stdout, stderr) = webhooks(&file, true, &["add", url]);
        assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
        assert!(stderr.contains(says), "{url}: {stderr}");
    }
    assert!(!file.exists(), "no file was made");
}

#[test]
fn an_unknown_type_is_refused_naming_it_and_the_known_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("webhooks");
    let (code, stdout, stderr) = webhooks(
        &file,
        false,
        &[
            "add",
            "https://shop.example/",
            "--types",
            "pet.created,pet.sold",
        ],
    );
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert_eq!(
        stderr,
        "error: --types: unknown event type \"pet.sold\"; the types are pet.created, \
         pet.updated, pet.deleted, order.placed, order.completed, order.cancelled, \
         order.expired, category.created, category.updated, category.deleted\n"
    );
    assert!(!file.exists(), "no file was made");
}

#[test]
fn a_command_without_a_file_says_how_to_name_one() {
    let output = Command::new(env!("CARGO_BIN_EXE_petstore"))
        .args(["webhooks", "list"])
        .env_remove("PETSTORE_WEBHOOKS")
        .stdin(Stdio::null())
        .output()
        .expect("the petstore binary runs");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: which webhooks file? give --webhooks FILE or set PETSTORE_WEBHOOKS, as for the \
         server\n"
    );
}

#[test]
fn a_broken_line_stops_every_edit_and_names_the_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("webhooks");
    let broken =
        "# mine\nep_0000000a url=https://a.example/ secret=whsec_AAECAw== tpyes=pet.created\n";
    std::fs::write(&file, broken).expect("write");
    let (code, stdout, stderr) = webhooks(&file, true, &["add", "https://b.example/"]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: {}, line 2: fix it by hand first: tpyes= is not a word of an endpoint line",
            file.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&file).expect("read"), broken);
}

/// The shipped drop-in `pets-webhooks.conf`: its start copies /etc/petstore/webhooks where the
/// server reads it, and its reload copies both files and signals, so `webhooks add` on the
/// operator's file and `systemctl reload petstore` put the new endpoint in force (systemd is
/// not PID 1 on the test machines: the unit's lines are run as it would run them).
#[test]
fn the_drop_ins_reload_takes_an_endpoint_added_to_the_operator_s_file() {
    use crate::support::{Options, Server, cert, run_unit_commands, unit_commands};
    let dir = tempfile::tempdir().expect("temp dir");
    let etc_keys = dir.path().join("etc-api-keys");
    std::fs::copy(cert("dev-keys.txt"), &etc_keys).expect("the operator's keys file");
    let etc_webhooks = dir.path().join("etc-webhooks");
    add(&etc_webhooks, &["https://127.0.0.1:9/first"]);
    let runtime = dir.path().join("run");
    std::fs::create_dir_all(runtime.join("petstore")).expect("RuntimeDirectory=");
    let commands = |file: &str, kind: &str, pid: u32| {
        unit_commands(
            file,
            kind,
            &[
                ("%t", runtime.display().to_string()),
                ("/etc/petstore/api-keys", etc_keys.display().to_string()),
                ("/etc/petstore/webhooks", etc_webhooks.display().to_string()),
                ("$MAINPID", pid.to_string()),
            ],
        )
    };
    run_unit_commands(&commands("pets.service", "ExecStartPre", 0));
    run_unit_commands(&commands("pets-webhooks.conf", "ExecStartPre", 0));
    let environment =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("pets-webhooks.conf"))
            .expect("the drop-in");
    let webhooks_path = environment
        .lines()
        .find_map(|line| line.strip_prefix("Environment=PETSTORE_WEBHOOKS="))
        .expect("the drop-in sets PETSTORE_WEBHOOKS")
        .replace("%t", &runtime.display().to_string());
    let server = Server::start_with(Options {
        api_keys: runtime.join("petstore/api-keys"),
        env: vec![("PETSTORE_WEBHOOKS".into(), webhooks_path)],
        ..Options::default()
    });
    server.wait_for_log("webhooks loaded endpoints=1", 1);

    add(&etc_webhooks, &["https://127.0.0.1:9/second"]);
    run_unit_commands(&commands("pets-webhooks.conf", "ExecReload", server.pid()));
    server.wait_for_log("reload done", 1);
    let logs = server.logs();
    assert!(
        logs.contains("webhooks reloaded endpoints=2"),
        "the reload took the operator's new endpoint: {logs}"
    );
    assert!(
        logs.contains("keys_ok=true"),
        "the keys were copied too: {logs}"
    );

    // An event for both endpoints, at a loopback address the server refuses to reach without
    // --webhooks-allow-private: each retries, and `list --db` shows why.
    let runtime_tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime_tokio.block_on(async {
        let mut client = server.h1().await;
        client
            .create(r#"{"name":"Rex","photoUrls":[],"categoryId":1}"#)
            .await;
    });
    server.wait_for_log("webhook delivery failed", 2);
    let logs = server.logs();
    assert!(
        logs.contains(
            "a loopback, private or link-local address, refused without --webhooks-allow-private"
        ),
        "{logs}"
    );
    let db = server.db_path();
    let list = || {
        webhooks(
            &etc_webhooks,
            false,
            &["list", "--db", &db.display().to_string()],
        )
    };
    let retrying = |stdout: &str| {
        let lines: Vec<&str> = stdout.lines().collect();
        lines.len() == 3
            && lines[0].contains("STATE")
            && lines[0].contains("BEHIND")
            && lines[1..].iter().all(|line| {
                line.contains("retrying since")
                    && line.contains("refused without --webhooks-allow-private")
                    && line.ends_with("1 events")
            })
    };
    // Beside the running server, which holds the file: its status file, a few seconds old.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (code, stdout, stderr) = list();
        if code == Some(0) && retrying(&stdout) {
            assert!(
                stderr.contains("as the running server last wrote it"),
                "{stderr}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{stdout}{stderr}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // With the server stopped, from the file itself.
    let stopped = server.stop();
    let (code, stdout, stderr) = list();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(retrying(&stdout), "{stdout}");
    assert!(!stderr.contains("as the running server"), "{stderr}");
    drop(stopped);
}
