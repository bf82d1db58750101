//! One error type for every HTTP handler: the status and a body a person can act on.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// Why a change was not written.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The entity is at another version than the change expected (someone else changed it).
    #[error("{entity} is at version {current}, not {expected}")]
    Conflict { entity: String, expected: i64, current: i64 },
    /// The body is not a valid snapshot of the entity's kind (or the kind is unknown).
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
    /// The input does not parse (400), naming the field.
    #[error("{field}: {rule}")]
    Malformed { field: String, rule: String },
    /// Something with that identity exists already (and identities are never reused).
    #[error("{field}: {rule}")]
    Duplicate { field: String, rule: String },
    /// The change is not allowed as a direct write (an approval policy applies), naming
    /// what stands in the way (409).
    #[error("{field}: {rule}")]
    Blocked { field: String, rule: String },
    /// The entity the change is about does not exist.
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What went wrong, mapped to a status. Unexpected errors are logged with their chain and
/// answered 500 without internals.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed input (400), naming the field and the rule.
    #[error("{field}: {rule}")]
    BadRequest { field: String, rule: String },
    /// Well-formed input that breaks a rule (422), naming the field and the rule.
    #[error("{field}: {rule}")]
    Unprocessable { field: String, rule: String },
    /// No such entity (404).
    #[error("{0}")]
    NotFound(String),
    /// A quota refusal (429) with what ran out.
    #[error("quota exhausted: {dimension}")]
    QuotaRefused { dimension: &'static str, available: u64, limit: u64 },
    /// No valid credentials (401).
    #[error("{0}")]
    Unauthorized(String),
    /// Valid credentials that do not allow this (403).
    #[error("{0}")]
    Forbidden(String),
    /// The entity changed since the version the request was made against (409).
    #[error("{entity} is at version {current}, not {expected}")]
    Conflict { entity: String, expected: i64, current: i64 },
    /// Something with that identity exists already (409), naming the field and the rule.
    #[error("{field}: {rule}")]
    Duplicate { field: String, rule: String },
    /// The request is refused by the state of things (409): a policy that asks for a change
    /// request, a request in a state that does not allow it; naming the field and the rule.
    #[error("{field}: {rule}")]
    Blocked { field: String, rule: String },
    /// A dependency cannot be reached (503).
    #[error("{0}")]
    Unavailable(String),
    /// Too many requests of this kind just now (429, with `Retry-After` in seconds): a
    /// flood of sign-ins, unknown tokens or prompts to estimate, answered before any work.
    #[error("{message}")]
    Throttled { message: String, retry_after_secs: u64 },
    /// Anything else (500).
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl ApiError {
    /// A 400 naming `field` and `rule`.
    pub fn bad_request(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::BadRequest { field: field.into(), rule: rule.into() }
    }
}

impl ApiError {
    /// A 400 from a deserialisation message: our validated types fail with
    /// "<field>: <rule>", which names the field; anything else is about the body.
    pub fn from_serde_message(message: &str) -> Self {
        match message.split_once(": ") {
            Some((field, rule)) if !field.contains(' ') => Self::bad_request(field, rule),
            _ => Self::bad_request("body", message),
        }
    }
}

/// Postgres errors: unreachable → 503; anything else → 500.
/// Whether Postgres could not be reached (refused, cut, timed out, TLS failed, pool gone,
/// or the server shutting down or losing the connection mid-query).
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")),
        _ => false,
    }
}

fn db_error(e: sqlx::Error) -> ApiError {
    // Unreachable, or a deadlock or serialisation failure: the same request may succeed
    // when retried.
    let retry = matches!(&e, sqlx::Error::Database(db) if db.code().is_some_and(|c| c == "40P01" || c == "40001"));
    let unavailable = is_unavailable(&e) || retry;
    if unavailable {
        ApiError::Unavailable(format!("postgres unavailable: {e}"))
    } else {
        ApiError::Unexpected(anyhow::Error::new(e))
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        db_error(e)
    }
}

/// A change that was not written: a version conflict or a duplicate is 409, a broken rule
/// 422, malformed input 400, a missing entity 404, the database as for [`sqlx::Error`].
impl From<ChangeError> for ApiError {
    fn from(e: ChangeError) -> Self {
        match e {
            ChangeError::Conflict { entity, expected, current } => Self::Conflict { entity, expected, current },
            ChangeError::Invalid { field, rule } => Self::Unprocessable { field, rule },
            ChangeError::Duplicate { field, rule } => Self::Duplicate { field, rule },
            ChangeError::Blocked { field, rule } => Self::Blocked { field, rule },
            ChangeError::Malformed { field, rule } => Self::BadRequest { field, rule },
            ChangeError::NotFound(what) => Self::NotFound(what),
            ChangeError::Db(e) => db_error(e),
        }
    }
}

