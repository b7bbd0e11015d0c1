//! Disk faults, caused for real against the real binary: one `pwrite64` or `fdatasync` on
//! the store's files (`pets.redb` and its write-ahead log) that fails (strace's fault
//! injection, limited to those files), a failure on every
//! 40th write under 16 writers, a full ext4 file system on a loop device, a start on a full
//! disk, and a write-back failure the page cache hides, followed by a power cut. Each asserts
//! the store's promise (`Ledger`, `assert_served`): no acknowledged write is lost, live or after
//! a restart; a write refused `unavailable` never shows up, one answered `outcome_unknown` shows
//! up whole or not at all; no id is given twice; reads go on; writes resume without a restart;
//! `petstore check` finds the file clean. A missing tool fails the test: nothing is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::support::{Client, Options, Protocol, Reply, Server, Stopped, run};

/// How long a writer's writes may go on being refused after a fault has passed: the server
/// reopens its file at most once a second, so this is many reopens.
const RESUME_DEADLINE: Duration = Duration::from_secs(30);
/// The pause between two writes while the store refuses them (bounded by `RESUME_DEADLINE`).
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Writes each writer makes, at most, waiting for an injected fault to bite.
const MAX_WRITES_BEFORE_FAULT: usize = 400;
const STATUSES: [&str; 3] = ["available", "pending", "sold"];

