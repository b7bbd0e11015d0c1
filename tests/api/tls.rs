//! TLS and HTTP versions: ALPN picks HTTP/2 or HTTP/1.1, TLS 1.2 and 1.3 both work, and only
//! the certificate for the requested names is presented; the server picks the cipher suite,
//! and every answer tells clients to stay on HTTPS. testssl.sh grades the whole setup in
//! `.ci/testssl`.

use crate::support::{Client, Protocol, Server, tls_config, tls_config_with, tls_connect};

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

#[tokio::test(flavor = "multi_thread")]
async fn the_server_s_cipher_order_wins_over_the_client_s() {
    let server = Server::start();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        // ring's own order is AES-256-GCM first; this client asks for it last.
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites.reverse();
        let tls = tls_connect(server.addr, tls_config_with(provider, b"h2", &[version]))
            .await
            .expect("handshake");
        let suite = tls.get_ref().1.negotiated_cipher_suite().expect("a suite");
        let want = if version == &rustls::version::TLS13 {
            rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
        } else {
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        };
        assert_eq!(suite.suite(), want, "{version:?}");
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_carries_strict_transport_security_and_nosniff() {
    let server = Server::start();
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let mut client = Client::connect(server.addr, protocol).await;
        let created = client
            .post_json("/v1/pets", r#"{"name":"Rex","categoryId":1}"#)
            .await;
        let answers = [
            created,
            client.get("/v1/pets").await,
            client.get("/v1/pets/999").await,
            client.get("/v1/openapi.json").await,
            client.get("/healthz").await,
            client.delete("/v1/pets/1").await,
            client
                .send_with(hyper::Method::PUT, "/v1/pets", &[], "")
                .await,
        ];
        for answer in answers {
            let status = answer.status;
            assert_eq!(
                answer.header("strict-transport-security"),
                Some("max-age=31536000"),
                "{protocol:?} {status}"
            );
            assert_eq!(
                answer.header("x-content-type-options"),
                Some("nosniff"),
                "{protocol:?} {status}"
            );
        }
    }
    server.stop();
}
