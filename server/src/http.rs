//! What every route module shares below the routes: the request id, a change's reason and
//! expected version, the caller as the audit trail records them, and the reply to a write.

use actix_web::HttpRequest;
use serde_json::{json, Value};

use crate::audit::store::Source;
use crate::change::{ChangeError, Ctx, Written};
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

/// The reply to a write: what it wrote and whether Redis has it already.
pub(crate) fn written_json(written: &[Written], published: bool) -> Value {
    let first = &written[0];
    json!({
        "entity": first.entity, "version": first.version, "audit_id": first.audit_id,
        "published": published, "changes": written,
    })
}
