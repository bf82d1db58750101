//! What every route module shares below the routes: the request id, a change's reason and
//! expected version, the caller as the audit trail records them, and timestamps as replies
//! carry them.

use actix_web::HttpRequest;
use chrono::{DateTime, SecondsFormat, Utc};

use crate::audit::store::Source;
use crate::change::{ChangeError, Ctx};
use crate::error::ApiError;
use crate::state::AppState;

pub(crate) fn request_id(req: &HttpRequest) -> Option<String> {
    req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(|v| v.chars().take(200).collect())
}

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

/// Who made the change and why, for every row it writes.
pub(crate) struct Actor {
    pub actor: String,
    pub source: Source,
    pub reason: Option<String>,
    pub request_id: Option<String>,
}

impl Actor {
    pub fn ctx(&self) -> Ctx<'_> {
        Ctx {
            actor: &self.actor,
            source: self.source,
            reason: self.reason.as_deref(),
            request_id: self.request_id.as_deref(),
        }
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

/// A timestamp as the replies carry it: RFC 3339 in UTC with `Z`, and as many fractional
/// digits as it needs (0, 3, 6 or 9): exactly what chrono's serde writes.
pub(crate) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_timestamp_reads_as_chrono_serializes_it() {
        let second = Utc.with_ymd_and_hms(2026, 3, 1, 12, 30, 5).unwrap();
        for nanos in [0, 120_000_000, 123_456_000, 123_456_789, 1_000, 1] {
            let at = second + chrono::TimeDelta::nanoseconds(nanos);
            assert_eq!(serde_json::to_value(at).unwrap(), serde_json::Value::String(super::rfc3339(at)), "{nanos} ns");
        }
    }
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