impl From<client::quota::InvalidInput> for ApiError {
    fn from(e: client::quota::InvalidInput) -> Self {
        Self::BadRequest { field: e.field, rule: e.rule }
    }
}

/// A draw that failed: an unknown pool is 404; nothing drawable (exhausted, every member
/// ejected or capped, Redis unreachable without a fallback) 503; a bad input 400.
impl From<client::pool::PoolError> for ApiError {
    fn from(e: client::pool::PoolError) -> Self {
        use client::pool::PoolError;
        match e {
            PoolError::UnknownPool(p) => Self::NotFound(format!("unknown pool {:?}", p.as_str())),
            e @ (PoolError::Exhausted { .. } | PoolError::Unavailable { .. } | PoolError::NothingDrawable(_)) => {
                Self::Unavailable(e.to_string())
            }
            PoolError::Invalid(e) => e.into(),
            e => Self::Unexpected(anyhow::Error::new(e)),
        }
    }
}

/// A route that decided nothing: an unknown route is 404, a bad attribute 400; a pool it
/// chose that cannot be drawn from (unknown included: the route names it) 503, saying which.
impl From<client::route::RouteFailure> for ApiError {
    fn from(e: client::route::RouteFailure) -> Self {
        use client::pool::PoolError;
        use client::route::RouteFailure;
        match e {
            RouteFailure::UnknownRoute(name) => Self::NotFound(format!("unknown route {:?}", name.as_str())),
            RouteFailure::Invalid(e) => Self::bad_request(e.field, e.rule),
            e @ RouteFailure::Unavailable { .. } => Self::Unavailable(e.to_string()),
            RouteFailure::Pool { route, pool, source } => match *source {
                e @ (PoolError::Exhausted { .. }
                | PoolError::Unavailable { .. }
                | PoolError::NothingDrawable(_)
                | PoolError::UnknownPool(_)) => {
                    Self::Unavailable(format!("route {:?} chose pool {pool:?}: {e}", route.as_str()))
                }
                other => Self::Unexpected(anyhow::Error::new(other)),
            },
            other => Self::Unexpected(anyhow::Error::new(other)),
        }
    }
}

/// A quota operation that failed: an unknown tenant is 404; the quota store unreachable
/// (and the tenant's policy refusing, or the operation not recorded) 503.
impl From<client::quota::QuotaError> for ApiError {
    fn from(e: client::quota::QuotaError) -> Self {
        use client::quota::QuotaError;
        match e {
            QuotaError::UnknownTenant(t) => Self::NotFound(format!("unknown tenant {:?}", t.as_str())),
            QuotaError::Unavailable { tenant, policy, .. } => {
                Self::Unavailable(format!("quota store unreachable; tenant {:?} is {policy}", tenant.as_str()))
            }
            QuotaError::NotRecorded { tenant, reason } => Self::Unavailable(format!(
                "quota store unreachable and the operation for tenant {:?} could not be recorded, so nothing was \
                 done: {reason}",
                tenant.as_str()
            )),
            QuotaError::Redis(e) if client::is_unreachable(&e) => Self::Unavailable(format!("redis unreachable: {e}")),
            other => Self::Unexpected(anyhow::Error::new(other)),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::QuotaRefused { .. } | Self::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Conflict { .. } | Self::Duplicate { .. } | Self::Blocked { .. } => StatusCode::CONFLICT,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::BadRequest { field, rule }
            | Self::Unprocessable { field, rule }
            | Self::Duplicate { field, rule }
            | Self::Blocked { field, rule } => response.json(ErrorBody {
                error: self.to_string(),
                field: Some(field.clone()),
                rule: Some(rule.clone()),
            }),
            Self::QuotaRefused { dimension, available, limit } => response.json(QuotaRefusedBody {
                error: self.to_string(),
                result: "refused",
                dimension,
                available: *available,
                limit: *limit,
            }),
            Self::Conflict { entity, expected, current } => response.json(ConflictBody {
                error: self.to_string(),
                entity: entity.clone(),
                expected_version: *expected,
                current_version: *current,
            }),
            Self::Throttled { message, retry_after_secs } => response
                .insert_header((actix_web::http::header::RETRY_AFTER, retry_after_secs.to_string()))
                .json(ErrorBody::message(message.clone())),
            Self::Unexpected(e) => {
                tracing::error!(error = format!("{e:#}"), "unexpected error");
                response.json(ErrorBody::message("internal error; see the server log"))
            }
            other => response.json(ErrorBody::message(other.to_string())),
        }
    }
}

