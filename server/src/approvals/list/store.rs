//! Change requests listed: filtered, newest or oldest first, a page at a time.

use api::changes::{ChangeRequest, Review};
use sqlx::{PgPool, Row};

use crate::approvals::store::{assemble, review, REQUEST_COLUMNS};

/// Change requests, newest first (at most 200), optionally in one state, of one entity and
/// by one author.
pub async fn list_requests(
    db: &PgPool,
    state: Option<&str>,
    entity: Option<&str>,
    author: Option<&str>,
) -> Result<Vec<ChangeRequest>, sqlx::Error> {
    let filter = RequestFilter { state, entity, author, entity_contains: None };
    Ok(list_request_page(db, &filter, false, 200, 0).await?.0)
}

/// Which change requests a list holds; `None` matches any.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFilter<'a> {
    pub state: Option<&'a str>,
    /// The entity exactly (`pool:cn-pay`).
    pub entity: Option<&'a str>,
    pub author: Option<&'a str>,
    /// Part of the entity (any case; `%` and `_` match themselves).
    pub entity_contains: Option<&'a str>,
}

/// A page of the change requests `filter` matches, newest first (oldest first when
/// `oldest_first`), and how many match in all. Two queries for the rows, whatever their
/// number: the requests, then all their reviews.
pub async fn list_request_page(
    db: &PgPool,
    filter: &RequestFilter<'_>,
    oldest_first: bool,
    limit: i64,
    offset: i64,
) -> Result<(Vec<ChangeRequest>, i64), sqlx::Error> {
    let pattern = filter.entity_contains.map(crate::store::like_pattern);
    let condition = "($1::text is null or state = $1) and ($2::text is null or entity = $2)
             and ($3::text is null or author = $3) and ($4::text is null or entity ilike $4)";
    let total: i64 = sqlx::query_scalar(&format!("select count(*) from change_request where {condition}"))
        .bind(filter.state)
        .bind(filter.entity)
        .bind(filter.author)
        .bind(&pattern)
        .fetch_one(db)
        .await?;
    let order = if oldest_first { "id" } else { "id desc" };
    let rows = sqlx::query(&format!(
        "select {REQUEST_COLUMNS} from change_request where {condition} order by {order} limit $5 offset $6"
    ))
    .bind(filter.state)
    .bind(filter.entity)
    .bind(filter.author)
    .bind(&pattern)
    .bind(limit)
    .bind(offset)
    .fetch_all(db)
    .await?;
    let ids = rows.iter().map(|r| r.try_get::<i64, _>("id")).collect::<Result<Vec<_>, _>>()?;
    let mut reviews: std::collections::HashMap<i64, Vec<Review>> = std::collections::HashMap::new();
    for r in sqlx::query(
        "select request_id, actor, role, verdict, comment, content_hash, at from change_review
         where request_id = any($1) order by id",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?
    {
        reviews.entry(r.try_get("request_id")?).or_default().push(review(&r)?);
    }
    let listed = rows
        .iter()
        .map(|r| assemble(r, reviews.remove(&r.try_get("id")?).unwrap_or_default()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((listed, total))
}
