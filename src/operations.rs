//! The API's operations, listed once in `OPERATIONS`: each one's method, path template,
//! operationId and what it writes. Routing (404, and 405 with its `Allow`), the read-only gate,
//! the metrics' route labels and the OpenAPI tests all read that list; `api::serve` dispatches
//! with one `match` on `Op`. It uses nothing of ours: the integration tests include this file.
//! Invariant: a template has at most one parameter, and a path falls under at most one template.

use std::sync::LazyLock;

use hyper::Method;

/// An operation: its variant's place in `Op` is its row in `OPERATIONS` (checked when built).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    ListPets,
    CreatePet,
    GetPet,
    PatchPet,
    DeletePet,
    GetOpenApi,
    Health,
    ListEvents,
    ListOrders,
    PlaceOrder,
    GetOrder,
    CompleteOrder,
    CancelOrder,
    GetInventory,
    ListCategories,
    CreateCategory,
    GetCategory,
    PatchCategory,
    DeleteCategory,
}

/// One row of the table.
pub struct Operation {
    pub op: Op,
    /// HEAD is served wherever GET is (RFC 9110 9.1), so the table never lists it.
    pub method: Method,
    /// The path with its parameter, if any, in braces as OpenAPI writes it: also the metrics'
    /// `http_route` label, shared by every operation on that path.
    pub template: &'static str,
    /// As `src/openapi.json` names it; `None` outside the document (`/healthz`).
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the tests hold the table to src/openapi.json by it"
        )
    )]
    pub operation_id: Option<&'static str>,
    /// What it creates, changes or deletes, as `Error::Forbidden` names it: a read-only key may
    /// not call it. `None` for a read.
    pub writes: Option<&'static str>,
}

/// Every operation, in `Op`'s order: its method, template, operationId and what it writes. A
/// path's operations sit together, and paths come in the order the metrics page lists them.
#[rustfmt::skip]
pub const OPERATIONS: &[Operation] = &[
    row(Op::ListPets,       Method::GET,    "/v1/pets",                            Some("listPets"),       None),
    row(Op::CreatePet,      Method::POST,   "/v1/pets",                            Some("createPet"),      Some("pets")),
    row(Op::GetPet,         Method::GET,    "/v1/pets/{petId}",                    Some("getPet"),         None),
    row(Op::PatchPet,       Method::PATCH,  "/v1/pets/{petId}",                    Some("patchPet"),       Some("pets")),
    row(Op::DeletePet,      Method::DELETE, "/v1/pets/{petId}",                    Some("deletePet"),      Some("pets")),
    row(Op::GetOpenApi,     Method::GET,    "/v1/openapi.json",                    Some("getOpenApi"),     None),
    row(Op::Health,         Method::GET,    "/healthz",                            None,                   None),
    row(Op::ListEvents,     Method::GET,    "/v1/events",                          Some("listEvents"),     None),
    row(Op::ListOrders,     Method::GET,    "/v1/store/orders",                    Some("listOrders"),     None),
    row(Op::PlaceOrder,     Method::POST,   "/v1/store/orders",                    Some("placeOrder"),     Some("orders")),
    row(Op::GetOrder,       Method::GET,    "/v1/store/orders/{orderId}",          Some("getOrder"),       None),
    row(Op::CompleteOrder,  Method::POST,   "/v1/store/orders/{orderId}/complete", Some("completeOrder"),  Some("orders")),
    row(Op::CancelOrder,    Method::POST,   "/v1/store/orders/{orderId}/cancel",   Some("cancelOrder"),    Some("orders")),
    row(Op::GetInventory,   Method::GET,    "/v1/store/inventory",                 Some("getInventory"),   None),
    row(Op::ListCategories, Method::GET,    "/v1/categories",                      Some("listCategories"), None),
    row(Op::CreateCategory, Method::POST,   "/v1/categories",                      Some("createCategory"), Some("categories")),
    row(Op::GetCategory,    Method::GET,    "/v1/categories/{categoryId}",         Some("getCategory"),    None),
    row(Op::PatchCategory,  Method::PATCH,  "/v1/categories/{categoryId}",         Some("patchCategory"),  Some("categories")),
    row(Op::DeleteCategory, Method::DELETE, "/v1/categories/{categoryId}",         Some("deleteCategory"), Some("categories")),
];

const fn row(
    op: Op,
    method: Method,
    template: &'static str,
    operation_id: Option<&'static str>,
    writes: Option<&'static str>,
) -> Operation {
    Operation {
        op,
        method,
        template,
        operation_id,
        writes,
    }
}

impl Op {
    /// Its row in the table.
    pub const fn spec(self) -> &'static Operation {
        &OPERATIONS[self as usize]
    }

    /// What a read-only key may not do: the resource the operation writes, if it writes.
    pub const fn writes(self) -> Option<&'static str> {
        self.spec().writes
    }

    /// The path it is on.
    pub const fn path(self) -> Path {
        Path(PATH_OF[self as usize])
    }
}

/// A path this server has, whatever the method (one of `PATHS`): what a 405 and the metrics go by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Path(usize);

/// The distinct templates, in the order of their first operation.
pub const PATHS: [&str; PATH_COUNT] = {
    let mut paths = [""; PATH_COUNT];
    let mut i = 0;
    while i < OPERATIONS.len() {
        paths[PATH_OF[i]] = OPERATIONS[i].template;
        i += 1;
    }
    paths
};

const PATH_COUNT: usize = {
    let mut count = 0;
    let mut i = 0;
    while i < OPERATIONS.len() {
        if first_on_path(i) == i {
            count += 1;
        }
        i += 1;
    }
    count
};

