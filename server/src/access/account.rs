//! A person's own account (change their password, sign out everywhere) and an admin's
//! reset of someone's password. Each is audited and ends the sessions it must: a changed
//! password ends the user's other sessions, a reset ends all of them.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::{post, web, HttpRequest, HttpResponse};
use api::access::{PasswordChanged, PasswordReset, SignedOutEverywhere};
use serde::Deserialize;
use serde_json::json;

use super::passwords::{check_password, hash_password, off_the_workers, random_secret, sha256, verify_password};
use super::{store, Principal, Via};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(change_password).service(logout_everywhere).service(reset_password);
}

/// The caller as a person signed in, with the hash of their session's id: passwords and
/// sessions belong to people, never to a token.
fn person(req: &HttpRequest) -> Result<(Principal, Option<Vec<u8>>), ApiError> {
    let p = super::principal(req)?;
    if !matches!(p.via, Via::Session { .. }) {
        return Err(ApiError::Forbidden(
            "this is for a person signed in (a session): tokens have no password or sessions".into(),
        ));
    }
    let loopback = super::guard::is_loopback_host(req.headers());
    let id = api::session_cookie(loopback, |name| req.cookie(name).map(|c| c.value().to_owned()));
    Ok((p, id.as_deref().map(sha256)))
}

/// A change of one's own password.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordBody {
    /// The password now.
    #[schema(format = Password)]
    current: String,
    /// The new password: 12..=256 characters.
    #[schema(format = Password, min_length = 12, max_length = 256)]
    new: String,
}

/// `POST /api/v1/auth/password` with `{"current","new"}`: a person signed in changes their
/// own password; their other sessions end (this one stays). Audited (`user.password`).
#[utoipa::path(
    tag = "auth",
    security(("session_cookie" = [])),
    responses(
        (status = 200, description = "Changed; the user's other sessions ended", body = PasswordChanged),
        (status = 400, description = "A malformed body, or a new password not 12..=256 characters (`new`)", body = ErrorBody),
        (status = 403, description = "Not a person signed in (a token), or the current password is wrong (`current`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/auth/password")]
pub async fn change_password(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<ChangePasswordBody>,
) -> Result<HttpResponse, ApiError> {
    let (p, this_session) = person(&req)?;
    check_password(&body.new).map_err(|e| match e {
        ApiError::BadRequest { rule, .. } => ApiError::bad_request("new", rule),
        other => other,
    })?;
    // The current password is checked as a sign-in is, counted at the door for this name.
    let address =
        crate::throttle::client_address(req.peer_addr(), req.headers(), state.trusted_proxy_header.as_deref());
    state.door.sign_in(address, &p.name)?;
    // Counted against the lock-out as a sign-in is: a stolen session guesses no faster.
    let attempt = store::count_attempt(&state.auth_db, &p.name, super::MAX_FAILED_LOGINS, super::LOCK_TIME).await?;
    let Some(attempt) = attempt else {
        return Err(ApiError::Forbidden(
            "current: the account is locked after repeated failures; try again in 15 minutes".into(),
        ));
    };
    let current = body.current.clone();
    let right = match attempt.password_hash {
        Some(hash) => off_the_workers(move || verify_password(&current, &hash)).await,
        None => false,
    };
    if !right {
        return Err(ApiError::Forbidden("current: the current password is wrong".into()));
    }
    let new = body.new.clone();
    let hash = off_the_workers(move || hash_password(&new)).await?;
    let mut tx = state.db.begin().await?;
    let ended = store::set_password(&mut tx, &p.name, &hash, this_session.as_deref())
        .await?
        .ok_or_else(|| ApiError::Forbidden("current: the current password is wrong".into()))?;
    super::audit_access(
        &mut tx,
        &req,
        &p,
        &format!("user:{}", p.name),
        "user.password",
        None,
        json!({"changed_by": "self"}),
    )
    .await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(PasswordChanged { name: p.name, sessions_ended: ended }))
}

