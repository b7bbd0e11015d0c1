//! A damaged redb file never takes the server down. Copies of two stores, one stopped cleanly
//! and one SIGKILLed under creates, are cut short, or overwritten with zeros or garbage over
//! their last pages, their middle or their first pages; on each the server either refuses to
//! start, with one line that names `petstore check` and the snapshot to restore, or serves,
//! every answer a success, a client error or a 503 with the Error body, and stops cleanly when
//! asked. `petstore check` finds the damage whenever the server refused the file or failed a
//! read of it; where it finds none, the server served every pet.

use std::path::Path;

use serde_json::Value;

use crate::support::{Client, Options, Server, create_many, create_until_broken};

const PAGE: usize = 4096;

/// How a copy is damaged.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Cut to this share of its length, in thousandths, and `less` bytes fewer.
    Cut { per_mille: usize, less: usize },
    /// `pages` pages of zeros from this share of its length on (1000: the last pages).
    Zeros { at_per_mille: usize, pages: usize },
    /// `pages` pages of garbage from there.
    Garbage { at_per_mille: usize, pages: usize },
}

const DAMAGES: [Damage; 10] = [
    Damage::Cut {
        per_mille: 500,
        less: 0,
    },
    Damage::Cut {
        per_mille: 1000,
        less: PAGE,
    },
    Damage::Cut {
        per_mille: 1000,
        less: 1000,
    },
    Damage::Zeros {
        at_per_mille: 1000,
        pages: 1,
    },
    Damage::Zeros {
        at_per_mille: 1000,
        pages: 16,
    },
    Damage::Garbage {
        at_per_mille: 1000,
        pages: 4,
    },
    Damage::Garbage {
        at_per_mille: 1000,
        pages: 64,
    },
    Damage::Zeros {
        at_per_mille: 500,
        pages: 8,
    },
    Damage::Garbage {
        at_per_mille: 250,
        pages: 8,
    },
    Damage::Garbage {
        at_per_mille: 0,
        pages: 3,
    },
];