/// Each operation's index in `PATHS`. Built here, with the table's invariants checked, so a
/// table that breaks them does not compile.
const PATH_OF: [usize; OPERATIONS.len()] = {
    let mut path_of = [0; OPERATIONS.len()];
    let mut next = 0;
    let mut i = 0;
    while i < OPERATIONS.len() {
        assert!(
            OPERATIONS[i].op as usize == i,
            "OPERATIONS is in Op's order"
        );
        let first = first_on_path(i);
        if first == i {
            path_of[i] = next;
            next += 1;
        } else {
            assert!(
                path_of[i - 1] == path_of[first],
                "a path's operations sit together"
            );
            path_of[i] = path_of[first];
        }
        let template = OPERATIONS[i].template.as_bytes();
        assert!(template[0] == b'/', "a template starts with /");
        let (mut opened, mut closed, mut at) = (0, 0, 0);
        while at < template.len() {
            match template[at] {
                b'{' => opened += 1,
                b'}' => closed += 1,
                _ => {}
            }
            at += 1;
        }
        assert!(
            opened <= 1 && opened == closed,
            "a template has at most one parameter"
        );
        i += 1;
    }
    path_of
};

/// The first operation on the same path as operation `i`.
const fn first_on_path(i: usize) -> usize {
    let template = OPERATIONS[i].template.as_bytes();
    let mut j = 0;
    loop {
        let other = OPERATIONS[j].template.as_bytes();
        if other.len() == template.len() {
            let mut at = 0;
            while at < other.len() && other[at] == template[at] {
                at += 1;
            }
            if at == other.len() {
                return j;
            }
        }
        j += 1;
    }
}

/// Each path's template split around its parameter: the text before it, and after it if it
/// has one. Split once here rather than for every request.
const PATTERNS: [(&str, Option<&str>); PATH_COUNT] = {
    let mut patterns = [("", None); PATH_COUNT];
    let mut path = 0;
    while path < PATH_COUNT {
        let template = PATHS[path];
        let bytes = template.as_bytes();
        let mut at = 0;
        while at < bytes.len() && bytes[at] != b'{' {
            at += 1;
        }
        patterns[path] = if at == bytes.len() {
            (template, None)
        } else {
            let (prefix, rest) = template.split_at(at);
            let mut end = 0;
            while rest.as_bytes()[end] != b'}' {
                end += 1;
            }
            (prefix, Some(rest.split_at(end + 1).1))
        };
        path += 1;
    }
    patterns
};

/// The path `path` falls under, with its parameter's value (empty when its template has
/// none), or `None` for a 404. A parameter is one segment: not empty, without a `/`.
pub fn find(path: &str) -> Option<(Path, &str)> {
    PATTERNS
        .iter()
        .enumerate()
        .find_map(|(index, (prefix, suffix))| {
            let id = match suffix {
                None => (path == *prefix).then_some("")?,
                Some(suffix) => path.strip_prefix(prefix)?.strip_suffix(suffix)?,
            };
            let one_segment = suffix.is_none() || !(id.is_empty() || id.contains('/'));
            one_segment.then_some((Path(index), id))
        })
}

impl Path {
    /// Its place in `PATHS`.
    pub const fn index(self) -> usize {
        self.0
    }

    /// The operation on this path for `method`, if it has one.
    pub fn operation(self, method: &Method) -> Option<Op> {
        let method = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        OPERATIONS
            .iter()
            .zip(PATH_OF)
            .find(|(operation, path)| *path == self.0 && operation.method == method)
            .map(|(operation, _)| operation.op)
    }

    /// The `Allow` of a 405 here: the path's methods, HEAD after GET, always in the
    /// order GET, HEAD, POST, PUT, PATCH, DELETE whatever the table's.
    pub fn allow(self) -> &'static str {
        static ALLOW: LazyLock<[String; PATH_COUNT]> = LazyLock::new(|| {
            std::array::from_fn(|path| {
                let mut allow = Vec::new();
                for (method, names) in [
                    (Method::GET, "GET, HEAD"),
                    (Method::POST, "POST"),
                    (Method::PUT, "PUT"),
                    (Method::PATCH, "PATCH"),
                    (Method::DELETE, "DELETE"),
                ] {
                    if Path(path).operation(&method).is_some() {
                        allow.push(names);
                    }
                }
                allow.join(", ")
            })
        });
        &ALLOW[self.0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_falls_under_its_own_template_and_no_other() {
        for (index, template) in PATHS.iter().enumerate() {
            let path = template.replace("{petId}", "7");
            let path = path.replace("{orderId}", "7").replace("{categoryId}", "7");
            let id = if path == *template { "" } else { "7" };
            assert_eq!(find(&path), Some((Path(index), id)), "{path}");
        }
    }

    #[test]
    fn every_operation_under_v1_has_its_own_operation_id() {
        let mut ids = Vec::new();
        for operation in OPERATIONS {
            let documented = operation.template.starts_with("/v1/");
            assert_eq!(
                operation.operation_id.is_some(),
                documented,
                "{:?}",
                operation.op
            );
            ids.extend(operation.operation_id);
        }
        let count = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), count);
    }

    #[test]
    fn every_405_allows_the_methods_of_its_path_and_head_with_get() {
        for operation in OPERATIONS {
            let at = operation.op.path();
            assert_eq!(at.operation(&operation.method), Some(operation.op));
            assert!(at.allow().contains(operation.method.as_str()));
            if operation.method == Method::GET {
                assert_eq!(at.operation(&Method::HEAD), Some(operation.op));
                assert!(at.allow().contains("GET, HEAD"));
            }
        }
    }
}
