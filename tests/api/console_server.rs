//! The console's server side over real TLS, without a browser (the browser tests are
//! `console.rs`): its page and files (encodings, tags, caching, the locked-down headers), the
//! session a key opens (the cookie's attributes, `/v1` taking it, the cross-origin check, a
//! read-only key, sign-out), a session across a restart, its end when its key is revoked or it
//! sits unused, `--console-path`, `--no-console`, and one session on two instances of one
//! PostgreSQL database.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::Method;

use crate::orders::{cluster, on_postgres};
use crate::support::{Client, DEV_KEY, Options, Reply, Server, cert, keys_on};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; manifest-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Sends `method` to `path` without a key, with `headers`.
async fn plain(
    client: &mut Client,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut request = client.request(method, path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    client.send(request, body.to_owned()).await
}

/// `GET path` with the session cookie `cookie` (a `Cookie` header value) and nothing else.
async fn get_with(client: &mut Client, path: &str, cookie: &str) -> Reply {
    plain(client, Method::GET, path, &[("cookie", cookie)], "").await
}

/// Signs in with `key`; returns the `Cookie` header value that carries the session.
async fn sign_in(client: &mut Client, key: &str) -> String {
    let reply = plain(
        client,
        Method::POST,
        "/console/session",
        &[
            ("content-type", "application/json"),
            ("sec-fetch-site", "same-origin"),
        ],
        &format!(r#"{{"key":"{key}"}}"#),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let set = reply.header("set-cookie").expect("a session cookie");
    let (pair, _) = set.split_once(';').expect("attributes");
    pair.to_owned()
}

fn decompressed(reply: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    match reply.header("content-encoding") {
        Some("br") => {
            brotli::BrotliDecompress(&mut reply.body.as_ref(), &mut out).expect("brotli");
        }
        Some("gzip") => {
            flate2::read::GzDecoder::new(reply.body.as_ref())
                .read_to_end(&mut out)
                .expect("gzip");
        }
        None => out = reply.body.to_vec(),
        Some(other) => panic!("unexpected encoding {other}"),
    }
    out
}

fn assert_locked_down(reply: &Reply) {
    assert_eq!(reply.header("content-security-policy"), Some(CSP));
    assert_eq!(reply.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    assert!(reply.header("strict-transport-security").is_some());
}

#[tokio::test]
async fn the_page_and_its_files_are_compressed_tagged_cached_and_locked_down() {
    let server = Server::start();
    let mut client = server.h2().await;
    let bare = plain(&mut client, Method::GET, "/console", &[], "").await;
    assert_eq!(bare.status, 308);
    assert_eq!(bare.header("location"), Some("/console/"));

    let page = plain(
        &mut client,
        Method::GET,
        "/console/",
        &[("accept-encoding", "gzip, br")],
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-encoding"), Some("br"));
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("vary"), Some("Accept-Encoding"));
    assert_locked_down(&page);
    let html = String::from_utf8(decompressed(&page)).expect("UTF-8");
    let script = html
        .split('"')
        .find(|part| part.starts_with("/console/assets/") && part.ends_with("/app.js"))
        .unwrap_or_else(|| panic!("the page names its script: {html}"))
        .to_owned();
    assert!(!html.contains("{{"), "the template is filled: {html}");

    // A path of the console's own is the same page: it routes itself.
    let deep = plain(
        &mut client,
        Method::GET,
        "/console/pets/12",
        &[("accept-encoding", "br")],
        "",
    )
    .await;
    assert_eq!(deep.header("etag"), page.header("etag"));
    let etag = page.header("etag").expect("a tag").to_owned();
    let again = plain(
        &mut client,
        Method::GET,
        "/console/",
        &[("accept-encoding", "br"), ("if-none-match", &etag)],
        "",
    )
    .await;
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    let gzipped = plain(
        &mut client,
        Method::GET,
        "/console/",
        &[("accept-encoding", "gzip")],
        "",
    )
    .await;
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    assert_ne!(
        gzipped.header("etag"),
        Some(etag.as_str()),
        "a tag per encoding"
    );
    assert_eq!(decompressed(&gzipped), html.as_bytes());
    let identity = plain(&mut client, Method::GET, "/console/", &[], "").await;
    assert_eq!(identity.header("content-encoding"), None);
    assert_eq!(identity.body, html.as_bytes());

    let asset = plain(
        &mut client,
        Method::GET,
        &script,
        &[("accept-encoding", "gzip")],
        "",
    )
    .await;
    assert_eq!(asset.status, 200, "{script}");
    assert_eq!(
        asset.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(
        asset.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_locked_down(&asset);
    assert!(!decompressed(&asset).is_empty());
    let other_build = script.replace("/assets/", "/assets/0").to_owned();
    let missing = plain(&mut client, Method::GET, &other_build, &[], "").await;
    assert_eq!(missing.status, 404);
    let post = plain(&mut client, Method::POST, "/console/", &[], "").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    server.stop();
}

#[tokio::test]
async fn a_key_opens_a_session_the_api_takes_and_sign_out_ends_it() {
    let server = Server::start();
    let mut client = server.h1().await;
    let json = [
        ("content-type", "application/json"),
        ("sec-fetch-site", "same-origin"),
    ];
    let wrong = plain(
        &mut client,
        Method::POST,
        "/console/session",
        &json,
        r#"{"key":"nope"}"#,
    )
    .await;
    wrong.assert_error(401, "unauthorized", "the API key is not valid");
    assert!(wrong.header("set-cookie").is_none());
    let bad = plain(
        &mut client,
        Method::POST,
        "/console/session",
        &json,
        r#"{"key":1}"#,
    )
    .await;
    assert_eq!(bad.status, 400);

    let reply = plain(
        &mut client,
        Method::POST,
        "/console/session",
        &json,
        &format!(r#"{{"key":"{DEV_KEY}"}}"#),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        serde_json::json!({"label": "dev", "readOnly": false})
    );
    assert_locked_down(&reply);
    let set = reply.header("set-cookie").expect("a cookie");
    let mut attributes: Vec<&str> = set.split("; ").collect();
    let pair = attributes.remove(0);
    let (name, token) = pair.split_once('=').expect("name=value");
    assert_eq!(name, "__Host-petstore-session");
    assert!(token.len() >= 43 && !token.contains(DEV_KEY), "{token}");
    attributes.sort_unstable();
    assert_eq!(
        attributes,
        ["HttpOnly", "Path=/", "SameSite=Strict", "Secure"]
    );
    assert!(!String::from_utf8_lossy(&reply.body).contains(DEV_KEY));
    let cookie = pair.to_owned();

    let who = get_with(&mut client, "/console/session", &cookie).await;
    assert_eq!(who.json()["label"], "dev");
    let list = get_with(&mut client, "/v1/pets", &cookie).await;
    assert_eq!(list.status, 200);
    let pet = r#"{"name":"Rex","photoUrls":[],"categoryId":1}"#;
    let same = plain(
        &mut client,
        Method::POST,
        "/v1/pets",
        &[
            ("cookie", &cookie),
            ("content-type", "application/json"),
            ("sec-fetch-site", "same-origin"),
        ],
        pet,
    )
    .await;
    assert_eq!(same.status, 201, "{:?}", same.body);
    let cross = plain(
        &mut client,
        Method::POST,
        "/v1/pets",
        &[
            ("cookie", &cookie),
            ("content-type", "application/json"),
            ("sec-fetch-site", "cross-site"),
        ],
        pet,
    )
    .await;
    cross.assert_error(
        403,
        "cross_origin",
        "a request from another site may not make changes with a console session",
    );
    let host = format!("localhost:{}", server.addr.port());
    let from_elsewhere = plain(
        &mut client,
        Method::DELETE,
        "/v1/pets/1",
        &[("cookie", &cookie), ("origin", "https://evil.example")],
        "",
    )
    .await;
    assert_eq!(from_elsewhere.status, 403);
    let from_here = plain(
        &mut client,
        Method::PATCH,
        "/v1/pets/1",
        &[
            ("cookie", &cookie),
            ("content-type", "application/merge-patch+json"),
            ("origin", &format!("https://{host}")),
        ],
        r#"{"name":"Rexy"}"#,
    )
    .await;
    assert_eq!(from_here.status, 200, "{:?}", from_here.body);
    // A key is not a browser's ambient credential: its requests are not checked so.
    let keyed = client
        .send_with(
            Method::POST,
            "/v1/pets",
            &[
                ("content-type", "application/json"),
                ("sec-fetch-site", "cross-site"),
            ],
            pet,
        )
        .await;
    assert_eq!(keyed.status, 201);
    // Signing in from another site is refused too (no login forgery).
    let forged = plain(
        &mut client,
        Method::POST,
        "/console/session",
        &[
            ("content-type", "application/json"),
            ("sec-fetch-site", "cross-site"),
        ],
        &format!(r#"{{"key":"{DEV_KEY}"}}"#),
    )
    .await;
    assert_eq!(forged.status, 403);

    let out = plain(
        &mut client,
        Method::DELETE,
        "/console/session",
        &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
        "",
    )
    .await;
    assert_eq!(out.status, 204);
    assert!(
        out.header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0"))
    );
    let after = get_with(&mut client, "/v1/pets", &cookie).await;
    assert_eq!(after.status, 401);
    assert!(
        after.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains("sign in again"))
    );
    server.stop();
}

/// A keys file of the test's own, with the development key and a key `LABEL` made by `keys
/// add` (`read_only` if asked); returns the file and the new key.
fn keys_with(dir: &Path, label: &str, read_only: bool) -> (PathBuf, String) {
    let file = dir.join("api-keys");
    std::fs::copy(cert("dev-keys.txt"), &file).expect("the keys file");
    let mut args = vec!["add", label];
    if read_only {
        args.push("--read-only");
    }
    let key = keys_on(&file, &args);
    (file, key.lines().next().expect("the key").to_owned())
}

#[tokio::test]
async fn a_read_only_key_s_session_reads_and_may_not_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, key) = keys_with(dir.path(), "till", true);
    let server = Server::start_with(Options {
        api_keys: file,
        ..Options::default()
    });
    let mut client = server.h1().await;
    let cookie = sign_in(&mut client, &key).await;
    let who = get_with(&mut client, "/console/session", &cookie).await;
    assert_eq!(
        who.json(),
        serde_json::json!({"label": "till", "readOnly": true})
    );
    let read = get_with(&mut client, "/v1/store/inventory", &cookie).await;
    assert_eq!(read.status, 200);
    let write = plain(
        &mut client,
        Method::POST,
        "/v1/categories",
        &[
            ("cookie", &cookie),
            ("content-type", "application/json"),
            ("sec-fetch-site", "same-origin"),
        ],
        r#"{"name":"Dogs"}"#,
    )
    .await;
    assert_eq!(write.status, 403);
    assert_eq!(write.json()["code"], "forbidden");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_survives_a_restart_and_ends_when_its_key_is_revoked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, key) = keys_with(dir.path(), "carol", false);
    let options = Options {
        api_keys: file.clone(),
        ..Options::default()
    };
    let server = Server::start_with(options);
    let cookie = sign_in(&mut server.h1().await, &key).await;
    let server = server.restart();
    let mut client = server.h1().await;
    let after_restart = get_with(&mut client, "/v1/pets", &cookie).await;
    assert_eq!(after_restart.status, 200, "{:?}", after_restart.body);

    keys_on(&file, &["revoke", "carol"]);
    server.signal("HUP");
    server.wait_for_log("reload done", 1);
    let revoked = get_with(&mut client, "/v1/pets", &cookie).await;
    assert_eq!(revoked.status, 401);
    let who = get_with(&mut client, "/console/session", &cookie).await;
    assert_eq!(who.status, 401);
    server.stop();
}

#[tokio::test]
async fn a_session_unused_for_session_idle_ends() {
    let server = Server::start_with(Options {
        args: vec!["--session-idle".into(), "1s".into()],
        ..Options::default()
    });
    let mut client = server.h1().await;
    let cookie = sign_in(&mut client, DEV_KEY).await;
    let fresh = get_with(&mut client, "/v1/pets", &cookie).await;
    assert_eq!(fresh.status, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = get_with(&mut client, "/v1/pets", &cookie).await;
    assert_eq!(idle.status, 401);
    server.stop();
}

#[tokio::test]
async fn console_path_moves_it_and_no_console_turns_it_off() {
    let moved = Server::start_with(Options {
        args: vec!["--console-path".into(), "/shop/admin".into()],
        ..Options::default()
    });
    let mut client = moved.h1().await;
    assert_eq!(
        plain(&mut client, Method::GET, "/console/", &[], "")
            .await
            .status,
        404
    );
    let page = plain(&mut client, Method::GET, "/shop/admin/", &[], "").await;
    assert_eq!(page.status, 200);
    let html = String::from_utf8(page.body.to_vec()).expect("UTF-8");
    assert!(html.contains("/shop/admin/assets/"), "{html}");
    let reply = plain(
        &mut client,
        Method::POST,
        "/shop/admin/session",
        &[("content-type", "application/json")],
        &format!(r#"{{"key":"{DEV_KEY}"}}"#),
    )
    .await;
    assert_eq!(reply.status, 200);
    let cookie = reply
        .header("set-cookie")
        .expect("cookie")
        .split(';')
        .next()
        .expect("pair")
        .to_owned();
    moved.stop();

    let off = Server::start_with(Options {
        args: vec!["--no-console".into()],
        ..Options::default()
    });
    let mut client = off.h1().await;
    assert_eq!(
        plain(&mut client, Method::GET, "/console/", &[], "")
            .await
            .status,
        404
    );
    // Without a console no cookie stands for a key.
    let list = get_with(&mut client, "/v1/pets", &cookie).await;
    assert_eq!(list.status, 401);
    off.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_opened_on_one_instance_works_on_another() {
    let cluster = cluster();
    let first = Server::start_with(on_postgres(&cluster));
    let second = Server::start_with(on_postgres(&cluster));
    let cookie = sign_in(&mut first.h1().await, DEV_KEY).await;
    let mut client = second.h1().await;
    let reply = plain(
        &mut client,
        Method::POST,
        "/v1/categories",
        &[
            ("cookie", &cookie),
            ("content-type", "application/json"),
            ("sec-fetch-site", "same-origin"),
        ],
        r#"{"name":"Cats"}"#,
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let out = plain(
        &mut client,
        Method::DELETE,
        "/console/session",
        &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
        "",
    )
    .await;
    assert_eq!(out.status, 204);
    // The first instance learns of the sign-out when its cached copy is 30 s old at most;
    // a fresh connection there reads the store for a session it has not cached.
    let third = Server::start_with(on_postgres(&cluster));
    let gone = plain(
        &mut third.h1().await,
        Method::GET,
        "/v1/pets",
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(gone.status, 401);
    third.stop();
    second.stop();
    first.stop();
}
