//! The page cursor of listPets: where the next page starts (after which id) and for which
//! status filter, as the opaque token that next links carry. Pure: no HTTP, no store. It needs
//! no secret, so every instance reading the same store accepts every other's cursors; it is
//! checked, not signed, because it grants nothing a client could not ask for by hand.
//! Invariant: `decode(encode(c)) == Some(c)`, and anything `encode` cannot make decodes to `None`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::pet::{PetId, PetStatus};

/// The layout below; a token of another version is refused, so the layout can change later.
const VERSION: u8 = 1;
/// version, filter, id (8 bytes, big-endian), check (2 bytes).
const TOKEN_BYTES: usize = 12;

/// A position in a list: the next page holds the matching pets with ids above `after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The status filter of the list the cursor was made for; a cursor is only good for it.
    pub status: Option<PetStatus>,
    pub after: PetId,
}

impl Cursor {
    #[cfg(test)]
    pub fn encode(&self) -> String {
        let mut token = String::with_capacity(16);
        self.encode_into(&mut token);
        token
    }

    /// Appends the token, 16 characters of the URL-safe base64 alphabet: safe in a query as
    /// it is.
    pub fn encode_into(&self, out: &mut String) {
        let mut bytes = [0u8; TOKEN_BYTES];
        bytes[0] = VERSION;
        bytes[1] = filter_code(self.status);
        bytes[2..10].copy_from_slice(&self.after.to_be_bytes());
        let check = fletcher16(&bytes[..10]);
        bytes[10..].copy_from_slice(&check.to_be_bytes());
        URL_SAFE_NO_PAD.encode_string(bytes, out);
    }

    /// The cursor in a token, or `None` for anything `encode` did not make: wrong length,
    /// alphabet or version, an unknown filter, or a check that does not match (a token cut or
    /// edited by hand).
    pub fn decode(token: &str) -> Option<Cursor> {
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        let bytes: [u8; TOKEN_BYTES] = bytes.try_into().ok()?;
        let check = u16::from_be_bytes([bytes[10], bytes[11]]);
        if bytes[0] != VERSION || check != fletcher16(&bytes[..10]) {
            return None;
        }
        let status = match bytes[1] {
            0 => None,
            1 => Some(PetStatus::Available),
            2 => Some(PetStatus::Pending),
            3 => Some(PetStatus::Sold),
            _ => return None,
        };
        let after = PetId::from_be_bytes(bytes[2..10].try_into().ok()?);
        Some(Cursor { status, after })
    }
}

fn filter_code(status: Option<PetStatus>) -> u8 {
    status.map_or(0, |status| status.to_code() + 1)
}

/// Fletcher's 16-bit checksum: catches a token that was cut, padded or edited by hand. It is
/// not a signature and need not be one (see the module header).
fn fletcher16(bytes: &[u8]) -> u16 {
    let (mut low, mut high) = (0u16, 0u16);
    for &b in bytes {
        low = (low + u16::from(b)) % 255;
        high = (high + low) % 255;
    }
    (high << 8) | low
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn status() -> impl Strategy<Value = Option<PetStatus>> {
        prop_oneof![
            Just(None),
            Just(Some(PetStatus::Available)),
            Just(Some(PetStatus::Pending)),
            Just(Some(PetStatus::Sold)),
        ]
    }

    #[test]
    fn a_token_is_16_url_safe_characters() {
        let token = Cursor {
            status: Some(PetStatus::Sold),
            after: 900_000,
        }
        .encode();
        assert_eq!(token.len(), 16);
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{token}"
        );
    }

    #[test]
    fn empty_cut_padded_and_edited_tokens_are_refused() {
        let token = Cursor {
            status: None,
            after: 41,
        }
        .encode();
        let mut edited = token.clone().into_bytes();
        edited[5] = if edited[5] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(edited).expect("ASCII");
        for bad in [
            "",
            &token[..15],
            &format!("{token}A"),
            &format!("{token}=="),
            &edited,
            "not a cursor",
            "AAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn every_cursor_decodes_to_itself(status in status(), after in any::<PetId>()) {
            let cursor = Cursor { status, after };
            prop_assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        }

        #[test]
        fn any_string_decodes_or_not_without_panicking(text in any::<String>()) {
            if let Some(cursor) = Cursor::decode(&text) {
                prop_assert_eq!(cursor.encode(), text);
            }
        }
    }
}
