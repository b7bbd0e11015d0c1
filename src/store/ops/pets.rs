//! A pet: its declaration (`store/resource.rs`: its table, its JSON as the API sends it, its
//! indexes by status and by category) and its writes: create (with its Idempotency-Key), patch
//! and delete, each with its precondition, and the hold a placed order keeps on its pet (a
//! held pet keeps its status and stays).

use crate::pet::{NewPet, Pet, PetId, PetPatch, PetStatus};
use crate::search;
use crate::store::claims::Keyed;
use crate::store::model::{Change, Created, Precondition, StoreError, StoredPet};
use crate::store::ops::{Rule, Touches};
use crate::store::resource::{
    Column, Counter, Entry, Holds, Index, Part, PartKind, Postgres, Resource, Value,
};
use crate::store::txn::{Outcome, Txn};
use crate::subject::Subject;

/// (status code, pet id) to the pet's JSON, for every pet that has a status: a status filter
/// is one range, read without `pets` (a covering index: a lookup in `pets` per pet cost half
/// the throughput and grew with the store, benches/load).
pub(crate) static PETS_BY_STATUS: Index = Index {
    name: "pets_by_status",
    words: "status index",
    parts: &[PartKind::Code(status_name)],
    unique: false,
    holds: Holds::Stored,
};

/// (category id, status code or `NO_STATUS`, pet id) for every pet: `?categoryId=` is a range
/// (with a status one, without four merged by id), and a category in use is one lookup. Not
/// covering: a page reads each pet from `pets`, a bounded cost per page.
pub(crate) static PETS_BY_CATEGORY: Index = Index {
    name: "pets_by_category",
    words: "category index",
    parts: &[PartKind::Int, PartKind::Code(status_name)],
    unique: false,
    holds: Holds::Nothing,
};

/// (term, pet id) for every term a pet's name is found by (`search::prefixes`), holding the
/// code `PETS_BY_CATEGORY` files it under: a search in id order walks the terms' ranges
/// together from the cursor on, and a status filter reads the code, not the pet.
pub(crate) static PETS_BY_WORD: Index = Index {
    name: "pets_by_word",
    words: "word index",
    parts: &[PartKind::Text],
    unique: false,
    holds: Holds::Code,
};

/// (term, sort key, pet id): the same terms, in name order, for a search sorted by name.
pub(crate) static PETS_BY_WORD_NAME: Index = Index {
    name: "pets_by_word_name",
    words: "word index by name",
    parts: &[PartKind::Text, PartKind::Text],
    unique: false,
    holds: Holds::Code,
};

/// (sort key, pet id) for every pet, holding its `PETS_BY_CATEGORY` code: `sort=name`.
pub(crate) static PETS_BY_NAME: Index = Index {
    name: "pets_by_name",
    words: "name index",
    parts: &[PartKind::Text],
    unique: false,
    holds: Holds::Code,
};

/// The code `PETS_BY_CATEGORY` files a pet without a status under.
pub(crate) const NO_STATUS: u8 = 3;

/// The codes a pet's status is filed under, in code order, `NO_STATUS` last.
pub(crate) const STATUS_CODES: [u8; 4] = [0, 1, 2, NO_STATUS];

/// The code `PETS_BY_CATEGORY` files a pet of this status under.
pub(crate) fn category_status_code(status: Option<PetStatus>) -> u8 {
    status.map_or(NO_STATUS, PetStatus::to_code)
}

fn status_name(code: u8) -> Option<&'static str> {
    match code {
        NO_STATUS => Some("no status"),
        _ => [PetStatus::Available, PetStatus::Pending, PetStatus::Sold]
            .get(usize::from(code))
            .map(|status| status.as_str()),
    }
}

