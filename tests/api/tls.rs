//! TLS and HTTP versions: ALPN picks HTTP/2 or HTTP/1.1, TLS 1.2 and 1.3 both work, and only
//! the certificate for the requested names is presented.

use crate::support::{Client, Protocol, Server, tls_config, tls_connect};

#[tokio::test(flavor = "multi_thread")]
async fn http2_is_negotiated_by_alpn_and_serves_the_api() {
    let server = Server::start();
    let mut client = server.h2().await;
    let pet = client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    assert_eq!(client.get("/v1/pets/1").await.json(), pet);
    assert_eq!(client.get("/v1/pets").await.ids(), [1]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn http1_is_negotiated_by_alpn_and_keeps_the_connection_alive() {
    let server = Server::start();
    let mut client = Client::connect(server.addr, Protocol::Http1).await;
    for _ in 0..3 {
        assert_eq!(client.get("/v1/pets").await.status, 200);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_1_2_and_tls_1_3_clients_are_both_served() {
    let server = Server::start();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let tls = tls_connect(server.addr, tls_config(b"h2", &[version]))
            .await
            .expect("handshake");
        assert_eq!(tls.get_ref().1.protocol_version(), Some(version.version));
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_offers_no_known_protocol_is_refused() {
    let server = Server::start();
    let refused = tls_connect(server.addr, tls_config(b"spdy/3", rustls::DEFAULT_VERSIONS)).await;
    assert!(
        refused.is_err(),
        "rustls refuses an ALPN offer it shares nothing with"
    );
    let mut client = server.h1().await;
    assert_eq!(
        client.get("/v1/pets").await.status,
        200,
        "and keeps serving others"
    );
    server.stop();
}
