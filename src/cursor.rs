//! The page cursor of every list (pets, orders, categories): which list, filters, search and
//! order it was made for and after which id (and, sorted by name, which name) the next page
//! starts, as the opaque token that next links carry.
//! Pure: no HTTP, no store. It needs no secret, so every instance reading the same store
//! accepts every other's cursors; it is checked, not signed, because it grants nothing a client
//! could not ask for by hand.
//! Invariant: `decode(encode(c)) == Some(c)`, and anything `encode` cannot make decodes to `None`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::order::OrderStatus;
use crate::pet::{PetId, PetStatus};
use crate::search::{SORT_KEY_BYTES, Sort};

/// Layout 1, the first: listPets with at most a status filter. Still what such a list makes,
/// so its tokens read the same as before layout 2 existed.
const VERSION_1: u8 = 1;
/// version, status filter, id (8 bytes, big-endian), check (2 bytes).
const TOKEN_1_BYTES: usize = 12;
/// Layout 2: every other list (issue 29). A token of an unknown version is refused, so the
/// layout can change again later.
const VERSION_2: u8 = 2;
/// version, kind, status filter, whether an id filter is set, the id filter (8 bytes), id
/// (8 bytes), check (2 bytes); every value big-endian.
const TOKEN_2_BYTES: usize = 22;

/// Layout 3: a list with a search or another order than by id (issue 40). Made only for
/// those, so the tokens of every other list read as before.
const VERSION_3: u8 = 3;
/// version, kind, status filter, whether an id filter is set, the id filter (8 bytes), the
/// order, the search's fingerprint (8 bytes), id (8 bytes), the sort key's length; then the
/// sort key and the check (2 bytes).
const TOKEN_3_HEAD: usize = 30;

const KIND_PETS: u8 = 1;
const KIND_ORDERS: u8 = 2;
const KIND_CATEGORIES: u8 = 3;

/// The list a cursor was made for, with its filters, its order and its search (by the
/// search's fingerprint, `Search::fingerprint`; 0 for none): a cursor is only good for the
/// same ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// listPets, by status and by category.
    Pets {
        status: Option<PetStatus>,
        category: Option<i64>,
        sort: Sort,
        search: u64,
    },
    /// listOrders, by status and by pet.
    Orders {
        status: Option<OrderStatus>,
        pet: Option<PetId>,
        sort: Sort,
        search: u64,
    },
    /// listCategories, which has no filter.
    Categories,
}

impl List {
    /// listPets with these filters, by id, without a search.
    #[cfg(test)]
    pub fn pets(status: Option<PetStatus>, category: Option<i64>) -> List {
        List::Pets {
            status,
            category,
            sort: Sort::Id,
            search: 0,
        }
    }

    /// listOrders with these filters, by id, without a search.
    #[cfg(test)]
    pub fn orders(status: Option<OrderStatus>, pet: Option<PetId>) -> List {
        List::Orders {
            status,
            pet,
            sort: Sort::Id,
            search: 0,
        }
    }

    /// The order and the search fingerprint (`Sort::Id` and 0 for a list that has neither).
    pub fn order(self) -> (Sort, u64) {
        match self {
            List::Pets { sort, search, .. } | List::Orders { sort, search, .. } => (sort, search),
            List::Categories => (Sort::Id, 0),
        }
    }
}

/// A position in a list: the next page holds the matching items after the item `after`, and
/// in a list sorted by name after the name `key` (its sort key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub list: List,
    pub after: i64,
    pub key: Option<String>,
}

impl Cursor {
    #[cfg(test)]
    pub fn encode(&self) -> String {
        let mut token = String::with_capacity(32);
        self.encode_into(&mut token);
        token
    }