#[tokio::test(flavor = "multi_thread")]
async fn an_enospc_on_one_pwrite_during_creates_loses_no_acknowledged_write_and_tears_nothing() {
    one_fault("pwrite64:error=ENOSPC:when=40", Mix::Creates, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eio_on_one_pwrite_during_creates_loses_no_acknowledged_write_and_tears_nothing() {
    one_fault("pwrite64:error=EIO:when=60", Mix::Creates, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eio_on_fdatasync_during_creates_loses_no_acknowledged_write_and_tears_nothing() {
    one_fault("fdatasync:error=EIO:when=10", Mix::Creates, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eio_on_fdatasync_during_patches_loses_no_acknowledged_write_and_tears_nothing() {
    one_fault("fdatasync:error=EIO:when=10", Mix::Patches, 5).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eio_on_fdatasync_during_deletes_loses_no_acknowledged_write_and_tears_nothing() {
    one_fault("fdatasync:error=EIO:when=10", Mix::Deletes, 40).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eio_on_fdatasync_during_keyed_creates_lets_a_retry_with_the_same_key_get_the_truth() {
    // Two failed syncs of the writer's: the 10th, a commit's first (its pages), so the batch is
    // not stored; and the 17th, the second (its header) of the second commit after the reopen
    // (which syncs three times), so the batch is in the file but its writes are answered
    // before a reopen could tell: outcome_unknown, which a retry must resolve.
    let tally = one_fault("fdatasync:error=EIO:when=10..17+7", Mix::KeyedCreates, 0).await;
    assert!(
        tally.retried_in_doubt > 0,
        "no keyed create answered outcome_unknown was sent again: {tally:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_enospc_on_every_40th_pwrite_under_16_writers_loses_no_acknowledged_write_live_or_after_a_restart()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("pets.redb");
    let workload = Workload::new(16);
    set_up(&db, &workload, 0).await;
    let traced = Traced::start(&db, "pwrite64:error=ENOSPC:when=50+40");
    workload
        .run_traced(
            &traced,
            Mix::CreatesAndPatches,
            Phase::ThroughFault {
                max_writes: MAX_WRITES_BEFORE_FAULT,
                acknowledged: 8,
            },
        )
        .await;
    let mut ledger = workload.ledger.lock().await;
    assert_promise(&mut traced.server().h2().await, &mut ledger).await;
    traced.stop();
    assert_checks_clean(&db);
    let server = Server::start_with(plain(&db));
    assert_promise(&mut server.h2().await, &mut ledger).await;
    server.stop();
    assert_checks_clean(&db);
    eprintln!("every 40th pwrite64 failed: {:?}", ledger.tally);
}

/// Reads go on while writes fail: a write whose `pwrite64` fails and then the reopen after it,
/// whose own `pwrite64` fails too, or every 25th `pwrite64` failing under a writer. Every read
/// of a pet, of a page and of the inventory meanwhile is answered 200 (waiting, at most a
/// second, for the file to be opened again), never 503, while the writes get their 503s.
#[tokio::test(flavor = "multi_thread")]
async fn reads_go_on_while_a_write_and_the_reopen_after_it_fail() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    for inject in [
        "pwrite64:error=ENOSPC:when=20..21",
        "pwrite64:error=EIO:when=20+25",
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("pets.redb");
        let server = Server::start_with(plain(&db));
        let ids = Arc::new(crate::support::create_many(&server, 200, |_| None).await);
        server.stop();
        let traced = Traced::start(&db, inject);
        let done = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let mut writer = traced.server().h2().await;
        let writes = {
            let (done, refused) = (Arc::clone(&done), Arc::clone(&refused));
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    let reply = writer
                        .post_json("/v1/pets", r#"{"name":"w","categoryId":1}"#)
                        .await;
                    match reply.status {
                        201 => {}
                        503 => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                        other => panic!("a create during the faults: {other} {:?}", reply.body),
                    }
                }
            })
        };
        let mut readers = tokio::task::JoinSet::new();
        for reader in 0..2_u64 {
            let mut client = traced.server().h1().await;
            let (done, ids) = (Arc::clone(&done), Arc::clone(&ids));
            readers.spawn(async move {
                let mut rng = crate::support::Rng(reader + 7);
                let mut reads = 0;
                while !done.load(Ordering::Relaxed) {
                    let id = ids[rng.below(ids.len())];
                    for path in [
                        format!("/v1/pets/{id}"),
                        format!("/v1/pets?limit={}", 1 + rng.below(100)),
                        "/v1/store/inventory".to_owned(),
                    ] {
                        let reply = client.get(&path).await;
                        assert_eq!(
                            reply.status, 200,
                            "GET {path} during the faults: {:?}",
                            reply.body
                        );
                        reads += 1;
                    }
                }
                reads
            });
        }
        let began = Instant::now();
        while refused.load(Ordering::Relaxed) == 0 && began.elapsed() < RESUME_DEADLINE {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        // Reads go on a little longer, through the reopens the faults cause.
        tokio::time::sleep(Duration::from_secs(1)).await;
        done.store(true, Ordering::Relaxed);
        writes.await.expect("the writer");
        let reads: usize = readers.join_all().await.into_iter().sum();
        assert!(
            refused.load(Ordering::Relaxed) > 0,
            "{inject}: no write was refused, so the fault did not bite"
        );
        eprintln!(
            "{inject}: {reads} reads, all 200, while {} writes got 503",
            refused.load(Ordering::Relaxed)
        );
        traced.stop();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_file_system_refuses_writes_with_503_serves_reads_and_takes_writes_again_once_space_is_freed()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk = Mounted::ext4(
        &dir.path().join("small.img"),
        "24M",
        &dir.path().join("mnt"),
        false,
    );
    let db = disk.point.join("pets.redb");
    let filler = disk.point.join("filler");
    let workload = Workload::new(4);
    let server = Server::start_with(plain(&db));
    workload
        .run(&server, Mix::Creates, Phase::UntilAcknowledged(5))
        .await;
    fill(&filler);
    workload
        .run(
            &server,
            Mix::BigCreates,
            Phase::UntilRefused {
                max_writes: MAX_WRITES_BEFORE_FAULT,
            },
        )
        .await;
    let mut client = server.h2().await;
    assert_served(
        &mut client,
        &mut *workload.ledger.lock().await,
        Check::DuringFault,
    )
    .await;

    free(&filler);
    workload
        .run(&server, Mix::BigCreates, Phase::UntilAcknowledged(5))
        .await;
    let mut ledger = workload.ledger.lock().await;
    assert_promise(&mut client, &mut ledger).await;
    let server = server.restart();
    assert_promise(&mut server.h2().await, &mut ledger).await;
    server.stop();
    assert_checks_clean(&db);
    eprintln!("full file system: {:?}", ledger.tally);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_started_on_a_full_disk_serves_reads_and_takes_writes_once_space_is_freed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk = Mounted::ext4(
        &dir.path().join("small.img"),
        "24M",
        &dir.path().join("mnt"),
        false,
    );
    let db = disk.point.join("pets.redb");
    let filler = disk.point.join("filler");
    let workload = Workload::new(4);
    let server = Server::start_with(plain(&db));
    workload
        .run(
            &server,
            Mix::CreatesAndPatches,
            Phase::UntilAcknowledged(10),
        )
        .await;
    server.stop();
    fill(&filler);

    let server = Server::start_with(plain(&db));
    let mut client = server.h2().await;
    assert_served(
        &mut client,
        &mut *workload.ledger.lock().await,
        Check::Settled,
    )
    .await;
    let before = workload.ledger.lock().await.tally.acknowledged;
    workload
        .run(
            &server,
            Mix::BigCreates,
            Phase::UntilRefused {
                max_writes: MAX_WRITES_BEFORE_FAULT,
            },
        )
        .await;
    let acknowledged_while_full = workload.ledger.lock().await.tally.acknowledged - before;
    assert_served(
        &mut client,
        &mut *workload.ledger.lock().await,
        Check::DuringFault,
    )
    .await;

    free(&filler);
    workload
        .run(&server, Mix::BigCreates, Phase::UntilAcknowledged(5))
        .await;
    let mut ledger = workload.ledger.lock().await;
    assert_promise(&mut client, &mut ledger).await;
    let server = server.restart();
    assert_promise(&mut server.h2().await, &mut ledger).await;
    server.stop();
    assert_checks_clean(&db);
    eprintln!(
        "start on a full disk: {acknowledged_while_full} creates acknowledged before the first \
         503; {:?}",
        ledger.tally
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_back_failure_then_a_power_cut_loses_no_acknowledged_write_and_leaves_a_clean_file()
{
    need("fallocate", "util-linux");
    need("filefrag", "e2fsprogs");
    let dir = tempfile::tempdir().expect("temp dir");
    // The device's own medium: a small tmpfs, which can run out of room under a sparse file.
    let medium = Mounted::tmpfs(&dir.path().join("medium"), "40m");
    let backing = medium.point.join("disk.img");
    let disk = Mounted::ext4(&backing, "32M", &dir.path().join("mnt"), true);
    let db = disk.point.join("pets.redb");
    let workload = Workload::new(4);
    let server = Server::start_with(plain(&db));
    workload
        .run(
            &server,
            Mix::CreatesAndPatches,
            Phase::UntilAcknowledged(10),
        )
        .await;

    // The store's blocks that hold only zeros (space made ready for the next writes) become
    // holes in the backing file, and the medium fills up: the next write-back there fails
    // (the kernel logs "Buffer I/O error"; fdatasync returns ENOSPC, the loop device's error
    // for a medium out of room), while the page cache keeps what the store wrote.
    dig_holes_under(&disk.point, &backing);
    fill(&medium.point.join("filler"));
    workload
        .run(
            &server,
            Mix::CreatesAndPatches,
            Phase::UntilRefused {
                max_writes: MAX_WRITES_BEFORE_FAULT,
            },
        )
        .await;
    let at_fault = workload.ledger.lock().await.tally;
    workload
        .run(&server, Mix::CreatesAndPatches, Phase::Writes(10))
        .await;
    let while_refusing = workload.ledger.lock().await.tally;
    free(&medium.point.join("filler"));
    workload
        .run(
            &server,
            Mix::CreatesAndPatches,
            Phase::UntilAcknowledged(10),
        )
        .await;

    // The power cut: the process dies, and the disk holds what reached the device.
    drop(server.kill());
    let copy = dir.path().join("after-the-cut.img");
    sh(
        "cp",
        &["--sparse=always", path_str(&backing), path_str(&copy)],
    );
    let after_cut = Mounted::existing_ext4(&copy, &dir.path().join("after-the-cut"));
    let db = after_cut.point.join("pets.redb");
    let server = Server::start_with(plain(&db));
    let mut ledger = workload.ledger.lock().await;
    assert_promise(&mut server.h2().await, &mut ledger).await;
    server.stop();
    assert_checks_clean(&db);
    eprintln!(
        "write-back failure, then a power cut: {} writes acknowledged after the fault ({} while \
         the medium was still full); {:?}",
        ledger.tally.acknowledged - at_fault.acknowledged,
        while_refusing.acknowledged - at_fault.acknowledged,
        ledger.tally
    );
}

/// One fault injected by strace into the database file, under four writers doing `mix`;
/// then the promise, live, after the server stops and after a restart. The file and `setup`
/// pets per writer are made first by a server of its own, so that the faulty server's start
/// makes few writes: strace counts them too, for the thread that opens the file.
async fn one_fault(inject: &str, mix: Mix, setup: usize) -> Tally {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("pets.redb");
    let workload = Workload::new(4);
    set_up(&db, &workload, setup).await;
    let traced = Traced::start(&db, inject);
    workload
        .run_traced(
            &traced,
            mix,
            Phase::ThroughFault {
                max_writes: MAX_WRITES_BEFORE_FAULT,
                acknowledged: 5,
            },
        )
        .await;
    let mut ledger = workload.ledger.lock().await;
    assert_promise(&mut traced.server().h2().await, &mut ledger).await;
    traced.stop();
    assert_checks_clean(&db);
    let server = Server::start_with(plain(&db));
    assert_promise(&mut server.h2().await, &mut ledger).await;
    server.stop();
    assert_checks_clean(&db);
    eprintln!("{inject} during {mix:?}: {:?}", ledger.tally);
    ledger.tally
}

/// Makes the database file at `db` with a server of its own, and `per_writer` pets of each
/// writer's in it.
async fn set_up(db: &Path, workload: &Workload, per_writer: usize) {
    let server = Server::start_with(plain(db));
    workload
        .run(&server, Mix::Creates, Phase::UntilAcknowledged(per_writer))
        .await;
    server.stop();
}

// ---- What the store promises, and what the test knows of it --------------------------------

/// One state a pet may be served in: its JSON and its ETag.
#[derive(Clone, Debug, PartialEq)]
struct Version {
    json: Value,
    etag: String,
}

impl Version {
    fn of(reply: &Reply) -> Version {
        Version {
            json: reply.json(),
            etag: reply.etag().to_owned(),
        }
    }

    /// The version a merge patch would make of this one: the next revision.
    fn patched(&self, patch: &Value) -> Version {
        let mut json = self.json.clone();
        let object = json.as_object_mut().expect("a pet is an object");
        for (member, value) in patch.as_object().expect("a patch is an object") {
            match value {
                // RFC 7396: null removes the member.
                Value::Null => object.remove(member),
                value => object.insert(member.clone(), value.clone()),
            };
        }
        let (id, revision) = self
            .etag
            .trim_matches('"')
            .split_once('.')
            .expect("an ETag of the form \"id.revision\"");
        let revision: u64 = revision.parse().expect("a revision");
        Version {
            json,
            etag: format!("\"{id}.{}\"", revision + 1),
        }
    }
}

/// What a 503 said of the write it refused.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Refusal {
    /// `unavailable`: nothing of the write was stored.
    Unavailable,
    /// `outcome_unknown`: the commit failed; the write is stored whole or not at all.
    OutcomeUnknown,
}

/// Counts of what the writes got.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    acknowledged: u64,
    unavailable: u64,
    outcome_unknown: u64,
    /// Acknowledged writes sent after the first 503.
    acknowledged_after_fault: u64,
    /// Keyed creates refused and sent again with their key.
    retried: u64,
    /// Of those, the ones refused `outcome_unknown`.
    retried_in_doubt: u64,
    /// Of those, the retries that replayed a pet the refused create had stored.
    replayed: u64,
}

/// Everything the test knows the store may hold: built from every answer, and narrowed by what
/// is served once the store has decided (`Check::Settled`).
#[derive(Default)]
struct Ledger {
    /// Every pet an answer gave an id, with each state it may be in now (`None`: deleted). One
    /// state, unless a write of it got `outcome_unknown` since the last settled check.
    pets: BTreeMap<i64, Vec<Option<Version>>>,
    /// Creates answered `outcome_unknown`, by name (each create has its own): the pet each
    /// would be, without its id.
    in_doubt: BTreeMap<String, Value>,
    /// Names no pet may have: creates refused `unavailable`, and creates in doubt that a
    /// settled check did not find.
    never: BTreeSet<String>,
    /// The highest id acknowledged or served so far.
    highest_id: i64,
    /// When the first write was refused, and which.
    first_fault: Option<(Instant, String)>,
    tally: Tally,
    /// Every write and its answer, for failure messages.
    history: Vec<String>,
    probes: usize,
}

impl Ledger {
    fn note(&mut self, line: String) {
        self.history.push(line);
    }

    /// Every write of pet `id` or of a create named `name`, and its answer.
    fn story(&self, id: Option<i64>, name: Option<&str>) -> String {
        let needles: Vec<String> = id
            .map(|id| format!("#{id} "))
            .into_iter()
            .chain(name.map(|name| format!("'{}'", tag(name))))
            .collect();
        let lines: Vec<&str> = self
            .history
            .iter()
            .filter(|line| needles.iter().any(|needle| line.contains(needle)))
            .map(String::as_str)
            .collect();
        if lines.is_empty() {
            "(no answer about it)".into()
        } else {
            lines.join("\n")
        }
    }

    fn refused(&mut self, what: &str, refusal: Refusal) {
        match refusal {
            Refusal::Unavailable => self.tally.unavailable += 1,
            Refusal::OutcomeUnknown => self.tally.outcome_unknown += 1,
        }
        if self.first_fault.is_none() {
            self.first_fault = Some((Instant::now(), what.to_owned()));
        }
        self.note(format!("{what} -> 503 {refusal:?}"));
    }

    fn acknowledged(&mut self, after_fault: bool) {
        self.tally.acknowledged += 1;
        self.tally.acknowledged_after_fault += u64::from(after_fault);
    }

    /// A create answered 201 with `reply`: a new id, and the pet as sent.
    fn created(&mut self, what: &str, body: &Value, reply: &Reply, after_fault: bool) -> i64 {
        let version = Version::of(reply);
        let id = version.json["id"].as_i64().expect("an integer id");
        self.note(format!(
            "{what} -> 201 #{id} {} {}",
            version.etag, version.json
        ));
        let mut expected = body.clone();
        expected["id"] = id.into();
        assert_eq!(
            version,
            Version {
                json: expected,
                etag: format!("\"{id}.1\"")
            },
            "{what}: the 201 is not the pet sent"
        );
        assert!(
            !self.pets.contains_key(&id),
            "{what}: id {id} given twice:\n{}",
            self.story(Some(id), None)
        );
        self.pets.insert(id, vec![Some(version)]);
        self.highest_id = self.highest_id.max(id);
        self.acknowledged(after_fault);
        id
    }

    /// A patch of pet `id` answered 200 with `reply`: the pet's next revision, whichever state
    /// it was in.
    fn patched(&mut self, what: &str, id: i64, patch: &Value, reply: &Reply, after_fault: bool) {
        let version = Version::of(reply);
        self.note(format!("{what} -> 200 {} {}", version.etag, version.json));
        let states = self.pets.get_mut(&id).expect("a pet this writer knows");
        assert!(
            states
                .iter()
                .flatten()
                .any(|state| state.patched(patch) == version),
            "{what}: the 200 is no state of the pet patched:\n{}",
            self.story(Some(id), None)
        );
        *states = vec![Some(version)];
        self.acknowledged(after_fault);
    }

    /// A write of pet `id` answered `outcome_unknown`: it may be in the state `change` makes
    /// of any state it was in, too.
    fn in_doubt(&mut self, id: i64, change: impl Fn(&Version) -> Option<Version>) {
        let states = self.pets.get_mut(&id).expect("a pet this writer knows");
        let more: Vec<Option<Version>> = states.iter().flatten().map(&change).collect();
        for state in more {
            if !states.contains(&state) {
                states.push(state);
            }
        }
    }

    /// The pet's version, if it is certainly in one.
    fn certain(&self, id: i64) -> Option<&Version> {
        match self.pets.get(&id).map(Vec::as_slice) {
            Some([Some(version)]) => Some(version),
            _ => None,
        }
    }

    /// Whether the pet exists in every state it may be in.
    fn surely_exists(&self, id: i64) -> bool {
        self.pets
            .get(&id)
            .is_some_and(|states| states.iter().all(Option::is_some))
    }

    /// Whether `pet`, as served, is a state the writes allow.
    fn allows(&self, pet: &Value) -> bool {
        let id = pet["id"].as_i64().expect("an integer id");
        match self.pets.get(&id) {
            Some(states) => states.iter().flatten().any(|state| &state.json == pet),
            None => self.in_doubt.get(pet_name(pet)).is_some_and(|body| {
                let mut expected = body.clone();
                expected["id"] = id.into();
                &expected == pet
            }),
        }
    }
}

/// When a check runs: during a fault the store may not have decided on the writes in doubt
/// yet; once writes work again (the file reopened) or after a restart, it has.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    DuringFault,
    Settled,
}

/// Asserts the promise on what the server serves now, with no write in flight: every page of
/// the list and of each status; every pet once, each as its acknowledged writes (or one in
/// doubt) left it, with that ETag; no pet never acknowledged; every acknowledged pet there.
/// Settled, the ledger then holds what was served: a write in doubt is decided for good.
async fn assert_served(client: &mut Client, ledger: &mut Ledger, check: Check) {
    let walk = client.list_all("/v1/pets").await;
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for pet in &walk {
        let id = pet["id"].as_i64().expect("an integer id");
        let name = pet_name(pet);
        assert!(
            ids.insert(id),
            "pet #{id} is listed twice: {pet}\n{}",
            ledger.story(Some(id), None)
        );
        assert!(
            names.insert(name.to_owned()),
            "two pets are named '{}': a create stored twice\n{}",
            tag(name),
            ledger.story(None, Some(name))
        );
        assert!(
            !ledger.never.contains(name),
            "pet #{id} '{}' is served, but its create was refused or found not stored: {pet}\n{}",
            tag(name),
            ledger.story(Some(id), Some(name))
        );
        assert!(
            ledger.allows(pet),
            "pet #{id} is served as no acknowledged write (or one in doubt) left it: {pet}\n{}",
            ledger.story(Some(id), Some(name))
        );
        let reply = client.get(&format!("/v1/pets/{id}")).await;
        assert_eq!(reply.status, 200, "GET #{id}: {:?}", reply.body);
        let served = Version::of(&reply);
        assert_eq!(&served.json, pet, "GET #{id} and the list disagree");
        let known = match ledger.pets.get(&id) {
            Some(states) => states.contains(&Some(served.clone())),
            None => served.etag == format!("\"{id}.1\""),
        };
        assert!(
            known,
            "pet #{id} has ETag {}, which none of its writes returned or could have made\n{}",
            served.etag,
            ledger.story(Some(id), Some(name))
        );
        if check == Check::Settled {
            if ledger.in_doubt.remove(name).is_some() {
                ledger.note(format!("'{}' found stored as #{id} ", tag(name)));
            }
            ledger.pets.insert(id, vec![Some(served)]);
        }
        ledger.highest_id = ledger.highest_id.max(id);
    }
    let missing: Vec<i64> = ledger
        .pets
        .keys()
        .copied()
        .filter(|id| !ids.contains(id))
        .collect();
    for id in missing {
        assert!(
            ledger.pets[&id].contains(&None),
            "acknowledged pet #{id} is lost\n{}",
            ledger.story(Some(id), None)
        );
        let reply = client.get(&format!("/v1/pets/{id}")).await;
        assert_eq!(
            reply.status, 404,
            "GET #{id} of a pet not listed: {:?}",
            reply.body
        );
        if check == Check::Settled {
            ledger.pets.insert(id, vec![None]);
        }
    }
    if check == Check::Settled {
        let absent = std::mem::take(&mut ledger.in_doubt);
        ledger.never.extend(absent.into_keys());
    }
    let certain =
        ledger.in_doubt.is_empty() && ledger.pets.values().all(|states| states.len() == 1);
    for status in STATUSES {
        let listed = client.list_all(&format!("/v1/pets?status={status}")).await;
        let mut ids = BTreeSet::new();
        for pet in &listed {
            let id = pet["id"].as_i64().expect("an integer id");
            assert!(ids.insert(id), "pet #{id} is listed twice under {status}");
            assert_eq!(pet["status"], status, "listed under {status}: {pet}");
            assert!(
                ledger.allows(pet),
                "listed under {status} as no write left it: {pet}\n{}",
                ledger.story(Some(id), Some(pet_name(pet)))
            );
        }
        // During a fault, a reopen between the walks may decide a write in doubt.
        if certain {
            let expected: Vec<&Value> = walk.iter().filter(|pet| pet["status"] == status).collect();
            assert_eq!(
                listed.iter().collect::<Vec<_>>(),
                expected,
                "the {status} list is not the pets of the full list with that status"
            );
        }
    }
}

/// A create now gets an id above every id acknowledged or served so far.
async fn assert_next_id_is_new(client: &mut Client, ledger: &mut Ledger) {
    ledger.probes += 1;
    let body = json!({"name": format!("probe-{}", ledger.probes), "categoryId": 0});
    let what = format!("probe create '{}'", tag(pet_name(&body)));
    // Under a fault that goes on (strace failing every 40th write) the probe may be refused:
    // it carries a key, so its retries learn the truth of a refusal in doubt, and the 201
    // that ends them is the one create it made.
    let key = format!("probe-{}", ledger.probes);
    let deadline = Instant::now() + Duration::from_secs(30);
    let reply = loop {
        let reply = crate::idempotency::post_keyed(client, &key, &body.to_string()).await;
        if reply.status != 503 || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(reply.status, 201, "{what}: {:?}", reply.body);
    let highest = ledger.highest_id;
    let id = ledger.created(&what, &body, &reply, true);
    assert!(
        id > highest,
        "{what} got id {id}, not above {highest}, the highest acknowledged or served:\n{}",
        ledger.story(Some(id), None)
    );
}

/// The whole promise, once the store has decided: what is served, then a fresh id.
async fn assert_promise(client: &mut Client, ledger: &mut Ledger) {
    assert_served(client, ledger, Check::Settled).await;
    assert_next_id_is_new(client, ledger).await;
}

fn pet_name(pet: &Value) -> &str {
    pet["name"].as_str().expect("a pet has a name")
}

/// A name as the history shows it: without the padding of a big pet.
fn tag(name: &str) -> &str {
    name.split(' ').next().unwrap_or(name)
}

// ---- Writers -------------------------------------------------------------------------------

/// What the writers send.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mix {
    Creates,
    /// Creates of pets with 2 KB names, which fill a disk faster.
    BigCreates,
    /// Status changes (the status index moves) of the writer's own pets.
    Patches,
    /// Deletes of the writer's own pets.
    Deletes,
    /// Creates with an Idempotency-Key each, sent again with it when refused.
    KeyedCreates,
    CreatesAndPatches,
}

/// How long the writers go on.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Until the fault happens (`faulted`); failing if it has not after `max_writes` of a
    /// writer.
    UntilRefused { max_writes: usize },
    /// This many writes each, whatever their answers.
    Writes(usize),
    /// Until each writer has this many writes acknowledged, refused ones tried again.
    UntilAcknowledged(usize),
    /// Until the fault happens (within `max_writes` of each writer), then until each writer has
    /// `acknowledged` writes acknowledged that it sent after that.
    ThroughFault {
        max_writes: usize,
        acknowledged: usize,
    },
}

/// One writer: its number, the pets it made (only it patches or deletes them) and how many
/// writes it has made.
struct Writer {
    number: usize,
    mine: Vec<i64>,
    writes: usize,
}

/// Writers sharing a ledger across phases and servers.
struct Workload {
    writers: std::sync::Mutex<Vec<Writer>>,
    ledger: Arc<Mutex<Ledger>>,
}

/// An strace log to watch: once it shows a call failed on purpose, the fault has happened,
/// whether or not a write was refused for it (the store may find, after a failed commit, that
/// the batch reached the file, and acknowledge it).
type Watch = Option<Arc<PathBuf>>;

/// Whether the fault has happened: a write was refused, or the watched trace shows an injected
/// call (recorded in the ledger as the fault).
async fn faulted(ledger: &Mutex<Ledger>, watch: &Watch) -> bool {
    let mut ledger = ledger.lock().await;
    if ledger.first_fault.is_some() {
        return true;
    }
    let trace = watch
        .as_deref()
        .and_then(|trace| std::fs::read_to_string(trace).ok())
        .unwrap_or_default();
    match trace.lines().find(|line| line.contains("(INJECTED)")) {
        Some(line) => {
            let line = format!("strace: {line}");
            ledger.note(line.clone());
            ledger.first_fault = Some((Instant::now(), line));
            true
        }
        None => false,
    }
}

impl Workload {
    fn new(writers: usize) -> Workload {
        Workload {
            writers: std::sync::Mutex::new(
                (0..writers)
                    .map(|number| Writer {
                        number,
                        mine: Vec::new(),
                        writes: 0,
                    })
                    .collect(),
            ),
            ledger: Arc::default(),
        }
    }

    /// Runs every writer, each on a connection of its own (HTTP/1.1 and HTTP/2 in turn),
    /// through `phase`.
    async fn run(&self, server: &Server, mix: Mix, phase: Phase) {
        self.run_watching(server, mix, phase, None).await;
    }

    /// `run` under strace, whose `trace` says when the fault has happened.
    async fn run_traced(&self, traced: &Traced, mix: Mix, phase: Phase) {
        let watch = Some(Arc::new(traced.trace.clone()));
        self.run_watching(traced.server(), mix, phase, watch).await;
    }

    /// `run`, telling the server's log when a writer fails.
    async fn run_watching(&self, server: &Server, mix: Mix, phase: Phase, watch: Watch) {
        let writers = std::mem::take(&mut *self.writers.lock().expect("writers"));
        let mut tasks = tokio::task::JoinSet::new();
        for writer in writers {
            let protocol = if writer.number % 2 == 0 {
                Protocol::Http1
            } else {
                Protocol::Http2
            };
            let client = Client::connect(server.addr, protocol).await;
            let ledger = Arc::clone(&self.ledger);
            tasks.spawn(work(client, writer, mix, phase, ledger, watch.clone()));
        }
        let mut writers = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(writer) => writers.push(writer),
                Err(e) if e.is_panic() => {
                    if let Ok(ledger) = self.ledger.try_lock() {
                        let last = ledger.history.len().saturating_sub(30);
                        eprintln!("the last writes:\n{}", ledger.history[last..].join("\n"));
                    }
                    eprintln!("{}", server_said(&server.logs()));
                    std::panic::resume_unwind(e.into_panic());
                }
                Err(e) => panic!("a writer was cancelled: {e}"),
            }
        }
        writers.sort_by_key(|writer| writer.number);
        *self.writers.lock().expect("writers") = writers;
    }
}

/// One writer's phase. While its writes are refused it reads (every read must get 200) and
/// tries again after a pause, for up to `RESUME_DEADLINE`.
async fn work(
    mut client: Client,
    mut writer: Writer,
    mix: Mix,
    phase: Phase,
    ledger: Arc<Mutex<Ledger>>,
    watch: Watch,
) -> Writer {
    let (mut writes, mut acknowledged) = (0, 0);
    let mut refused_since: Option<Instant> = None;
    loop {
        let faulted = faulted(&ledger, &watch).await;
        let never_bit = |max_writes| {
            format!(
                "{max_writes} writes of writer {} and the fault never happened: no write got \
                 503{}",
                writer.number,
                if watch.is_some() {
                    " and strace injected no call"
                } else {
                    ""
                }
            )
        };
        match phase {
            Phase::UntilRefused { .. } if faulted => break,
            Phase::UntilRefused { max_writes } => {
                assert!(writes < max_writes, "{}", never_bit(max_writes))
            }
            Phase::Writes(count) if writes >= count => break,
            Phase::UntilAcknowledged(count) if acknowledged >= count => break,
            Phase::ThroughFault { max_writes, .. } if !faulted => {
                assert!(writes < max_writes, "{}", never_bit(max_writes));
            }
            Phase::ThroughFault {
                acknowledged: count,
                ..
            } if acknowledged >= count => break,
            _ => {}
        }
        let sent = write(&mut client, &mut writer, mix, &ledger).await;
        writes += 1;
        if sent.acknowledged {
            refused_since = None;
            if sent.after_fault || matches!(phase, Phase::UntilAcknowledged(_)) {
                acknowledged += 1;
            }
        } else {
            let since = *refused_since.get_or_insert_with(Instant::now);
            assert!(
                since.elapsed() < RESUME_DEADLINE,
                "writer {}: every write refused for {RESUME_DEADLINE:?}: writes did not resume",
                writer.number
            );
            read_while_refused(&mut client, &writer, &ledger).await;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
    writer
}

/// What became of one write.
struct Sent {
    acknowledged: bool,
    /// Sent after some write had been refused.
    after_fault: bool,
}

/// Makes the writer's next write of `mix` and records its answer.
async fn write(client: &mut Client, writer: &mut Writer, mix: Mix, ledger: &Mutex<Ledger>) -> Sent {
    let i = writer.writes;
    writer.writes += 1;
    let candidates: Vec<i64> = {
        let ledger = ledger.lock().await;
        writer
            .mine
            .iter()
            .copied()
            .filter(|&id| ledger.surely_exists(id))
            .collect()
    };
    let pick = || candidates.get(i % candidates.len().max(1)).copied();
    match mix {
        Mix::Creates => create(client, writer, ledger, false, None).await,
        Mix::BigCreates => create(client, writer, ledger, true, None).await,
        Mix::KeyedCreates => {
            let key = format!("key-{}-{i}", writer.number);
            create(client, writer, ledger, false, Some(key)).await
        }
        Mix::Patches => {
            let id =
                pick().unwrap_or_else(|| panic!("writer {} has no pet to patch", writer.number));
            patch(client, writer, ledger, id).await
        }
        Mix::Deletes => {
            let id = pick().unwrap_or_else(|| {
                panic!(
                    "writer {} deleted all its pets before any write got 503",
                    writer.number
                )
            });
            delete(client, writer, ledger, id).await
        }
        Mix::CreatesAndPatches => match pick() {
            Some(id) if i % 2 == 1 => patch(client, writer, ledger, id).await,
            _ => create(client, writer, ledger, false, None).await,
        },
    }
}

async fn create(
    client: &mut Client,
    writer: &mut Writer,
    ledger: &Mutex<Ledger>,
    big: bool,
    key: Option<String>,
) -> Sent {
    let i = writer.writes;
    let mut name = format!("w{}-{i}", writer.number);
    if big {
        name.push(' ');
        name.push_str(&"x".repeat(2000));
    }
    let mut body = json!({"name": name, "categoryId": i});
    // Every fourth pet has no status: it is in no status list.
    if i % 4 != 3 {
        body["status"] = STATUSES[i % 3].into();
    }
    let what = format!(
        "w{} create '{}'{}",
        writer.number,
        tag(&name),
        if key.is_some() { " with a key" } else { "" }
    );
    let after_fault = ledger.lock().await.first_fault.is_some();
    let mut headers = vec![("content-type", "application/json")];
    if let Some(key) = &key {
        headers.push(("idempotency-key", key));
    }
    let reply = send(client, Method::POST, "/v1/pets", &headers, body.to_string()).await;
    match answer(&what, reply, 201) {
        Ok(reply) => {
            let id = ledger
                .lock()
                .await
                .created(&what, &body, &reply, after_fault);
            writer.mine.push(id);
            Sent {
                acknowledged: true,
                after_fault,
            }
        }
        Err(refusal) => {
            let mut locked = ledger.lock().await;
            locked.refused(&what, refusal);
            if key.is_some() {
                drop(locked);
                retry_keyed(client, writer, ledger, &what, &body, &headers, refusal).await;
                return Sent {
                    acknowledged: true,
                    after_fault: true,
                };
            }
            match refusal {
                Refusal::Unavailable => locked.never.insert(name),
                Refusal::OutcomeUnknown => locked.in_doubt.insert(name, body).is_none(),
            };
            Sent {
                acknowledged: false,
                after_fault,
            }
        }
    }
}

/// Sends a refused keyed create again with its key until it is answered 201: the replay of
/// the pet the refused one stored, or a new pet if it stored nothing. A create refused
/// `unavailable` stored nothing, so it must not be replayed.
async fn retry_keyed(
    client: &mut Client,
    writer: &mut Writer,
    ledger: &Mutex<Ledger>,
    what: &str,
    body: &Value,
    headers: &[(&str, &str)],
    refusal: Refusal,
) {
    let since = Instant::now();
    let mut in_doubt = refusal == Refusal::OutcomeUnknown;
    ledger.lock().await.tally.retried += 1;
    loop {
        read_while_refused(client, writer, ledger).await;
        tokio::time::sleep(RETRY_PAUSE).await;
        let again = format!("{what} again");
        let reply = send(client, Method::POST, "/v1/pets", headers, body.to_string()).await;
        match answer(&again, reply, 201) {
            Ok(reply) => {
                let replayed = reply.header("idempotent-replayed") == Some("true");
                let mut ledger = ledger.lock().await;
                assert!(
                    in_doubt || !replayed,
                    "{again}: a replay, so the create refused `unavailable` was stored: {}\n{}",
                    reply.json(),
                    ledger.story(None, Some(pet_name(body)))
                );
                let id = ledger.created(&again, body, &reply, true);
                ledger.tally.retried_in_doubt += u64::from(in_doubt);
                ledger.tally.replayed += u64::from(replayed);
                writer.mine.push(id);
                return;
            }
            Err(refusal) => {
                in_doubt |= refusal == Refusal::OutcomeUnknown;
                ledger.lock().await.refused(&again, refusal);
                assert!(
                    since.elapsed() < RESUME_DEADLINE,
                    "{what}: still refused after {RESUME_DEADLINE:?}"
                );
            }
        }
    }
}

async fn patch(client: &mut Client, writer: &mut Writer, ledger: &Mutex<Ledger>, id: i64) -> Sent {
    let i = writer.writes;
    let status = [Some("available"), Some("pending"), Some("sold"), None][i % 4];
    let patch = json!({"status": status, "categoryId": i});
    let what = format!("w{} patch #{id} {patch}", writer.number);
    let after_fault = ledger.lock().await.first_fault.is_some();
    let headers = [("content-type", "application/merge-patch+json")];
    let path = format!("/v1/pets/{id}");
    let reply = send(client, Method::PATCH, &path, &headers, patch.to_string()).await;
    let mut ledger = ledger.lock().await;
    let acknowledged = match answer(&what, reply, 200) {
        Ok(reply) => {
            ledger.patched(&what, id, &patch, &reply, after_fault);
            true
        }
        Err(refusal) => {
            ledger.refused(&what, refusal);
            if refusal == Refusal::OutcomeUnknown {
                ledger.in_doubt(id, |version| Some(version.patched(&patch)));
            }
            false
        }
    };
    Sent {
        acknowledged,
        after_fault,
    }
}

async fn delete(client: &mut Client, writer: &mut Writer, ledger: &Mutex<Ledger>, id: i64) -> Sent {
    let what = format!("w{} delete #{id} ", writer.number);
    let after_fault = ledger.lock().await.first_fault.is_some();
    let path = format!("/v1/pets/{id}");
    let reply = send(client, Method::DELETE, &path, &[], String::new()).await;
    let mut ledger = ledger.lock().await;
    let acknowledged = match answer(&what, reply, 204) {
        Ok(_) => {
            ledger.note(format!("{what}-> 204"));
            ledger.pets.insert(id, vec![None]);
            ledger.acknowledged(after_fault);
            writer.mine.retain(|&mine| mine != id);
            true
        }
        Err(refusal) => {
            ledger.refused(&what, refusal);
            if refusal == Refusal::OutcomeUnknown {
                ledger.in_doubt(id, |_| None);
                writer.mine.retain(|&mine| mine != id);
            }
            false
        }
    };
    Sent {
        acknowledged,
        after_fault,
    }
}

/// Reads while writes are refused: a pet of this writer's that is certainly in one state is
/// served as it is, and a list page comes back, both 200.
async fn read_while_refused(client: &mut Client, writer: &Writer, ledger: &Mutex<Ledger>) {
    let certain = {
        let ledger = ledger.lock().await;
        writer
            .mine
            .iter()
            .rev()
            .find_map(|&id| Some((id, ledger.certain(id)?.clone())))
    };
    if let Some((id, version)) = certain {
        let path = format!("/v1/pets/{id}");
        let reply = send(client, Method::GET, &path, &[], String::new()).await;
        let reply = reply.unwrap_or_else(|| panic!("GET {path} during a fault: no answer"));
        assert_eq!(
            reply.status, 200,
            "GET {path} during a fault: {:?}",
            reply.body
        );
        if Version::of(&reply) != version {
            panic!(
                "GET {path} during a fault: served {:?}, but its last acknowledged write left \
                 {version:?}\n{}",
                Version::of(&reply),
                ledger.lock().await.story(Some(id), None)
            );
        }
    }
    let reply = send(client, Method::GET, "/v1/pets?limit=5", &[], String::new()).await;
    let reply = reply.unwrap_or_else(|| panic!("a list during a fault: no answer"));
    assert_eq!(reply.status, 200, "a list during a fault: {:?}", reply.body);
}

async fn send(
    client: &mut Client,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> Option<Reply> {
    let mut request = client.authed(method, path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request");
    client.try_send(request).await
}

/// A write's answer: `ok` acknowledges it; else it must be a 503 with an Error body whose code
/// says what became of the write.
fn answer(what: &str, reply: Option<Reply>, ok: u16) -> Result<Reply, Refusal> {
    let reply = reply.unwrap_or_else(|| panic!("{what}: the connection failed without an answer"));
    if reply.status == ok {
        return Ok(reply);
    }
    let body = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.status, 503, "{what}: {} {body}", reply.status);
    assert_eq!(
        reply.header("content-type"),
        Some("application/json"),
        "{what}: 503 {body}"
    );
    let error = reply.json();
    let members: Option<BTreeSet<&str>> = error
        .as_object()
        .map(|error| error.keys().map(String::as_str).collect());
    assert_eq!(
        members,
        Some(BTreeSet::from(["code", "message", "status"])),
        "{what}: 503 {body}"
    );
    assert_eq!(error["status"], 503, "{what}: 503 {body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: 503 {body}"
    );
    match error["code"].as_str() {
        Some("unavailable") => Err(Refusal::Unavailable),
        Some("outcome_unknown") => Err(Refusal::OutcomeUnknown),
        _ => panic!("{what}: 503 with another code: {body}"),
    }
}

// ---- Servers and disks ---------------------------------------------------------------------

/// The development setup on the database file `db`.
fn plain(db: &Path) -> Options {
    Options {
        db: Some(path_str(db).to_owned()),
        ..Options::default()
    }
}

/// The files a store on `db` writes: the database and the segments of its write-ahead log, as
/// far as a test goes (each life of the file begins a new segment).
fn store_files(db: &Path) -> Vec<String> {
    let mut files = vec![path_str(db).to_owned()];
    for segment in 1..=16 {
        files.push(format!("{}-log/{segment:016}.log", path_str(db)));
    }
    files
}

/// A server run under strace, which fails the calls `inject` names on the store's files alone
/// (strace counts them for each thread: `when=N` is the writer thread's Nth) and writes every
/// call on it to `trace`, beside the file. The server is strace's child: signals go to it, and
/// it is killed on drop, since a strace that is killed leaves its tracee running.
struct Traced {
    server: Option<Server>,
    tracee: u32,
    trace: PathBuf,
}

impl Traced {
    fn start(db: &Path, inject: &str) -> Traced {
        need("strace", "strace");
        let inject = format!("inject={inject}");
        let trace = db.with_extension("strace");
        let mut wrapper: Vec<String> = ["strace", "-f", "-qq", "--seccomp-bpf", "-o"]
            .map(String::from)
            .to_vec();
        wrapper.push(path_str(&trace).to_owned());
        // The store's files: the database and the first segments of its write-ahead log
        // (`FILE-log/N.log`), whose appends are the writer's one sync a batch.
        for path in store_files(db) {
            wrapper.extend(["-P".to_owned(), path]);
        }
        wrapper.extend(["-e", "trace=pwrite64,fdatasync", "-e", &inject].map(String::from));
        let server = Server::start_with(Options {
            wrapper,
            ..plain(db)
        });
        let strace = server.pid();
        let children = std::fs::read_to_string(format!("/proc/{strace}/task/{strace}/children"))
            .expect("strace's children");
        let tracee = children
            .split_whitespace()
            .next()
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("strace has no child: {children:?}"));
        Traced {
            server: Some(server),
            tracee,
            trace,
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("the server is running")
    }

    /// SIGTERM to the server; strace exits with its status, which must be 0.
    fn stop(mut self) -> Stopped {
        sh("kill", &["-TERM", &self.tracee.to_string()]);
        self.server
            .take()
            .expect("the server is running")
            .wait_exit()
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        if self.server.is_some() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.tracee.to_string()])
                .status();
        }
    }
}

/// A file system mounted for one test, unmounted on drop and its loop device detached, even
/// when the test fails. A server using it must be dropped first: declare it later.
struct Mounted {
    point: PathBuf,
    device: Option<String>,
}

impl Mounted {
    fn tmpfs(point: &Path, size: &str) -> Mounted {
        need("mount", "mount");
        std::fs::create_dir_all(point).expect("mount point");
        let size = format!("size={size}");
        sh(
            "mount",
            &["-t", "tmpfs", "-o", &size, "tmpfs", path_str(point)],
        );
        Mounted {
            point: point.to_owned(),
            device: None,
        }
    }

    /// A new ext4 file system of `size` in `image`, on a loop device, mounted at `point`.
    /// Every block of its metadata is written now, so that only data needs room in the image
    /// later. `failing`: the image lies on a file system that may run out of room, and the
    /// device must then fail the writes it cannot store (see `Mounted::one_block_a_request`).
    fn ext4(image: &Path, size: &str, point: &Path, failing: bool) -> Mounted {
        need("mkfs.ext4", "e2fsprogs");
        sh("truncate", &["-s", size, path_str(image)]);
        // Direct I/O: what the loop device acknowledged is in the image, not in a cache of the
        // loop driver's, so a copy of the image is what a disk would hold after a power cut.
        let mounted = Mounted::loop_device(image, point, failing);
        let device = mounted.device.as_deref().expect("a loop device");
        if failing {
            one_block_a_request(device);
        }
        sh(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-b",
                "4096",
                "-m",
                "0",
                "-E",
                "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
                device,
            ],
        );
        sh("mount", &[device, path_str(point)]);
        mounted
    }

    /// The ext4 file system in `image` mounted at `point` (its journal replayed, as at a boot).
    fn existing_ext4(image: &Path, point: &Path) -> Mounted {
        let mounted = Mounted::loop_device(image, point, false);
        let device = mounted.device.as_deref().expect("a loop device");
        sh("mount", &[device, path_str(point)]);
        mounted
    }

    fn loop_device(image: &Path, point: &Path, direct_io: bool) -> Mounted {
        need("losetup", "mount");
        assert!(
            Path::new("/dev/loop-control").exists(),
            "no /dev/loop-control: this machine gives no loop devices, which this test needs"
        );
        std::fs::create_dir_all(point).expect("mount point");
        let mut args = vec!["--find", "--show"];
        if direct_io {
            args.push("--direct-io=on");
        }
        args.push(path_str(image));
        let device = sh("losetup", &args).trim().to_owned();
        Mounted {
            point: point.to_owned(),
            device: Some(device),
        }
    }
}

/// Limits the loop device to one 4 KiB block a request. A request the image's file system can
/// store only the start of (a block it holds, then a hole in a full tmpfs) is completed as a
/// success (Linux 6.18, with or without direct I/O): ext4's fdatasync returns 0 and the block
/// after reads zeros, a disk that lies. One block a request fails whole, and fdatasync says so.
fn one_block_a_request(device: &str) {
    let name = Path::new(device)
        .file_name()
        .and_then(|name| name.to_str())
        .expect("a device name");
    let limit = format!("/sys/block/{name}/queue/max_sectors_kb");
    std::fs::write(&limit, "4").unwrap_or_else(|e| panic!("{limit}: {e}"));
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.point)
            .status()
            .is_ok_and(|status| status.success());
        if !unmounted {
            // Not mounted (a set-up that failed), or still busy: detach it lazily.
            let _ = Command::new("umount").arg("-l").arg(&self.point).status();
        }
        if let Some(device) = &self.device {
            let _ = Command::new("losetup").args(["-d", device]).status();
        }
    }
}

/// Writes zeros to a new file at `path` until its file system is full.
fn fill(path: &Path) {
    let mut file = File::create(path).expect("the filler file");
    let zeros = vec![0; 1 << 20];
    for size in [1 << 20, 4096, 512] {
        loop {
            match file.write(&zeros[..size]) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    // ENOSPC may come again from the flush; what matters is that no room is left.
    let _ = file.sync_all();
}

/// Removes the filler and has its file system count the room free at once.
fn free(filler: &Path) {
    std::fs::remove_file(filler).expect("the filler file");
    let dir = filler.parent().expect("the filler's directory");
    sh("sync", &["-f", path_str(dir)]);
}

/// Punches a hole in `backing` (the image under the ext4 file system holding `dir`) under
/// every block of the files in `dir` that holds only zeros: they read the same, but a write
/// there needs room again in the file system that holds `backing`.
fn dig_holes_under(dir: &Path, backing: &Path) {
    for entry in std::fs::read_dir(dir).expect("the store's directory") {
        let path = entry.expect("a directory entry").path();
        // The write-ahead log's segments too (`pets.redb-log/`): their room ahead is zeros.
        if path.is_dir() {
            dig_holes_under(&path, backing);
            continue;
        }
        if !path.is_file() {
            continue;
        }
        let map = sh("filefrag", &["-v", "-b4096", path_str(&path)]);
        // "   0:        0..      17:       1549..      1566:     18:             last"
        for line in map.lines() {
            let fields: Vec<&str> = line.split(':').map(str::trim).collect();
            if fields.len() < 4 || fields[0].parse::<u64>().is_err() {
                continue;
            }
            let start: u64 = fields[2]
                .split("..")
                .next()
                .and_then(|block| block.trim().parse().ok())
                .unwrap_or_else(|| panic!("a physical extent in {line:?}"));
            let length: u64 = fields[3]
                .parse()
                .unwrap_or_else(|_| panic!("an extent length in {line:?}"));
            let (offset, length) = ((start * 4096).to_string(), (length * 4096).to_string());
            sh(
                "fallocate",
                &[
                    "--dig-holes",
                    "--offset",
                    &offset,
                    "--length",
                    &length,
                    path_str(backing),
                ],
            );
        }
    }
}

/// What the server logged, apart from the line of each request (but reads refused) and the
/// frames of a backtrace
/// (its panic's message is what tells), with a run of lines alike (but for their time and
/// counts) given once: its warnings, errors and the store's reopens, for a test that failed.
fn server_said(logs: &str) -> String {
    let is_frame = |line: &str| {
        let line = line.trim_start();
        line.starts_with("at ")
            || line
                .split_once(": ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
    };
    // The message and its fields, without the time in front and the digits of counts.
    let alike = |line: &str| -> String {
        let rest = line.split_once(' ').map_or(line, |(_, rest)| rest);
        rest.chars().filter(|c| !c.is_ascii_digit()).collect()
    };
    let mut said: Vec<(String, usize)> = Vec::new();
    for line in logs.lines() {
        // A read refused is kept: when it came, beside the store's reopens, tells why.
        let refused_read = line.contains("method=GET") && !line.contains("status=200");
        if (line.contains("petstore::service: request") && !refused_read) || is_frame(line) {
            continue;
        }
        match said.last_mut() {
            Some((last, more)) if alike(last) == alike(line) => *more += 1,
            _ => said.push((line.to_owned(), 0)),
        }
    }
    let lines: Vec<String> = said
        .into_iter()
        .map(|(line, more)| match more {
            0 => line,
            more => format!("{line} (and {more} more like it)"),
        })
        .collect();
    format!(
        "the server logged:\n{}",
        lines[lines.len().saturating_sub(40)..].join("\n")
    )
}

/// Runs `petstore check --db db` and asserts a clean report.
#[track_caller]
fn assert_checks_clean(db: &Path) {
    let (code, stdout, stderr) = run(&["check".as_ref(), "--db".as_ref(), db.as_os_str()]);
    assert_eq!(code, Some(0), "check {}:\n{stdout}\n{stderr}", db.display());
    assert!(
        stdout.contains("ok: the file and its indexes agree"),
        "{stdout}"
    );
}

/// Fails the test, naming the package, when `program` cannot be run: a fault test that
/// cannot cause its fault must not pass by doing nothing.
fn need(program: &str, package: &str) {
    if let Err(e) = Command::new(program).arg("--version").output() {
        panic!("{program} cannot run ({e}): install Debian's {package}, as .ci/run does");
    }
}

/// Runs a command that must succeed; returns its stdout.
#[track_caller]
fn sh(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} cannot run: {e}"));
    assert!(
        output.status.success(),
        "{program} {}: {}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}
