//! A category: its declaration (`store/resource.rs`: its table, its JSON, the index of its
//! names) and its writes: create, rename and delete, with its name unique ignoring case
//! (`category::name_key`) and no category removed while a pet names it.

use crate::category::{Category, CategoryId, CategoryPatch, NewCategory, name_key};
use crate::event::EventType;
use crate::store::model::{Change, StoreError};
use crate::store::ops::{Rule, Touches};
use crate::store::resource::{
    Column, Counter, Entry, Holds, Index, Part, PartKind, Postgres, Resource, Value,
};
use crate::store::txn::{Outcome, Txn};
use crate::subject::Subject;

/// A category's name as it must be unique (`category::name_key`) to its id.
pub(crate) static CATEGORY_NAMES: Index = Index {
    name: "category_names",
    words: "category names",
    parts: &[PartKind::Text],
    unique: true,
    holds: Holds::Nothing,
};

impl Resource for Category {
    const KIND: crate::subject::Kind = crate::subject::Kind::Category;
    const COUNTER: Counter = Counter::named("next_category_id");
    const TABLE: &'static str = "categories";
    const INDEXES: &'static [&'static Index] = &[&CATEGORY_NAMES];
    /// The name, and beside it `name_key`, unique.
    const POSTGRES: Postgres = Postgres {
        columns: &["name", "name_key"],
        stored: "json_build_object('id', id, 'name', name)::text",
        migrations: &[(
            4,
            "CREATE TABLE categories (
                id bigint PRIMARY KEY,
                name text NOT NULL,
                name_key text NOT NULL UNIQUE
            );",
        )],
    };

    fn id(&self) -> i64 {
        self.id
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::Text(self.name.clone()),
            Column::Text(name_key(&self.name)),
        ]
    }

    fn encode(&self) -> Vec<u8> {
        self.to_json()
    }

    fn json(&self) -> Vec<u8> {
        self.to_json()
    }

    fn decode(id: i64, stored: &[u8]) -> Result<Category, StoreError> {
        Category::from_json(stored)
            .map_err(|e| StoreError::Corrupt(format!("category {id} does not read back: {e}")))
    }

    fn entries<'a>(&self, _stored: &'a [u8]) -> Vec<Entry<'a>> {
        let key = name_key(&self.name);
        vec![CATEGORY_NAMES.entry(self.id, &[Part::Text(key.into())], Value::Nothing)]
    }
}

/// Creates a category under the next category id: `NameTaken` when another has its name.
pub(crate) struct CreateCategory(pub(crate) NewCategory);

/// Every category write holds the counter, even one that gives no id: names then change one
/// transaction at a time, so a check for a name taken cannot race a concurrent rename.
fn touches_names(touches: &mut Touches) {
    touches.count(Category::COUNTER);
}

impl Rule for CreateCategory {
    type Answer = Category;

    fn touches(&self, touches: &mut Touches) {
        touches_names(touches);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<Category> {
        let new = &self.0;
        if txn.category_named(&name_key(&new.name)).await?.is_some() {
            return Ok(Err(StoreError::NameTaken(new.name.clone())));
        }
        let id = match txn.next_id(Category::COUNTER).await? {
            Ok(id) => id,
            Err(e) => return Ok(Err(e)),
        };
        txn.take_id(Category::COUNTER);
        let category = Category {
            id,
            name: new.name.clone(),
        };
        txn.put(None, &category).await?;
        let created = EventType::CategoryCreated;
        txn.push(Change::category(created, id, Some(&category)));
        Ok(Ok(category))
    }
}

/// Renames category `id`: `CategoryNotFound`, then `NameTaken` when another category has the
/// name. An empty patch answers the category as it is.
pub(crate) struct PatchCategory {
    pub(crate) id: CategoryId,
    pub(crate) patch: CategoryPatch,
}

impl Rule for PatchCategory {
    type Answer = Category;

    fn touches(&self, touches: &mut Touches) {
        touches_names(touches);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<Category> {
        let id = self.id;
        let Some(old) = txn.get::<Category>(id).await? else {
            return Ok(Err(StoreError::NotFound(Subject::category(id))));
        };
        let Some(name) = &self.patch.name else {
            return Ok(Ok(old));
        };
        let holder = txn.category_named(&name_key(name)).await?;
        if holder.is_some_and(|holder| holder != id) {
            return Ok(Err(StoreError::NameTaken(name.clone())));
        }
        let new = Category {
            id,
            name: name.clone(),
        };
        txn.put(Some(&old), &new).await?;
        txn.push(Change::category(EventType::CategoryUpdated, id, Some(&new)));
        Ok(Ok(new))
    }
}

/// Removes category `id`: `CategoryNotFound`, then `CategoryInUse` while any pet names it.
/// Answers the id removed.
pub(crate) struct DeleteCategory(pub(crate) CategoryId);

impl Rule for DeleteCategory {
    type Answer = CategoryId;

    fn touches(&self, touches: &mut Touches) {
        touches_names(touches);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<CategoryId> {
        let id = self.0;
        let Some(old) = txn.get::<Category>(id).await? else {
            return Ok(Err(StoreError::NotFound(Subject::category(id))));
        };
        if txn.category_in_use(id).await? {
            return Ok(Err(StoreError::CategoryInUse(id)));
        }
        txn.remove(&old).await?;
        txn.push(Change::category(EventType::CategoryDeleted, id, None));
        Ok(Ok(id))
    }
}