    /// Appends the token, of the URL-safe base64 alphabet: safe in a query as it is. 16
    /// characters for listPets without a category, 30 for the rest.
    pub fn encode_into(&self, out: &mut String) {
        if self.list.order() != (Sort::Id, 0) {
            self.encode_3(out);
            return;
        }
        let (kind, status, filter) = match self.list {
            List::Pets {
                status,
                category: None,
                ..
            } => {
                let mut bytes = [0u8; TOKEN_1_BYTES];
                bytes[0] = VERSION_1;
                bytes[1] = pet_status_code(status);
                bytes[2..10].copy_from_slice(&self.after.to_be_bytes());
                let check = fletcher16(&bytes[..10]);
                bytes[10..].copy_from_slice(&check.to_be_bytes());
                URL_SAFE_NO_PAD.encode_string(bytes, out);
                return;
            }
            List::Pets {
                status,
                category: Some(category),
                ..
            } => (KIND_PETS, pet_status_code(status), Some(category)),
            List::Orders { status, pet, .. } => {
                (KIND_ORDERS, status.map_or(0, OrderStatus::code), pet)
            }
            List::Categories => (KIND_CATEGORIES, 0, None),
        };
        let mut bytes = [0u8; TOKEN_2_BYTES];
        bytes[0] = VERSION_2;
        bytes[1] = kind;
        bytes[2] = status;
        bytes[3] = u8::from(filter.is_some());
        bytes[4..12].copy_from_slice(&filter.unwrap_or(0).to_be_bytes());
        bytes[12..20].copy_from_slice(&self.after.to_be_bytes());
        let check = fletcher16(&bytes[..20]);
        bytes[20..].copy_from_slice(&check.to_be_bytes());
        URL_SAFE_NO_PAD.encode_string(bytes, out);
    }

    /// Layout 3's token: a list with a search or an order of its own.
    fn encode_3(&self, out: &mut String) {
        let (kind, status, filter) = match self.list {
            List::Pets {
                status, category, ..
            } => (KIND_PETS, pet_status_code(status), category),
            List::Orders { status, pet, .. } => {
                (KIND_ORDERS, status.map_or(0, OrderStatus::code), pet)
            }
            List::Categories => (KIND_CATEGORIES, 0, None),
        };
        let (sort, search) = self.list.order();
        let key = self.key.as_deref().unwrap_or_default().as_bytes();
        let key = &key[..key.len().min(SORT_KEY_BYTES)];
        let mut bytes = Vec::with_capacity(TOKEN_3_HEAD + key.len() + 2);
        bytes.extend_from_slice(&[VERSION_3, kind, status, u8::from(filter.is_some())]);
        bytes.extend_from_slice(&filter.unwrap_or(0).to_be_bytes());
        bytes.push(sort.code());
        bytes.extend_from_slice(&search.to_be_bytes());
        bytes.extend_from_slice(&self.after.to_be_bytes());
        bytes.push(key.len() as u8);
        bytes.extend_from_slice(key);
        let check = fletcher16(&bytes);
        bytes.extend_from_slice(&check.to_be_bytes());
        URL_SAFE_NO_PAD.encode_string(bytes, out);
    }

    /// The cursor in a token, or `None` for anything `encode` did not make: wrong length,
    /// alphabet or version, an unknown kind or filter, or a check that does not match (a token
    /// cut or edited by hand).
    pub fn decode(token: &str) -> Option<Cursor> {
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        match bytes.len() {
            TOKEN_1_BYTES => decode_1(bytes.try_into().ok()?),
            TOKEN_2_BYTES => decode_2(bytes.try_into().ok()?),
            _ if bytes.first() == Some(&VERSION_3) => decode_3(&bytes),
            _ => None,
        }
    }
}

fn decode_3(bytes: &[u8]) -> Option<Cursor> {
    let (body, check) = bytes.split_at_checked(bytes.len().checked_sub(2)?)?;
    if body.len() < TOKEN_3_HEAD || u16::from_be_bytes(check.try_into().ok()?) != fletcher16(body) {
        return None;
    }
    let int = |at: usize| Some(i64::from_be_bytes(body.get(at..at + 8)?.try_into().ok()?));
    let filter = match (body[3], int(4)?) {
        (0, 0) => None,
        (1, value) => Some(value),
        _ => return None,
    };
    let sort = Sort::from_code(body[12])?;
    let search = u64::from_be_bytes(body[13..21].try_into().ok()?);
    let after = int(21)?;
    let key_bytes = &body[TOKEN_3_HEAD..];
    if usize::from(body[29]) != key_bytes.len() || key_bytes.len() > SORT_KEY_BYTES {
        return None;
    }
    // A key only sorted by name; layout 3 only for a list layouts 1 and 2 cannot say.
    let key = match sort {
        Sort::Name => Some(String::from_utf8(key_bytes.to_vec()).ok()?),
        _ if key_bytes.is_empty() => None,
        _ => return None,
    };
    if (sort, search) == (Sort::Id, 0) {
        return None;
    }
    let list = match (body[1], body[2]) {
        (KIND_PETS, status) => List::Pets {
            status: pet_status_from_code(status)?,
            category: filter,
            sort,
            search,
        },
        (KIND_ORDERS, 0) if sort != Sort::Name => List::Orders {
            status: None,
            pet: filter,
            sort,
            search,
        },
        (KIND_ORDERS, status) if sort != Sort::Name => List::Orders {
            status: Some(OrderStatus::from_code(status)?),
            pet: filter,
            sort,
            search,
        },
        _ => return None,
    };
    Some(Cursor { list, after, key })
}

