//! Correctness of one answer per run: a fast wrong answer is no result. Each scenario names
//! what its answer must be; a check returns why it failed, in words for the report. It reads
//! only the sampled answer, never the load loop's counters.

use serde_json::Value;

use crate::load::Sample;

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
    /// 201, a new order: integer `id` and `petId`, status `placed`.
    Placed,
    /// 200, the inventory: five integer counts, the four statuses adding up to `total`.
    Inventory,
}

/// Checks `sample` against `expect`; `Err` says what was wrong.
pub fn check(expect: Expect, sample: Option<&Sample>) -> Result<(), String> {
    let sample = sample.ok_or("no answer arrived in the window to check")?;
    let wanted_status = match expect {
        Expect::Created | Expect::Placed => 201,
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

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}
