//! The category operations (issue 29): `list_categories`, `create_category`, `get_category`,
//! `patch_category` (a merge patch of the name) and `delete_category`. A category has no
//! revision, so its answers carry no ETag; a name taken and a category in use are the store's
//! to find, in the change's transaction.

use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::HeaderMap;

use super::{Reply, content_type, path_id, query_error, read_body};
use crate::category::{Category, CategoryId, CategoryPatch, NewCategory};
use crate::error::Error;
use crate::query::{self, CategoriesQuery};
use crate::store::ops::{CreateCategory, DeleteCategory, PatchCategory};
use crate::store::{Store, StoreError};
use crate::subject::Subject;

/// `GET /v1/categories` (listCategories): a page in id order, and a `Link` to the next one
/// when more categories exist.
pub async fn list_categories(store: &Store, query: Option<&str>) -> Result<Reply, Error> {
    let query = CategoriesQuery::parse(query.unwrap_or_default()).map_err(query_error)?;
    let page = store.list_categories(query.after, query.limit).await?;
    let mut reply = Reply::ok(page.json);
    reply.link_next(
        (page.more, page.last_id),
        "/v1/categories",
        |last_id, out| query.next_into(last_id, out),
    );
    Ok(reply)
}

/// `POST /v1/categories` (createCategory): 201 with the category and its `Location`.
pub async fn create_category(
    store: &Store,
    headers: &HeaderMap,
    body: Incoming,
    body_timeout: Duration,
) -> Result<Reply, Error> {
    let body = read_body(headers, body, body_timeout).await?;
    if !query::is_json(content_type(headers)) {
        return Err(Error::UnsupportedMediaType);
    }
    let new = NewCategory::from_json(&body).map_err(Error::InvalidBody)?;
    let category = store.write(CreateCategory(new)).await?;
    let id = category.id;
    Ok(reply(StatusCode::CREATED, &category).located("/v1/categories/", id))
}

/// `GET /v1/categories/{categoryId}` (getCategory).
pub async fn get_category(store: &Store, raw_id: &str) -> Result<Reply, Error> {
    let id = category_id(raw_id)?;
    let category = store
        .get_category(id)
        .await?
        .ok_or_else(|| Error::from(StoreError::NotFound(Subject::category(id))))?;
    Ok(reply(StatusCode::OK, &category))
}

/// `PATCH /v1/categories/{categoryId}` (patchCategory): a JSON Merge Patch of the name, as
/// `application/merge-patch+json` or `application/json`; 200 with the category.
pub async fn patch_category(
    store: &Store,
    raw_id: &str,
    headers: &HeaderMap,
    body: Incoming,
    body_timeout: Duration,
) -> Result<Reply, Error> {
    let id = category_id(raw_id)?;
    let body = read_body(headers, body, body_timeout).await?;
    if !query::is_merge_patch(content_type(headers)) {
        return Err(Error::UnsupportedPatchType);
    }
    let patch = CategoryPatch::from_json(&body).map_err(Error::InvalidBody)?;
    let category = store.write(PatchCategory { id, patch }).await?;
    Ok(reply(StatusCode::OK, &category))
}

/// `DELETE /v1/categories/{categoryId}` (deleteCategory): 204 once it is gone; 409 while a
/// pet names it.
pub async fn delete_category(store: &Store, raw_id: &str) -> Result<Reply, Error> {
    let id = category_id(raw_id)?;
    store.write(DeleteCategory(id)).await?;
    Ok(Reply::empty(StatusCode::NO_CONTENT, None))
}

fn reply(status: StatusCode, category: &Category) -> Reply {
    Reply::tagged(status, Bytes::from(category.to_json()), None)
}

fn category_id(raw_id: &str) -> Result<CategoryId, Error> {
    path_id("categoryId", raw_id)
}