impl Resource for Pet {
    const KIND: crate::subject::Kind = crate::subject::Kind::Pet;
    // The oldest counter, from before there were others: its name says only `id`.
    const COUNTER: Counter = Counter::named("next_id");
    const TABLE: &'static str = "pets";
    const INDEXES: &'static [&'static Index] = &[
        &PETS_BY_STATUS,
        &PETS_BY_CATEGORY,
        &PETS_BY_NAME,
        &PETS_BY_WORD,
        &PETS_BY_WORD_NAME,
    ];
    /// The pet's JSON as the API sends it, with its status, category, sort key and revision
    /// beside it for the indexes and the preconditions; the revision, the sort key and the
    /// words (`pet_words`: each term of `search::prefixes` with its pet and sort key) are the
    /// engine's to keep (`postgres/txn.rs`), since folding is Rust's, not SQL's. Every index
    /// reads from its cursor on; the text columns compare bytewise (`COLLATE "C"`), as redb's
    /// keys do, so both stores sort names alike and a cursor's key means the same to both.
    const POSTGRES: Postgres = Postgres {
        columns: &["status", "category_id", "json"],
        stored: "json",
        migrations: &[
            (
                1,
                "CREATE TABLE pets (
                    id bigint PRIMARY KEY,
                    status smallint,
                    revision bigint NOT NULL,
                    json text NOT NULL
                );
                CREATE INDEX pets_by_status ON pets (status, id);",
            ),
            (
                4,
                "ALTER TABLE pets ADD COLUMN category_id bigint;
                UPDATE pets SET category_id = (json::jsonb->>'categoryId')::bigint;
                ALTER TABLE pets ALTER COLUMN category_id SET NOT NULL;
                CREATE INDEX pets_by_category ON pets (category_id, id);
                CREATE INDEX pets_by_category_status ON pets (category_id, status, id);",
            ),
            // `name_key` and `pet_words` are filled from the pets by `postgres/schema.rs`
            // after this, which then makes `name_key` NOT NULL. No foreign key: a pet's words
            // change in its own transaction, under its row's lock. The larger sample of terms
            // names more of the common ones, which a search of several terms walks last
            // (`postgres/handle.rs`).
            (
                6,
                r#"ALTER TABLE pets ADD COLUMN name_key text COLLATE "C";
                CREATE INDEX pets_by_name ON pets (name_key, id);
                CREATE TABLE pet_words (
                    term text COLLATE "C" NOT NULL,
                    pet_id bigint NOT NULL,
                    name_key text COLLATE "C" NOT NULL,
                    PRIMARY KEY (term, pet_id)
                );
                CREATE INDEX pet_words_by_name ON pet_words (term, name_key, pet_id);
                ALTER TABLE pet_words ALTER COLUMN term SET STATISTICS 1000;"#,
            ),
        ],
    };

    fn id(&self) -> i64 {
        self.id
    }

    fn columns(&self) -> Vec<Column> {
        let status = self.status.map(|status| i16::from(status.to_code()));
        vec![
            Column::Code(status),
            Column::Int(Some(self.category_id)),
            Column::Text(String::from_utf8_lossy(&self.to_json()).into_owned()),
        ]
    }

    fn encode(&self) -> Vec<u8> {
        self.to_json()
    }

    fn json(&self) -> Vec<u8> {
        self.to_json()
    }

    fn decode(id: i64, stored: &[u8]) -> Result<Pet, StoreError> {
        crate::store::model::read_pet(id, stored)
    }

    fn entries<'a>(&self, stored: &'a [u8]) -> Vec<Entry<'a>> {
        let search::Indexed { sort_key, terms } = search::index(&self.name);
        let mut entries = Vec::with_capacity(3 + 2 * terms.len());
        if let Some(status) = self.status {
            let parts = [Part::Code(status.to_code())];
            entries.push(PETS_BY_STATUS.entry(self.id, &parts, Value::Stored(stored)));
        }
        let code = category_status_code(self.status);
        let parts = [Part::Int(self.category_id), Part::Code(code)];
        entries.push(PETS_BY_CATEGORY.entry(self.id, &parts, Value::Nothing));
        let name = Part::Text(sort_key.as_str().into());
        entries.push(PETS_BY_NAME.entry(self.id, std::slice::from_ref(&name), Value::Code(code)));
        for term in &terms {
            let term = Part::Text(term.as_str().into());
            entries.push(PETS_BY_WORD.entry(
                self.id,
                std::slice::from_ref(&term),
                Value::Code(code),
            ));
            let parts = [term, name.clone()];
            entries.push(PETS_BY_WORD_NAME.entry(self.id, &parts, Value::Code(code)));
        }
        entries
    }
}

