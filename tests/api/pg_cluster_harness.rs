//! The PostgreSQL harness itself (`pg_cluster`): a cluster answers SQL on its own port, keeps
//! committed rows through a crash, and goes away with its directory when dropped; a
//! synchronous standby holds every acknowledged commit and takes writes once promoted; a frozen
//! one accepts connections and answers nothing until thawed.

use std::fs;
use std::path::PathBuf;

use crate::pg_cluster::{Cluster, hosts_url};

#[test]
fn a_new_cluster_answers_sql_in_the_petstore_database_on_its_port() {
    let cluster = Cluster::start();
    assert_eq!(cluster.psql("SELECT 1"), "1");
    assert_eq!(
        cluster.psql("SELECT current_database(), inet_server_port(), current_user"),
        format!("petstore|{}|postgres", cluster.port())
    );
    assert_eq!(
        cluster.url(),
        format!(
            "postgres://postgres@127.0.0.1:{}/petstore?sslmode=disable",
            cluster.port()
        )
    );
}

#[test]
fn committed_rows_survive_a_crash_and_a_restart_on_the_same_port() {
    let cluster = Cluster::start();
    cluster.psql(
        "CREATE TABLE pets (id int PRIMARY KEY);\nINSERT INTO pets SELECT generate_series(1, 100);",
    );
    cluster.crash();
    cluster.restart();
    assert_eq!(
        cluster.psql("SELECT count(*), sum(id) FROM pets"),
        "100|5050"
    );
}

#[test]
fn a_dropped_cluster_leaves_no_server_and_no_directory() {
    let cluster = Cluster::start();
    let data = PathBuf::from(cluster.psql("SHOW data_directory"));
    let pid = fs::read_to_string(data.join("postmaster.pid")).expect("a running server's pid file");
    let pid = pid
        .lines()
        .next()
        .expect("the pid is the first line")
        .to_owned();
    drop(cluster);
    // The postmaster's parent exited at its start, so a reaper may not have collected it yet.
    let state = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        state.is_empty() || state.contains(") Z "),
        "postmaster {pid} still runs: {state}"
    );
    assert!(!data.exists(), "{} is left", data.display());
    assert!(
        !data
            .parent()
            .expect("the data dir is in the temp dir")
            .exists()
    );
}

#[test]
fn a_promoted_synchronous_standby_has_every_acknowledged_row_and_takes_writes() {
    let primary = Cluster::start();
    primary.psql("CREATE TABLE pets (id int PRIMARY KEY, name text)");
    let standby = primary.start_standby();
    assert_ne!(standby.port(), primary.port());
    primary.psql("INSERT INTO pets VALUES (1, 'acknowledged')");
    primary.crash();
    standby.promote();
    assert_eq!(
        standby.psql("SELECT name FROM pets WHERE id = 1"),
        "acknowledged"
    );
    standby.psql("INSERT INTO pets VALUES (2, 'after the failover')");
    assert_eq!(standby.psql("SELECT count(*) FROM pets"), "2");
    assert_eq!(
        hosts_url(&[&primary, &standby]),
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/petstore?sslmode=disable\
             &target_session_attrs=read-write",
            primary.port(),
            standby.port()
        )
    );
}

#[test]
fn a_frozen_cluster_accepts_connections_but_answers_nothing_until_thawed() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    // An SSLRequest: a running server answers it with one byte, 'N' (no TLS here) or 'S'.
    let ask = |port: u16| -> std::io::Result<u8> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])?;
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer)?;
        Ok(answer[0])
    };
    let mut cluster = Cluster::start();
    assert_eq!(ask(cluster.port()).expect("an answer"), b'N');
    cluster.freeze();
    let silent = ask(cluster.port()).expect_err("no answer while frozen");
    assert!(
        matches!(
            silent.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{silent}"
    );
    cluster.thaw();
    assert_eq!(ask(cluster.port()).expect("an answer"), b'N');
    assert_eq!(cluster.psql("SELECT 1"), "1");
}
