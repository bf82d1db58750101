//! What every route module shares below the routes: a change's reason and expected
//! version, the caller as the audit trail records them, a path's number, a restore body.

use actix_web::HttpRequest;

use crate::change::Actor;
use crate::error::{ApiError, ChangeError};
use crate::inputs::request_id;
use crate::state::AppState;

/// A change's reason: trimmed, at most 500 characters; `required` refuses a missing one.
pub(crate) fn reason(raw: &Option<String>, required: bool) -> Result<Option<String>, ApiError> {
    match raw.as_deref().map(str::trim) {
        None | Some("") if required => Err(ApiError::bad_request("reason", "is required")),
        None | Some("") => Ok(None),
        Some(r) if r.chars().count() > 500 => Err(ApiError::bad_request("reason", "must be at most 500 characters")),
        Some(r) if r.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => {
            Err(ApiError::bad_request("reason", "must not hold control characters"))
        }
        Some(r) => Ok(Some(r.to_owned())),
    }
}

pub(crate) fn expected(field_value: i64) -> Result<i64, ApiError> {
    if field_value < 0 {
        return Err(ApiError::bad_request("expected_version", "must be 0 (create) or the current version"));
    }
    Ok(field_value)
}

/// A number in a path (`/api/v1/changes/{id}`): 1..=18 digits without a leading zero, so
/// `+5` and `007` are refused as the documented pattern refuses them (400 naming `id`).
pub(crate) fn path_id(raw: &str, what: &str) -> Result<i64, ApiError> {
    let digits = !raw.is_empty() && raw.len() <= 18 && raw.bytes().all(|b| b.is_ascii_digit()) && !raw.starts_with('0');
    digits
        .then(|| raw.parse::<i64>().ok())
        .flatten()
        .ok_or_else(|| ApiError::bad_request("id", format!("must be {what}'s number (1 or more)")))
}

/// A path or body value that does not parse: 400, naming the field.
pub(crate) fn malformed(e: impl Into<ChangeError>) -> ApiError {
    match e.into() {
        ChangeError::Invalid { field, rule } | ChangeError::Malformed { field, rule } => {
            ApiError::BadRequest { field, rule }
        }
        other => other.into(),
    }
}

/// The caller of a write (the guard already checked what they may do) and its reason.
/// Writes made with a login session are audited as made through the UI.
pub(crate) fn actor(
    req: &HttpRequest,
    _state: &AppState,
    raw_reason: &Option<String>,
    required: bool,
) -> Result<Actor, ApiError> {
    let principal = crate::access::principal(req)?;
    Ok(Actor {
        source: principal.source(),
        actor: principal.name,
        reason: reason(raw_reason, required)?,
        request_id: request_id(req),
    })
}

/// An optional JSON body: none (or `null`) is the default; anything else must parse, and a
/// body that does not is a 400 naming the field, never silently the default.
pub(crate) fn optional_body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) || bytes.trim_ascii() == b"null" {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::from_serde_message(&e.to_string()))
}

/// A restore request (of a pool, a plan or a tenant).
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    /// The version to return to (`versions[].version` of the entity's `…/versions`).
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    pub version: i64,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    pub reason: Option<String>,
    /// The entity's current version (`version` of its `GET`).
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    pub expected_version: i64,
}