/// Creates `pet` under the next pet id. With a key, a live record of its scope answers instead
/// (the first create's pet, or `IdempotencyKeyReused`): checked here, in the transaction, since
/// a retry may have passed the front's check before the key's first create committed.
pub(crate) struct CreatePet {
    pub(crate) pet: NewPet,
    pub(crate) keyed: Option<Keyed>,
}

impl Rule for CreatePet {
    type Answer = Created;

    fn touches(&self, touches: &mut Touches) {
        touches.new_pets += 1;
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<Created> {
        let id = match txn.next_id(Pet::COUNTER).await? {
            Ok(id) => id,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(keyed) = &self.keyed
            && let Some(held) = txn.claim_record(keyed, Subject::pet(id)).await?
        {
            return Ok(held
                .answer(&keyed.key, &self.pet, txn.now())
                .unwrap_or_else(|| {
                    Err(StoreError::Corrupt(
                        "a live idempotency record expired mid-transaction".into(),
                    ))
                }));
        }
        txn.take_id(Pet::COUNTER);
        let pet = txn.put_pet(None, &self.pet.clone().into_pet(id)).await?;
        txn.push(Change::pet(id, 1, Some(pet.json.clone())));
        Ok(Ok(Created {
            pet,
            replayed: false,
        }))
    }

    fn release(&mut self) {
        self.keyed = None;
    }
}

/// Applies `patch` to pet `id` if its revision meets `precondition`: `NotFound`,
/// `PreconditionFailed`, then, for a change of its status while a placed order holds it,
/// `PetReserved`. Answers the pet at its new revision.
pub(crate) struct PatchPet {
    pub(crate) id: PetId,
    pub(crate) patch: PetPatch,
    pub(crate) precondition: Precondition,
}

impl Rule for PatchPet {
    type Answer = StoredPet;

    fn touches(&self, touches: &mut Touches) {
        touches.pets.push(self.id);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<StoredPet> {
        let id = self.id;
        let (old, revision) = match current(txn, id, &self.precondition).await? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        if self.patch.status.is_some()
            && let Some(order) = txn.holding_order(id).await?
        {
            return Ok(Err(StoreError::PetReserved { pet: id, order }));
        }
        let new = self.patch.clone().apply(old.clone());
        let pet = txn.put_pet(Some((&old, revision)), &new).await?;
        txn.push(Change::pet(id, pet.revision, Some(pet.json.clone())));
        Ok(Ok(pet))
    }
}

/// Removes pet `id` if its revision meets `precondition`: `NotFound`, `PreconditionFailed`,
/// then `PetReserved` while a placed order holds it. Answers the revision it was removed at.
pub(crate) struct DeletePet {
    pub(crate) id: PetId,
    pub(crate) precondition: Precondition,
}

impl Rule for DeletePet {
    type Answer = u64;

    fn touches(&self, touches: &mut Touches) {
        touches.pets.push(self.id);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<u64> {
        let id = self.id;
        let (old, revision) = match current(txn, id, &self.precondition).await? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(order) = txn.holding_order(id).await? {
            return Ok(Err(StoreError::PetReserved { pet: id, order }));
        }
        txn.remove_pet(&old).await?;
        txn.push(Change::pet(id, revision, None));
        Ok(Ok(revision))
    }
}

/// The pet `id` and its revision, if it exists (`NotFound`) and meets `precondition`
/// (`PreconditionFailed`).
pub(super) async fn current<T: Txn>(
    txn: &mut T,
    id: PetId,
    precondition: &Precondition,
) -> Outcome<(crate::pet::Pet, u64)> {
    let Some((pet, revision)) = txn.pet(id).await? else {
        return Ok(Err(StoreError::NotFound(Subject::pet(id))));
    };
    if !precondition.allows(revision) {
        return Ok(Err(StoreError::PreconditionFailed));
    }
    Ok(Ok((pet, revision)))
}