/// `POST /api/v1/auth/logout_everywhere`: a person signed in ends every one of their
/// sessions, this one included (a lost laptop, a shared screen). Audited (`user.logout_everywhere`).
#[utoipa::path(
    tag = "auth",
    security(("session_cookie" = [])),
    responses(
        (status = 200, description = "Every session of the user ended, and this one's cookie cleared", body = SignedOutEverywhere),
        (status = 403, description = "Not a person signed in (a token)", body = ErrorBody),
    ),
)]
#[post("/api/v1/auth/logout_everywhere")]
pub async fn logout_everywhere(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let (p, _) = person(&req)?;
    let mut tx = state.db.begin().await?;
    let ended = store::end_sessions(&mut tx, &p.name, None).await?;
    super::audit_access(
        &mut tx,
        &req,
        &p,
        &format!("user:{}", p.name),
        "user.logout_everywhere",
        None,
        json!({"sessions_ended": ended}),
    )
    .await?;
    tx.commit().await?;
    let mut reply = HttpResponse::Ok();
    for name in [api::SESSION_COOKIE, api::SECURE_SESSION_COOKIE] {
        if req.cookie(name).is_some() {
            let mut gone = Cookie::build(name, "")
                .path("/")
                .http_only(true)
                .secure(name == api::SECURE_SESSION_COOKIE)
                .same_site(SameSite::Strict)
                .finish();
            gone.make_removal();
            reply.cookie(gone);
        }
    }
    Ok(reply.json(SignedOutEverywhere { name: p.name, sessions_ended: ended }))
}

/// A password set by an admin.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetPasswordBody {
    /// The new password (12..=256 characters); left out, one is generated and shown once.
    #[schema(format = Password, min_length = 12, max_length = 256)]
    password: Option<String>,
}

/// `POST /api/v1/users/{name}/password` (admin) with `{"password"?}`: sets a user's
/// password (generated and shown once when none is given), ends every session of theirs
/// and any lock-out. Audited (`user.password`).
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("name" = String, Path, description = "The user's name: 1..=64 of `[A-Za-z0-9_.@-]`", pattern = "^[A-Za-z0-9_.@-]{1,64}$")),
    request_body(content = Option<ResetPasswordBody>, description = "Optional: without a body (or `{}`), a password is generated"),
    responses(
        (status = 200, description = "Set; every session of the user ended", body = PasswordReset),
        (status = 400, description = "A malformed name or body, or a password not 12..=256 characters", body = ErrorBody),
        (status = 404, description = "Unknown user", body = ErrorBody),
    ),
)]
#[post("/api/v1/users/{name}/password")]
pub async fn reset_password(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let p = super::principal(&req)?;
    let name = path.into_inner();
    super::check_user_name(&name)?;
    // No body: a generated password. A body that does not parse is a 400, never a reset.
    let body: ResetPasswordBody = if body.iter().all(u8::is_ascii_whitespace) || body.trim_ascii() == b"null" {
        ResetPasswordBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::from_serde_message(&e.to_string()))?
    };
    let given = body.password;
    if let Some(password) = &given {
        check_password(password)?;
    }
    let generated = given.is_none();
    let password = given.unwrap_or_else(|| random_secret(18));
    let owned = password.clone();
    let hash = off_the_workers(move || hash_password(&owned)).await?;
    let mut tx = state.db.begin().await?;
    let Some(ended) = store::set_password(&mut tx, &name, &hash, None).await? else {
        return Err(ApiError::NotFound(format!("unknown user {name:?}")));
    };
    super::audit_access(
        &mut tx,
        &req,
        &p,
        &format!("user:{name}"),
        "user.password",
        None,
        json!({"changed_by": "admin"}),
    )
    .await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(PasswordReset { name, password: generated.then_some(password), sessions_ended: ended }))
}