impl Damage {
    fn apply(self, file: &[u8]) -> Vec<u8> {
        let mut bytes = file.to_vec();
        let page_at = |per_mille: usize, pages: usize| {
            let at = (file.len() * per_mille / 1000) / PAGE * PAGE;
            // "From the end": the last `pages` pages.
            let at = if per_mille == 1000 {
                file.len().saturating_sub(pages * PAGE)
            } else {
                at
            };
            // Never the header: a file whose first page is gone is no redb file at all.
            let at = at.max(PAGE);
            at..(at + pages * PAGE).min(file.len())
        };
        match self {
            Damage::Cut { per_mille, less } => bytes.truncate(file.len() * per_mille / 1000 - less),
            Damage::Zeros {
                at_per_mille,
                pages,
            } => bytes[page_at(at_per_mille, pages)].fill(0),
            Damage::Garbage {
                at_per_mille,
                pages,
            } => {
                let mut rng = crate::support::Rng(0x5eed ^ (at_per_mille * 31 + pages) as u64);
                for byte in &mut bytes[page_at(at_per_mille, pages)] {
                    *byte = rng.next() as u8;
                }
            }
        }
        bytes
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_file_is_refused_in_one_line_or_served_without_a_fault_and_check_finds_it() {
    let (clean, clean_pets) = stopped_store().await;
    let (killed, killed_log, killed_pets) = killed_store().await;
    let mut outcomes = Vec::new();
    for (base, file, log, pets) in [
        ("stopped", &clean, &Vec::new(), clean_pets),
        ("killed", &killed, &killed_log, killed_pets),
    ] {
        for damage in DAMAGES {
            let outcome = try_damaged(&damage.apply(file), log, pets).await;
            outcomes.push(format!("{base} {damage:?}: {outcome}"));
        }
    }
    // Then each page of the stopped store in turn, zeros over it alone: some are the pages a
    // start reads, some a read or a write meets later, some free.
    for page in 1..clean.len() / PAGE {
        let mut bytes = clean.clone();
        bytes[page * PAGE..(page + 1) * PAGE].fill(0);
        let outcome = try_damaged(&bytes, &Vec::new(), clean_pets).await;
        outcomes.push(format!("stopped, page {page} zeroed: {outcome}"));
    }
    // What happened to each copy, for the log: which were refused, which served.
    let outcomes = outcomes.join("\n");
    println!("{outcomes}");
    assert!(
        outcomes.contains("refused"),
        "no copy was refused:\n{outcomes}"
    );
    assert!(
        outcomes.contains("answers 503, check found damage: true"),
        "no damage got past the start to be met by a request:\n{outcomes}"
    );
}

/// A store of 300 pets, stopped cleanly: its file and how many pets it holds.
async fn stopped_store() -> (Vec<u8>, usize) {
    let server = Server::start();
    let statuses = ["available", "pending", "sold"];
    let ids = create_many(&server, 300, |i| Some(statuses[i % 3])).await;
    let stopped = server.stop();
    let file = std::fs::read(stopped.dir.path().join("pets.redb")).expect("the file");
    (file, ids.len())
}

/// A store SIGKILLed under creates from four clients: its file, the segments of the
/// write-ahead log beside it (name and bytes: the file's batches since its last checkpoint,
/// which the damage leaves alone), and how many pets it holds.
async fn killed_store() -> (Vec<u8>, Log, usize) {
    let server = Server::start();
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let writers = create_until_broken(&server, "killed", &acknowledged).await;
    server.wait_for_log("status=201", 200);
    let dir = server.kill();
    writers.join_all().await;
    let path = dir.path().join("pets.redb");
    let file = std::fs::read(&path).expect("the file");
    let log = std::fs::read_dir(dir.path().join("pets.redb-log"))
        .expect("the log beside a killed store")
        .map(|entry| {
            let entry = entry.expect("a segment");
            let bytes = std::fs::read(entry.path()).expect("a segment's bytes");
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    // The SIGKILL may have come after a commit and before its answer: count what the file
    // holds, served by a server on an undamaged copy.
    let server = Server::start_after_crash(dir);
    let pets = server.h2().await.list_all("/v1/pets?limit=100").await.len();
    assert!(pets >= acknowledged.lock().expect("lock").len());
    server.stop();
    (file, log, pets)
}

/// The segments of a write-ahead log: name and bytes.
type Log = Vec<(String, Vec<u8>)>;

/// Writes `log` beside the database file `db`, as the server keeps it.
fn put_log(db: &std::path::Path, log: &Log) {
    if log.is_empty() {
        return;
    }
    let mut dir = db.as_os_str().to_owned();
    dir.push("-log");
    std::fs::create_dir_all(&dir).expect("the log's directory");
    for (name, bytes) in log {
        std::fs::write(std::path::Path::new(&dir).join(name), bytes).expect("a segment");
    }
}

/// Starts a server on `bytes`, asks it everything, and checks its answers against what
/// `petstore check` says of the same bytes. Returns what happened, in a few words.
async fn try_damaged(bytes: &[u8], log: &Log, pets: usize) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("pets.redb");
    std::fs::write(&db, bytes).expect("the damaged copy");
    put_log(&db, log);
    let checked = dir.path().join("checked.redb");
    std::fs::write(&checked, bytes).expect("the copy to check");
    put_log(&checked, log);
    let (code, stdout, stderr) =
        crate::support::run(&["check".as_ref(), "--db".as_ref(), checked.as_os_str()]);
    let check_found_damage = code != Some(0);
    assert!(
        !stderr.contains("panicked") && code.is_some_and(|code| code <= 2),
        "check on a damaged file: {code:?}\n{stdout}\n{stderr}"
    );

    let server = match Server::try_start_in(dir, Options::default()) {
        Err(logs) => {
            assert_refused(&logs, &db);
            assert!(
                check_found_damage,
                "the server refused a file check passes:\n{logs}\n{stdout}"
            );
            return "refused".into();
        }
        Ok(server) => server,
    };
    let (served, faults) = ask_everything(&mut server.h2().await).await;
    let logs = server.stop().logs;
    assert!(!logs.contains("panicked"), "{logs}");
    if faults > 0 {
        assert!(
            check_found_damage,
            "{faults} answers were 503 on a file check passes:\n{stdout}"
        );
    }
    if !check_found_damage {
        assert_eq!(served, pets, "check passes, so every pet is served");
    }
    let faults = match faults {
        0 => "no".to_owned(),
        n => n.to_string(),
    };
    format!(
        "served {served} of {pets} pets, {faults} answers 503, check found damage: {check_found_damage}"
    )
}

/// A refusal at start: exit 1, with a last line that says what to do, and no panic.
fn assert_refused(logs: &str, db: &Path) {
    assert!(logs.ends_with("(exit: exit status: 1)"), "{logs}");
    assert!(!logs.contains("panicked"), "{logs}");
    let last = logs
        .lines()
        .rev()
        .nth(1)
        .expect("an error line before the exit");
    assert!(last.starts_with("error: "), "{logs}");
    // A file that is no store at all says so instead: `petstore check` has nothing to add.
    if !last.contains("not a redb") && !last.contains("magic number") {
        assert!(
            last.contains(&format!("petstore check --db {}", db.display()))
                && last.contains("snapshot"),
            "the refusal names the check and the snapshot: {last}"
        );
    }
}

/// Walks every page of pets, reads some by id, by status, the inventory and the feed, and
/// creates one. Returns the pets the walk served and how many answers were 503; asserts that
/// every answer is a success, a client error or a 503 with the Error body.
async fn ask_everything(client: &mut Client) -> (usize, usize) {
    let mut faults = 0;
    let mut served = 0;
    let mut answered = |reply: &crate::support::Reply, what: &str| -> bool {
        match reply.status {
            200..=299 => true,
            400..=499 => false,
            503 => {
                let body: Value = serde_json::from_slice(&reply.body).expect("an Error body");
                assert!(body["code"].is_string(), "{what}: {body}");
                faults += 1;
                false
            }
            other => panic!("{what}: {other} {:?}", reply.body),
        }
    };
    let mut next = Some("/v1/pets?limit=100".to_owned());
    while let Some(path) = next.take() {
        let reply = client.get(&path).await;
        if answered(&reply, &path) {
            served += reply.pets().len();
            next = reply.next_link();
        }
    }
    for path in [
        "/v1/pets/1",
        "/v1/pets/150",
        "/v1/pets?status=sold&limit=100",
        "/v1/store/inventory",
        "/v1/events?limit=100",
        "/v1/categories",
        "/healthz",
    ] {
        let reply = client.get(path).await;
        answered(&reply, path);
    }
    let created = client
        .post_json("/v1/pets", r#"{"name":"after","categoryId":1}"#)
        .await;
    answered(&created, "a create");
    (served, faults)
}
