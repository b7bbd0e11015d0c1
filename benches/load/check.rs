//! Correctness of one answer per run: a fast wrong answer is no result. Each scenario names
//! what its answer must be; a check returns why it failed, in words for the report. It reads
//! only the sampled answer, never the load loop's counters.

use serde_json::Value;

use crate::load::Sample;
use crate::names;

/// What a run's sampled answer must be.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// 200, a JSON array of 20 objects with integer ids.
    List20,
    /// 200, a non-empty array of at most 20 pets, every one `"status":"sold"`.
    OnlySold,
    /// 200, the pet whose id the path asked for.
    AskedPet,
    /// 201, the new pet with an integer id.
    Created,
    /// 201, the new pet with an integer id and a name (a create of `fill::named_creates`).
    CreatedNamed,
    /// 200, a page of a search or sort (issue 40): as many pets as the path's `limit` (20 when
    /// none), each named to match the path's `q` and of its `status` when it has them, in the
    /// order of its `sort` (`id` when none).
    Found,
    /// 201, a new order: integer `id` and `petId`, status `placed`.
    Placed,
    /// 200, the inventory: five integer counts, the four statuses adding up to `total`.
    Inventory,
}

/// Checks `sample` against `expect`; `Err` says what was wrong.
pub fn check(expect: Expect, sample: Option<&Sample>) -> Result<(), String> {
    let sample = sample.ok_or("no answer arrived in the window to check")?;
    let wanted_status = match expect {
        Expect::Created | Expect::CreatedNamed | Expect::Placed => 201,
        _ => 200,
    };
    if sample.status != wanted_status {
        return Err(format!(
            "{} answered {} (wanted {wanted_status}): {}",
            sample.path,
            sample.status,
            excerpt(&sample.body)
        ));
    }
    let json: Value = serde_json::from_slice(&sample.body).map_err(|e| {
        format!(
            "{}: body is not JSON ({e}): {}",
            sample.path,
            excerpt(&sample.body)
        )
    })?;
    let wrong = |why: &str| Err(format!("{}: {why}: {}", sample.path, excerpt(&sample.body)));
    match expect {
        Expect::List20 => {
            let Some(pets) = json.as_array() else {
                return wrong("not an array");
            };
            if pets.len() != 20 || !pets.iter().all(|pet| pet["id"].is_i64()) {
                return wrong("not 20 pets with integer ids");
            }
        }
        Expect::OnlySold => {
            let Some(pets) = json.as_array() else {
                return wrong("not an array");
            };
            if pets.is_empty() || pets.len() > 20 {
                return wrong("not 1 to 20 pets");
            }
            if !pets
                .iter()
                .all(|pet| pet["status"] == "sold" && pet["id"].is_i64())
            {
                return wrong("a pet that is not sold");
            }
        }
        Expect::AskedPet => {
            let asked = sample
                .path
                .rsplit('/')
                .next()
                .and_then(|id| id.parse::<i64>().ok());
            if asked.is_none() || json["id"].as_i64() != asked {
                return wrong("not the pet asked for");
            }
        }
        Expect::Created => {
            if !json["id"].is_i64() || json["name"] != "bench" {
                return wrong("not the new pet with an id");
            }
        }
        Expect::CreatedNamed => {
            if !json["id"].is_i64() || json["name"].as_str().is_none_or(str::is_empty) {
                return wrong("not the new pet with an id and a name");
            }
        }
        Expect::Found => {
            if let Err(why) = found_page(&sample.path, &json, false) {
                return wrong(&why);
            }
        }
        Expect::Placed => {
            if !json["id"].is_i64() || !json["petId"].is_i64() || json["status"] != "placed" {
                return wrong("not a placed order with ids");
            }
        }
        Expect::Inventory => {
            let count = |name: &str| json[name].as_u64();
            let parts: Option<Vec<u64>> = ["available", "pending", "sold", "unset"]
                .into_iter()
                .map(count)
                .collect();
            match (parts, count("total")) {
                (Some(parts), Some(total)) if parts.iter().sum::<u64>() == total => {}
                _ => return wrong("not four counts adding up to the total"),
            }
        }
    }
    Ok(())
}

/// Whether `json` is a right page for `path`, a list of pets with `q`, `status`, `sort` and
/// `limit` in its query: as many pets as the limit, or from 0 to it when `short` (a walk's last
/// page); `Err` says what is wrong.
pub fn found_page(path: &str, json: &Value, short: bool) -> Result<(), String> {
    let param = |name: &str| query_param(path, name);
    let limit = param("limit").map_or(Ok(20), |limit| limit.parse::<usize>());
    let limit = limit.map_err(|_| "the path's limit is not a number".to_owned())?;
    let pets = json.as_array().ok_or("not an array")?;
    if pets.len() > limit || (!short && pets.len() < limit) {
        return Err(format!("{} pets, not {limit}", pets.len()));
    }
    let q = param("q").unwrap_or_default();
    let status = param("status");
    let mut keys = Vec::with_capacity(pets.len());
    for pet in pets {
        let (Some(id), Some(name)) = (pet["id"].as_i64(), pet["name"].as_str()) else {
            return Err("a pet without an integer id and a name".to_owned());
        };
        if !names::matches(&q, name) {
            return Err(format!("pet {id} named {name:?} does not match q={q:?}"));
        }
        if let Some(status) = &status
            && pet["status"].as_str() != Some(status.as_str())
        {
            return Err(format!("pet {id} is not {status}"));
        }
        keys.push((names::sort_key(name), id));
    }
    let ordered = match param("sort").as_deref() {
        None | Some("id") => keys.windows(2).all(|w| w[0].1 < w[1].1),
        Some("-id") => keys.windows(2).all(|w| w[0].1 > w[1].1),
        Some("name") => keys.windows(2).all(|w| w[0] < w[1]),
        Some(other) => return Err(format!("sort={other} is not one the bench knows")),
    };
    if !ordered {
        return Err("pets out of the sort's order".to_owned());
    }
    Ok(())
}

/// The value of the query parameter `name` of `path`, percent-decoded (`+` a space).
pub fn query_param(path: &str, name: &str) -> Option<String> {
    let (_, query) = path.split_once('?')?;
    let value = query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then_some(value)
    })?;
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| {
            bytes
                .get(at..at + 2)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        };
        match bytes[i] {
            b'+' => decoded.push(b' '),
            b'%' if hex(i + 1).is_some() => {
                decoded.extend(hex(i + 1));
                i += 2;
            }
            b => decoded.push(b),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&decoded).into_owned())
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}