fn decode_1(bytes: [u8; TOKEN_1_BYTES]) -> Option<Cursor> {
    let check = u16::from_be_bytes([bytes[10], bytes[11]]);
    if bytes[0] != VERSION_1 || check != fletcher16(&bytes[..10]) {
        return None;
    }
    let status = pet_status_from_code(bytes[1])?;
    let after = i64::from_be_bytes(bytes[2..10].try_into().ok()?);
    Some(Cursor {
        list: List::Pets {
            status,
            category: None,
            sort: Sort::Id,
            search: 0,
        },
        after,
        key: None,
    })
}

fn decode_2(bytes: [u8; TOKEN_2_BYTES]) -> Option<Cursor> {
    let check = u16::from_be_bytes([bytes[20], bytes[21]]);
    if bytes[0] != VERSION_2 || check != fletcher16(&bytes[..20]) {
        return None;
    }
    let filter_value = i64::from_be_bytes(bytes[4..12].try_into().ok()?);
    // One spelling per cursor: an absent filter is all zeros, so no two tokens mean the same.
    let filter = match bytes[3] {
        0 if filter_value == 0 => None,
        1 => Some(filter_value),
        _ => return None,
    };
    let list = match (bytes[1], bytes[2], filter) {
        // A listPets cursor without a category is layout 1's: `encode` never makes this one.
        (KIND_PETS, _, None) => return None,
        (KIND_PETS, status, category) => List::Pets {
            status: pet_status_from_code(status)?,
            category,
            sort: Sort::Id,
            search: 0,
        },
        (KIND_ORDERS, 0, pet) => List::Orders {
            status: None,
            pet,
            sort: Sort::Id,
            search: 0,
        },
        (KIND_ORDERS, status, pet) => List::Orders {
            status: Some(OrderStatus::from_code(status)?),
            pet,
            sort: Sort::Id,
            search: 0,
        },
        (KIND_CATEGORIES, 0, None) => List::Categories,
        _ => return None,
    };
    let after = i64::from_be_bytes(bytes[12..20].try_into().ok()?);
    Some(Cursor {
        list,
        after,
        key: None,
    })
}

fn pet_status_code(status: Option<PetStatus>) -> u8 {
    status.map_or(0, |status| status.to_code() + 1)
}

