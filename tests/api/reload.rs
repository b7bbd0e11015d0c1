//! SIGHUP: a new certificate for new connections, keys added and revoked without a restart,
//! and a broken file that leaves the old configuration serving.

use std::path::Path;

use bytes::Bytes;
use hyper::Method;
use hyper::header::AUTHORIZATION;

use crate::support::{
    Client, DEV_KEY, Options, Protocol, Server, cert, certificate_der, tls_config, tls_connect,
};

/// Copies the development files into `dir`, so a test can change them under the server.
fn own_copies(dir: &Path) -> Options {
    let copy = |from: &str, to: &str| {
        std::fs::copy(cert(from), dir.join(to)).expect("copy");
        dir.join(to)
    };
    Options {
        tls_cert: copy("dev-server.pem", "tls.pem"),
        tls_key: copy("dev-server.key", "tls.key"),
        api_keys: copy("dev-keys.txt", "api-keys"),
        ..Options::default()
    }
}

async fn presented_certificate(server: &Server) -> Vec<u8> {
    let tls = tls_connect(server.addr, tls_config(b"h2", rustls::DEFAULT_VERSIONS))
        .await
        .expect("handshake");
    tls.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec()
}

async fn status_with_key(client: &mut Client, key: &str) -> u16 {
    let request = client
        .request(Method::GET, "/v1/pets")
        .header(AUTHORIZATION, format!("Bearer {key}"));
    client.send(request, Bytes::new()).await.status
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_certificate_is_served_to_new_connections_and_open_ones_keep_working() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = own_copies(dir.path());
    let server = Server::start_with(options.clone());
    let old = certificate_der(&cert("dev-server.pem"))[0].to_vec();
    assert_eq!(presented_certificate(&server).await, old);
    let mut open = Client::connect(server.addr, Protocol::Http1).await;

    std::fs::copy(cert("dev-server-2.pem"), &options.tls_cert).expect("swap cert");
    std::fs::copy(cert("dev-server-2.key"), &options.tls_key).expect("swap key");
    server.signal("HUP");
    server.wait_for_log("reload done certificate_ok=true", 1);

    let new = certificate_der(&cert("dev-server-2.pem"))[0].to_vec();
    assert_eq!(presented_certificate(&server).await, new);
    assert_eq!(
        open.get("/v1/pets").await.status,
        200,
        "the open connection still serves"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_added_is_accepted_and_a_key_revoked_is_refused_without_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = own_copies(dir.path());
    let server = Server::start_with(options.clone());
    let mut client = server.h1().await;
    assert_eq!(status_with_key(&mut client, DEV_KEY).await, 200);

    let (code, stdout, _) = crate::support::run(&["new-key".as_ref(), "alice".as_ref()]);
    assert_eq!(code, Some(0));
    let (alice, line) = stdout.split_once('\n').expect("two lines");
    assert_eq!(status_with_key(&mut client, alice).await, 401);

    // Add alice and revoke dev in one edit of the file.
    std::fs::write(&options.api_keys, line).expect("rewrite keys");
    server.signal("HUP");
    server.wait_for_log("API keys reloaded keys=1", 1);
    assert_eq!(
        status_with_key(&mut client, alice).await,
        200,
        "added, on the same connection"
    );
    assert_eq!(
        status_with_key(&mut client, DEV_KEY).await,
        401,
        "revoked, on the next request"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_reload_keeps_the_old_certificate_and_keys_in_force() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = own_copies(dir.path());
    let server = Server::start_with(options.clone());
    std::fs::write(&options.tls_cert, "not a certificate").expect("break cert");
    std::fs::write(&options.api_keys, "dev nothex\n").expect("break keys");
    server.signal("HUP");
    server.wait_for_log("reload done certificate_ok=false keys_ok=false", 1);
    let logs = server.logs();
    assert!(
        logs.contains("TLS certificate reload failed")
            && logs.contains("line 1: expected 64 lowercase hex digits"),
        "{logs}"
    );

    let old = certificate_der(&cert("dev-server.pem"))[0].to_vec();
    assert_eq!(presented_certificate(&server).await, old);
    let mut client = server.h2().await;
    assert_eq!(status_with_key(&mut client, DEV_KEY).await, 200);
    server.stop();
}
