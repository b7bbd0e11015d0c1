//! Rate limits: `--rate-limit` per API key and `--auth-failure-limit` per client address give
//! 429 `rate_limited` with `Retry-After`, `RateLimit-Policy` and `RateLimit`; other keys, valid
//! keys from a guessing address and requests without a key are not refused by them.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use hyper::header::AUTHORIZATION;

use crate::support::{Client, DEV_KEY, Options, Reply, Server, cert};

async fn with_authorization(client: &mut Client, authorization: Option<&str>) -> Reply {
    let mut request = client.request(Method::GET, "/v1/pets");
    if let Some(value) = authorization {
        request = request.header(AUTHORIZATION, value);
    }
    client.send(request, Bytes::new()).await
}

async fn with_key(client: &mut Client, key: &str) -> Reply {
    with_authorization(client, Some(&format!("Bearer {key}"))).await
}

/// Checks a 429's body and its three headers; returns the seconds it says to wait.
fn assert_rate_limited(reply: &Reply, policy: &str, quota: u32, window: u64) -> u64 {
    assert_eq!(reply.status, 429, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(body["status"], 429);
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(reply.header("content-type"), Some("application/json"));

    let retry_after: u64 = reply
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("Retry-After is whole seconds");
    assert!(retry_after >= 1, "Retry-After {retry_after}");

    assert_eq!(
        reply.header("ratelimit-policy"),
        Some(format!("\"{policy}\";q={quota};w={window}").as_str())
    );
    let state = reply.header("ratelimit").expect("RateLimit");
    let t = state
        .strip_prefix(&format!("\"{policy}\";r=0;t="))
        .unwrap_or_else(|| panic!("RateLimit {state:?}"));
    let t: u64 = t.parse().expect("t is whole seconds");
    assert!(t >= 1, "t {t}");
    for old in ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"] {
        assert_eq!(reply.header(old), None, "{old}");
    }
    retry_after
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_over_its_rate_gets_429_while_other_keys_go_on_and_after_the_wait_it_works_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, stdout, _) = crate::support::run(&["new-key".as_ref(), "other".as_ref()]);
    assert_eq!(code, Some(0));
    let (other, line) = stdout.split_once('\n').expect("two lines");
    let keys = dir.path().join("api-keys");
    let dev = std::fs::read_to_string(cert("dev-keys.txt")).expect("dev keys");
    std::fs::write(&keys, format!("{dev}\n{line}\n")).expect("write keys");
    // One request every 3 s, a burst of 3: the fourth in a quick row is refused.
    let server = Server::start_with(Options {
        api_keys: keys,
        args: vec!["--rate-burst".into(), "3".into()],
        env: vec![("PETSTORE_RATE_LIMIT".into(), "20/min".into())],
        ..Options::default()
    });
    let mut client = server.h2().await;

    for n in 0..3 {
        let reply = with_key(&mut client, DEV_KEY).await;
        assert_eq!(reply.status, 200, "request {n}");
        assert_eq!(
            reply.header("ratelimit"),
            None,
            "a 2xx carries no RateLimit"
        );
    }
    // A very slow machine may let one more through as the rate refills; never many.
    let mut refused = None;
    for _ in 0..3 {
        let reply = with_key(&mut client, DEV_KEY).await;
        if reply.status != 200 {
            refused = Some(reply);
            break;
        }
    }
    let refused = refused.expect("a 429 within a few requests past the burst");
    let wait = assert_rate_limited(&refused, "per-key", 20, 60);
    assert!(
        wait <= 3,
        "Retry-After {wait}: one request comes back every 3 s"
    );

    assert_eq!(
        with_key(&mut client, other).await.status,
        200,
        "another key"
    );
    assert_eq!(
        with_key(&mut client, DEV_KEY).await.status,
        429,
        "still over"
    );

    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(
        with_key(&mut client, DEV_KEY).await.status,
        200,
        "after Retry-After"
    );
    let logs = server.stop().logs;
    assert!(
        logs.contains("status=429") && logs.contains("key=dev"),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_keys_from_one_address_get_429_after_the_burst_but_a_valid_key_never_does() {
    // One attempt every 10 s, a burst of 5: nothing refills while the test runs.
    let server = Server::start_with(Options {
        args: ["--auth-failure-limit", "6/min", "--auth-failure-burst", "5"]
            .map(String::from)
            .to_vec(),
        ..Options::default()
    });
    let mut client = server.h1().await;

    // No credential, or one of another scheme, is not a guess: it never counts.
    for n in 0..40 {
        let authorization = (n % 2 == 1).then_some("Basic dXNlcjpwYXNz");
        let reply = with_authorization(&mut client, authorization).await;
        assert_eq!(reply.status, 401, "request {n} without a bearer key");
    }

    for n in 0..5 {
        let reply = with_key(&mut client, &format!("wrong-{n}")).await;
        assert_eq!(reply.status, 401, "guess {n} is within the burst");
        assert_eq!(
            reply.header("www-authenticate"),
            Some(r#"Bearer realm="petstore", error="invalid_token""#)
        );
    }
    for n in 5..10 {
        let reply = with_key(&mut client, &format!("wrong-{n}")).await;
        assert_rate_limited(&reply, "auth-failure", 6, 60);
        // The address keeps guessing, and keeps being refused, but the right key goes through.
        assert_eq!(
            with_key(&mut client, DEV_KEY).await.status,
            200,
            "guess {n}"
        );
    }
    let mut fresh = server.h2().await;
    assert_eq!(
        with_key(&mut fresh, "wrong").await.status,
        429,
        "the limit is the address's, not the connection's"
    );
    assert_eq!(with_key(&mut fresh, DEV_KEY).await.status, 200);
    assert_eq!(
        with_authorization(&mut fresh, None).await.status,
        401,
        "no key: still a 401"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_auth_failure_limit_can_be_turned_off() {
    let server = Server::start_with(Options {
        env: vec![("PETSTORE_AUTH_FAILURE_LIMIT".into(), "off".into())],
        args: ["--auth-failure-burst", "1"].map(String::from).to_vec(),
        ..Options::default()
    });
    let mut client = server.h1().await;
    for n in 0..20 {
        assert_eq!(
            with_key(&mut client, "wrong").await.status,
            401,
            "guess {n}"
        );
    }
    server.stop();
}
