//! The Standard Webhooks signature of a delivery: `v1,` and the base64 of HMAC-SHA256 over
//! `id.timestamp.body`, keyed with the secret's bytes, one such signature per secret (space
//! separated) while a rotation keeps several. The receiver accepts a delivery if any matches.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::endpoints::Secret;

/// The `webhook-signature` header's value for a message `id` sent at `timestamp` (Unix
/// seconds) with `body`.
pub fn signature(secrets: &[Secret], id: &str, timestamp: u64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    let mut header = String::new();
    for secret in secrets {
        // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.key()) else {
            continue;
        };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        if !header.is_empty() {
            header.push(' ');
        }
        header.push_str("v1,");
        header.push_str(&STANDARD.encode(mac.finalize().into_bytes()));
    }
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries (their test
    /// suites): this secret, id, timestamp and payload sign to this value.
    #[test]
    fn the_specifications_example_signs_alike() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn every_secret_signs() {
        let a = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        let b = Secret::parse("whsec_c2VjcmV0LWJ5dGVzLWZvci10ZXN0cw==").expect("secret");
        let both = signature(&[a.clone(), b.clone()], "id", 1, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], signature(&[a], "id", 1, b"{}"));
        assert_eq!(parts[1], signature(&[b], "id", 1, b"{}"));
    }
}
