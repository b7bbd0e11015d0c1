//! Routing errors: 404 for unknown paths, 405 with `Allow` for a known path's other methods.

use bytes::Bytes;
use hyper::Method;

use crate::support::Server;

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_path_gets_404_error() {
    let server = Server::start();
    let mut client = server.h1().await;
    for path in ["/", "/pets", "/v2/pets", "/v1/pets/1/owner", "/v1/pets/"] {
        client
            .get(path)
            .await
            .assert_error(404, "not_found", &format!("no resource at {path}"));
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn another_method_on_a_known_path_gets_405_with_allow() {
    let server = Server::start();
    let mut client = server.h2().await;
    for (method, path, allow) in [
        (Method::DELETE, "/v1/pets", "GET, HEAD, POST"),
        (Method::PUT, "/v1/pets", "GET, HEAD, POST"),
        (Method::PATCH, "/v1/pets", "GET, HEAD, POST"),
        (Method::POST, "/v1/pets/1", "GET, HEAD, PATCH, DELETE"),
        (Method::PUT, "/v1/pets/1", "GET, HEAD, PATCH, DELETE"),
        (Method::PUT, "/v1/pets/abc", "GET, HEAD, PATCH, DELETE"),
        (Method::POST, "/v1/openapi.json", "GET, HEAD"),
    ] {
        let request = client.authed(method.clone(), path);
        let reply = client.send(request, Bytes::new()).await;
        reply.assert_error(
            405,
            "method_not_allowed",
            &format!("method not allowed here; allowed: {allow}"),
        );
        assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
    }
    server.stop();
}
