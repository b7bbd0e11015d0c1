//! A kind of animal the store sells (issue 29): `Category`, `NewCategory`, `CategoryPatch`,
//! their JSON, and the name rule (1 to 100 characters, no control characters, unique ignoring
//! case: `name_key`). A
//! pet's `categoryId` may still name no category, as the spec allows any int64. Pure.

use serde::{Deserialize, Serialize};

use crate::body;

/// The identifier the store assigns to a category, from 1 up, never reused.
pub type CategoryId = i64;

/// Most characters of a category's name.
pub const MAX_NAME_CHARS: usize = 100;

/// A category as stored and answered: `{"id","name"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Category {
    pub id: CategoryId,
    pub name: String,
}

impl Category {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an id and a string always encode")
    }

    pub fn from_json(json: &[u8]) -> Result<Category, serde_json::Error> {
        serde_json::from_slice(json)
    }
}

/// A client's new category: its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCategory {
    pub name: String,
}

/// A client's change to a category (a JSON Merge Patch): the name, if given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CategoryPatch {
    pub name: Option<String>,
}

impl NewCategory {
    /// Reads a request body: an object with `name` only (`id` is the server's).
    pub fn from_json(body: &[u8]) -> Result<NewCategory, String> {
        let name = read(body)?.ok_or("name is required")?;
        Ok(NewCategory { name })
    }
}

impl CategoryPatch {
    pub fn from_json(body: &[u8]) -> Result<CategoryPatch, String> {
        Ok(CategoryPatch { name: read(body)? })
    }
}

fn read(body: &[u8]) -> Result<Option<String>, String> {
    let mut name = None;
    for (member, value) in body::members(body)? {
        match member.as_str() {
            "name" => name = Some(check_name(body::text("name", value, MAX_NAME_CHARS)?)?),
            "id" => return Err("id is assigned by the server: leave it out".into()),
            other => return Err(format!("unknown member {other:?}: a category takes name")),
        }
    }
    Ok(name)
}

fn check_name(name: String) -> Result<String, String> {
    if name.trim().is_empty() {
        return Err("name must not be empty or only white space".into());
    }
    if name.trim() != name {
        return Err("name must not begin or end with white space".into());
    }
    // A label on the console and in lists: a control character in it is a mistake, and
    // PostgreSQL's text cannot keep a 0 at all.
    if name.chars().any(char::is_control) {
        return Err(
            "name must not hold control characters (U+0000 to U+001F, U+007F to U+009F)".into(),
        );
    }
    Ok(name)
}

/// What two names must not share to be told apart: the name in lower case, so "Dogs" and
/// "dogs" are one category. Both engines keep it unique.
pub fn name_key(name: &str) -> String {
    name.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_to_a_hundred_characters_without_outer_white_space() {
        assert_eq!(
            NewCategory::from_json(br#"{"name":"Dogs"}"#),
            Ok(NewCategory {
                name: "Dogs".into()
            })
        );
        let hundred = format!(r#"{{"name":"{}"}}"#, "ü".repeat(100));
        assert!(NewCategory::from_json(hundred.as_bytes()).is_ok());
        for body in [
            r#"{}"#,
            r#"{"name":""}"#,
            r#"{"name":"  "}"#,
            r#"{"name":" Dogs"}"#,
            r#"{"name":"Õ\u0000"}"#,
            r#"{"name":"Do\tgs"}"#,
            r#"{"name":"Dogs","id":1}"#,
            r#"{"name":"Dogs","x":1}"#,
            r#"{"name":1}"#,
            &format!(r#"{{"name":"{}"}}"#, "a".repeat(101)),
        ] {
            assert!(NewCategory::from_json(body.as_bytes()).is_err(), "{body}");
        }
        assert_eq!(
            CategoryPatch::from_json(b"{}"),
            Ok(CategoryPatch::default())
        );
        assert_eq!(name_key("DoGs"), name_key("dogs"));
    }

    #[test]
    fn a_category_reads_back() {
        let category = Category {
            id: 4,
            name: "Cats".into(),
        };
        assert_eq!(category.to_json(), br#"{"id":4,"name":"Cats"}"#);
        assert_eq!(
            Category::from_json(&category.to_json()).expect("reads"),
            category
        );
    }
}