fn pet_status_from_code(code: u8) -> Option<Option<PetStatus>> {
    match code {
        0 => Some(None),
        1 => Some(Some(PetStatus::Available)),
        2 => Some(Some(PetStatus::Pending)),
        3 => Some(Some(PetStatus::Sold)),
        _ => None,
    }
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

    fn pet_status() -> impl Strategy<Value = Option<PetStatus>> {
        prop_oneof![
            Just(None),
            Just(Some(PetStatus::Available)),
            Just(Some(PetStatus::Pending)),
            Just(Some(PetStatus::Sold)),
        ]
    }

    fn order_status() -> impl Strategy<Value = Option<OrderStatus>> {
        prop_oneof![
            Just(None),
            Just(Some(OrderStatus::Placed)),
            Just(Some(OrderStatus::Completed)),
            Just(Some(OrderStatus::Cancelled)),
            Just(Some(OrderStatus::Expired)),
        ]
    }

    fn list() -> impl Strategy<Value = List> {
        prop_oneof![
            (pet_status(), proptest::option::of(any::<i64>()))
                .prop_map(|(status, category)| List::pets(status, category)),
            (order_status(), proptest::option::of(any::<i64>()))
                .prop_map(|(status, pet)| List::orders(status, pet)),
            Just(List::Categories),
        ]
    }

    fn is_url_safe(token: &str) -> bool {
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    #[test]
    fn a_token_is_16_url_safe_characters() {
        let token = Cursor {
            list: List::pets(Some(PetStatus::Sold), None),
            after: 900_000,
            key: None,
        }
        .encode();
        assert_eq!(token.len(), 16);
        assert!(is_url_safe(&token), "{token}");
    }

    #[test]
    fn a_token_of_the_first_layout_still_reads_as_it_did() {
        // Made by the server before layout 2: a sold listPets cursor after pet 41.
        let token = "AQMAAAAAAAAAKU4t";
        assert_eq!(
            Cursor::decode(token),
            Some(Cursor {
                list: List::pets(Some(PetStatus::Sold), None),
                after: 41,
                key: None,
            })
        );
        assert_eq!(
            Cursor::decode(token).map(|cursor| cursor.encode()),
            Some(token.to_owned())
        );
    }

    #[test]
    fn tokens_of_the_second_layout_are_30_url_safe_characters() {
        for list in [
            List::pets(None, Some(-3)),
            List::orders(Some(OrderStatus::Expired), None),
            List::Categories,
        ] {
            let token = Cursor {
                list,
                after: 7,
                key: None,
            }
            .encode();
            assert_eq!(token.len(), 30, "{list:?}");
            assert!(is_url_safe(&token), "{token}");
        }
    }

    #[test]
    fn empty_cut_padded_and_edited_tokens_are_refused() {
        for list in [List::pets(None, None), List::orders(None, Some(4))] {
            let token = Cursor {
                list,
                after: 41,
                key: None,
            }
            .encode();
            let mut edited = token.clone().into_bytes();
            edited[5] = if edited[5] == b'A' { b'B' } else { b'A' };
            let edited = String::from_utf8(edited).expect("ASCII");
            for bad in [
                "",
                &token[..token.len() - 1],
                &format!("{token}A"),
                &format!("{token}=="),
                &edited,
                "not a cursor",
                "AAAAAAAAAAAAAAAA",
                "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            ] {
                assert_eq!(Cursor::decode(bad), None, "{bad:?}");
            }
        }
    }

    /// A layout 2 token with its check made right, whatever else its bytes say.
    fn layout_2(mut bytes: [u8; TOKEN_2_BYTES]) -> String {
        let check = fletcher16(&bytes[..20]);
        bytes[20..].copy_from_slice(&check.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn a_well_checked_token_that_encode_never_makes_is_refused() {
        let mut base = [0u8; TOKEN_2_BYTES];
        base[0] = VERSION_2;
        let with = |changes: &[(usize, u8)]| {
            let mut bytes = base;
            for &(at, value) in changes {
                bytes[at] = value;
            }
            layout_2(bytes)
        };
        // The categories list unchanged is a good token: the others differ from it in one way.
        assert!(Cursor::decode(&with(&[(1, KIND_CATEGORIES)])).is_some());
        for (what, token) in [
            ("version 3", with(&[(0, 3), (1, KIND_CATEGORIES)])),
            ("kind 0", with(&[])),
            ("kind 4", with(&[(1, 4)])),
            ("pets without a category", with(&[(1, KIND_PETS)])),
            ("pet status 4", with(&[(1, KIND_PETS), (2, 4), (3, 1)])),
            ("order status 5", with(&[(1, KIND_ORDERS), (2, 5)])),
            ("filter flag 2", with(&[(1, KIND_ORDERS), (3, 2)])),
            (
                "an absent filter's value",
                with(&[(1, KIND_ORDERS), (11, 1)]),
            ),
            (
                "a category with a status",
                with(&[(1, KIND_CATEGORIES), (2, 1)]),
            ),
            (
                "a category with a filter",
                with(&[(1, KIND_CATEGORIES), (3, 1)]),
            ),
        ] {
            assert_eq!(Cursor::decode(&token), None, "{what}");
        }
    }

    proptest! {
        #[test]
        fn every_cursor_decodes_to_itself(list in list(), after in any::<i64>()) {
            let cursor = Cursor { list, after, key: None };
            prop_assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        }

        #[test]
        fn any_string_decodes_or_not_without_panicking(text in any::<String>()) {
            if let Some(cursor) = Cursor::decode(&text) {
                prop_assert_eq!(cursor.encode(), text);
            }
        }

        #[test]
        fn any_well_checked_bytes_decode_only_to_a_cursor_that_encodes_to_them(
            bytes in any::<[u8; TOKEN_2_BYTES]>(),
            version_2 in any::<bool>(),
        ) {
            let mut bytes = bytes;
            if version_2 {
                bytes[0] = VERSION_2;
            }
            let token = layout_2(bytes);
            if let Some(cursor) = Cursor::decode(&token) {
                prop_assert_eq!(cursor.encode(), token);
            }
        }
    }
}