/// The body of every error answer but a version conflict (409) and a quota refusal (429):
/// what went wrong and, for a 400, a 422 or a duplicate (409), the field and the rule it
/// broke. The OpenAPI schema of those answers, too.
///
/// Closed (`additionalProperties: false`): no other field is ever sent, and it keeps a
/// [`ConflictBody`] from also matching this schema where a 409 is one of the two (`oneOf`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"error": "request_id: must not be empty", "field": "request_id", "rule": "must not be empty"}))]
pub struct ErrorBody {
    /// A sentence a person can act on.
    pub error: String,
    /// The field or parameter that was refused (400, 422 and a duplicate's 409 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The rule the field broke (400, 422 and a duplicate's 409 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl ErrorBody {
    /// A body with only the sentence.
    pub fn message(error: impl Into<String>) -> Self {
        Self { error: error.into(), field: None, rule: None }
    }

    /// A body naming the field and the rule it broke.
    pub fn field(field: impl Into<String>, rule: impl Into<String>) -> Self {
        let (field, rule) = (field.into(), rule.into());
        Self { error: format!("{field}: {rule}"), field: Some(field), rule: Some(rule) }
    }
}

/// The body of a 429: the quota dimension that ran out, what is left of it and its limit.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QuotaRefusedBody {
    pub error: String,
    /// Always `refused`.
    #[schema(example = "refused")]
    pub result: &'static str,
    #[schema(value_type = client::quota::Dimension)]
    pub dimension: &'static str,
    pub available: u64,
    pub limit: u64,
}

/// The body of a version conflict (409): the entity changed since the version the request
/// was made against.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConflictBody {
    pub error: String,
    pub entity: String,
    /// The version the request was made against.
    pub expected_version: i64,
    /// The version it is at now: read it again and retry against this one.
    pub current_version: i64,
}

/// Turns a JSON body error into a JSON answer with actix's status: a 400 naming the field and
/// the rule when serde can, a 400 naming `Content-Type` when it is missing or not JSON, a 413
/// for a body over the limit. (Actix's own answers to the last two are text/plain.)
pub fn json_error(err: actix_web::error::JsonPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    use actix_web::error::JsonPayloadError;
    let (status, body) = match &err {
        JsonPayloadError::Deserialize(_) => {
            let message = err.to_string();
            // serde_json messages look like "invalid value: ..., expected ... at line 1 column 9";
            // our validated types fail with "<field>: <rule>".
            let detail = message.split_once("Json deserialize error: ").map_or(message.as_str(), |(_, detail)| detail);
            return ApiError::from_serde_message(detail).into();
        }
        JsonPayloadError::ContentType => {
            (StatusCode::BAD_REQUEST, ErrorBody::field("Content-Type", "must be application/json"))
        }
        JsonPayloadError::OverflowKnownLength { limit, .. } | JsonPayloadError::Overflow { limit } => {
            (StatusCode::PAYLOAD_TOO_LARGE, ErrorBody::field("body", format!("must be at most {limit} bytes")))
        }
        JsonPayloadError::Payload(e) => (e.status_code(), ErrorBody::field("body", format!("unreadable: {e}"))),
        other => (StatusCode::BAD_REQUEST, ErrorBody::field("body", other.to_string())),
    };
    let response = HttpResponse::build(status).json(body);
    actix_web::error::InternalError::from_response(err, response).into()
}

/// Turns a query-string error into a 400 naming the parameter when serde says which.
pub fn query_error(err: actix_web::error::QueryPayloadError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    let message = err.to_string();
    let detail = message.strip_prefix("Query deserialize error: ").unwrap_or(&message).to_owned();
    // serde_urlencoded names unknown fields as "unknown field `x`, expected ..."
    let field = detail.split('`').nth(1).filter(|_| detail.starts_with("unknown field")).unwrap_or("query").to_owned();
    ApiError::BadRequest { field, rule: detail }.into()
}

/// Turns a path parameter that does not parse (a grant id that is not a number, …) into a
/// JSON 400 (actix answers a text/plain 404).
pub fn path_error(err: actix_web::error::PathError, _req: &actix_web::HttpRequest) -> actix_web::Error {
    let message = err.to_string();
    let detail = message.strip_prefix("Path deserialize error: ").unwrap_or(&message).to_owned();
    ApiError::BadRequest { field: "path".to_owned(), rule: detail }.into()
}

/// The largest raw body a handler that reads bytes takes (`web::PayloadConfig`; JSON bodies
/// have their own limit in `web::JsonConfig`).
pub const MAX_RAW_BODY: usize = 256 * 1024;

/// A middleware: a 413 that actix answered as text (a raw body over [`MAX_RAW_BODY`]) is
/// answered as JSON naming `body`, as every other API error is.
pub async fn json_payload_errors(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let response = next.call(req).await?;
    let json = response
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if response.status() != StatusCode::PAYLOAD_TOO_LARGE || json {
        return Ok(response.map_into_boxed_body());
    }
    let (req, _) = response.into_parts();
    let body = ErrorBody::field("body", format!("must be at most {MAX_RAW_BODY} bytes"));
    Ok(actix_web::dev::ServiceResponse::new(req, HttpResponse::PayloadTooLarge().json(body)))
}
