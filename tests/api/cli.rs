//! The command line as an operator meets it: `--listen` by host name, resolved at start and
//! served on every address the name has, and the errors a wrong value gets.

use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};

use crate::support::{Client, Options, Protocol, Server, cert, run};

/// The `address=` of every "listening on" line.
fn listening(logs: &str) -> Vec<SocketAddr> {
    logs.lines()
        .filter(|line| line.contains("listening on"))
        .map(|line| {
            let (_, rest) = line.split_once("address=").expect("an address field");
            let address = rest.split_whitespace().next().expect("a value");
            address.parse().expect("a socket address")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn listen_takes_a_host_name_and_serves_every_address_it_resolves_to_on_one_port() {
    let server = Server::start_with(Options {
        args: vec!["--listen".into(), "localhost:0".into()],
        ..Options::default()
    });
    let bound = listening(&server.logs());
    let port = server.addr.port();
    assert_ne!(port, 0);
    assert!(bound.iter().all(|a| a.port() == port), "{bound:?}");
    // What this machine's resolver says localhost is (127.0.0.1, and ::1 where /etc/hosts
    // names it): the server listens on exactly those.
    let resolved: BTreeSet<_> = ("localhost", port)
        .to_socket_addrs()
        .expect("localhost resolves")
        .collect();
    assert_eq!(bound.iter().copied().collect::<BTreeSet<_>>(), resolved);
    for address in bound {
        assert!(address.ip().is_loopback(), "{address}");
        let mut client = Client::connect(address, Protocol::Http1).await;
        assert_eq!(client.get("/v1/pets").await.status, 200, "on {address}");
    }
    server.stop();
}

#[test]
fn a_listen_name_that_does_not_resolve_stops_the_start_naming_the_flag() {
    // RFC 6761: .invalid never resolves.
    let (code, _, stderr) = run(&[
        "--listen".as_ref(),
        "pets.invalid:8443".as_ref(),
        "--tls-cert".as_ref(),
        cert("dev-server.pem").as_os_str(),
        "--tls-key".as_ref(),
        cert("dev-server.key").as_os_str(),
        "--api-keys".as_ref(),
        cert("dev-keys.txt").as_os_str(),
        "--db".as_ref(),
        tempfile::tempdir()
            .expect("temp dir")
            .path()
            .join("pets.redb")
            .as_os_str(),
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: --listen pets.invalid:8443: resolving the host name: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn an_ipv6_listen_address_without_brackets_is_refused_with_the_form_to_use() {
    let (code, _, stderr) = run(&["--listen".as_ref(), "::1:8443".as_ref()]);
    assert_eq!(code, Some(2), "clap's usage error: {stderr}");
    assert!(
        stderr.contains("an IPv6 address goes in brackets, e.g. [::1]:8443"),
        "{stderr}"
    );
}
