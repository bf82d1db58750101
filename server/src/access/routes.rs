//! Sign-in, sign-out, who am I; users and API tokens (admins).

use actix_web::cookie::{Cookie, SameSite};
use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::access::{
    ApiToken, Me, SignedIn, SignedOut, TokenBindings, TokenBound, TokenCreated, TokenList, TokenRevoked, User,
    UserCreated, UserDisabled, UserList, UserRole, UserUnlocked,
};
use serde::Deserialize;
use serde_json::json;

use super::store;
use crate::access::{self as auth, LoginError, Role, Scope, TokenCache, Via};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(login)
        .service(logout)
        .service(me)
        .service(list_users)
        .service(add_user)
        .service(set_role)
        .service(disable_user)
        .service(unlock_user)
        .service(list_tokens)
        .service(add_token)
        .service(revoke_token)
        .service(bind_token);
}

/// How long every failed sign-in waits before it is answered.
const FAILED_SIGN_IN_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// The one answer to a failed sign-in.
const WRONG: &str = "wrong name or password (after 5 failures in a row an account is locked for 15 minutes)";

/// A sign-in.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    /// The user's name.
    name: String,
    /// The user's password.
    #[schema(format = Password)]
    password: String,
}

/// `POST /api/v1/auth/login` with `{"name", "password"}` → `200 {"user","role",
/// "csrf_token","expires_at"}` and the session cookie (HttpOnly, SameSite=Strict, Secure
/// over TLS); `401` for a wrong name or password (slower with each failure), and while
/// the account is locked after 5 failures in a row (15 minutes; the password is then not
/// checked at all).
#[utoipa::path(
    tag = "auth",
    responses(
        (status = 200, description = "Signed in (repeat `csrf_token` in X-CSRF-Token on unsafe requests), and the session cookie `tessera_session` (HttpOnly, SameSite=Strict, Secure over TLS)", body = SignedIn),
        (status = 400, description = "A malformed body, naming the field", body = ErrorBody),
        (status = 401, description = "A wrong name or password, or a locked account (5 failures in a row lock it for 15 minutes); answered more slowly after each failure, at most 2 s", body = ErrorBody),
        (status = 429, description = "Too many sign-in attempts from this address or for this name just now (`Retry-After` says when to try again); nothing was checked", body = ErrorBody),
    ),
)]
#[post("/api/v1/auth/login")]
pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<LoginBody>,
) -> Result<HttpResponse, ApiError> {
    let address =
        crate::throttle::client_address(req.peer_addr(), req.headers(), state.trusted_proxy_header.as_deref());
    // Before any work: a flood from one address or at one name is answered 429 here, and
    // neither reaches the password hasher nor extends a lock.
    state.door.sign_in(address, &body.name)?;
    match auth::login(&state.auth_db, &body.name, &body.password, state.auth.session_ttl).await {
        Ok(opened) => {
            // Secure unless the request came over plain HTTP to a loopback name (development on
            // this machine): over TLS (as the request or a proxy's X-Forwarded-Proto says), when
            // configured, and whenever the Host is any other name, so a session id never
            // travels in clear over a network. A Secure cookie carries the `__Host-` prefix.
            let secure = state.auth.cookie_secure
                || req.connection_info().scheme() == "https"
                || !auth::guard::is_loopback_host(req.headers());
            let name = if secure { api::SECURE_SESSION_COOKIE } else { auth::SESSION_COOKIE };
            let cookie = Cookie::build(name, opened.session_id.clone())
                .path("/")
                .http_only(true)
                .same_site(SameSite::Strict)
                .secure(secure)
                .max_age(actix_web::cookie::time::Duration::seconds(state.auth.session_ttl.as_secs() as i64))
                .finish();
            tracing::info!(user = opened.user, role = %opened.role, "signed in");
            Ok(HttpResponse::Ok().cookie(cookie).json(SignedIn {
                user: opened.user,
                role: opened.role.as_str().to_owned(),
                csrf_token: opened.csrf_token,
                expires_at: crate::inputs::rfc3339(opened.expires_at),
            }))
        }
        // Every failure is answered alike, after the same pause: a lock, an unknown name and
        // a wrong password tell a stranger nothing about which names exist.
        Err(LoginError::Locked { until }) => {
            tracing::warn!(user = body.name.chars().take(64).collect::<String>(), %until, "sign-in to a locked account");
            tokio::time::sleep(FAILED_SIGN_IN_PAUSE).await;
            Err(ApiError::Unauthorized(WRONG.into()))
        }
        Err(LoginError::Invalid) => {
            tracing::warn!(user = body.name.chars().take(64).collect::<String>(), "failed sign-in");
            tokio::time::sleep(FAILED_SIGN_IN_PAUSE).await;
            Err(ApiError::Unauthorized(WRONG.into()))
        }
        Err(LoginError::Db(e)) => Err(e.into()),
    }
}

/// `POST /api/v1/auth/logout`: ends the session and clears the cookie. Needs no credentials
/// (signing out is always allowed; without a session it only clears the cookie).
#[utoipa::path(
    tag = "auth",
    security(()),
    responses(
        (status = 200, description = "The session (if the request carried one) is ended and the cookie cleared", body = SignedOut),
    ),
)]
#[post("/api/v1/auth/logout")]
pub async fn logout(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let loopback = auth::guard::is_loopback_host(req.headers());
    if let Some(id) = api::session_cookie(loopback, |name| req.cookie(name).map(|c| c.value().to_owned())) {
        auth::logout(&state.db, &id).await?;
    }
    let mut reply = HttpResponse::Ok();
    for (name, secure) in [(auth::SESSION_COOKIE, false), (api::SECURE_SESSION_COOKIE, true)] {
        if !secure || req.cookie(name).is_some() {
            let mut gone =
                Cookie::build(name, "").path("/").http_only(true).secure(secure).same_site(SameSite::Strict).finish();
            gone.make_removal();
            reply.cookie(gone);
        }
    }
    Ok(reply.json(SignedOut { signed_out: true }))
}

/// `GET /api/v1/auth/me` → who the caller is and how: `{"name","via","role"?,"scope"?}`.
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Who the caller is and how: a session and the configured token name a role, an API token its scope", body = Me),
    ),
)]
#[get("/api/v1/auth/me")]
pub async fn me(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    let (via, role, scope) = match &p.via {
        Via::Session { role, .. } => ("session", Some(role.as_str()), None),
        Via::Token { scope, .. } => ("token", None, Some(scope.as_str())),
        Via::Configured => ("configured_token", Some("admin"), None),
        Via::Open => ("open", Some("admin"), None),
    };
    Ok(HttpResponse::Ok().json(Me {
        name: p.name,
        via: via.to_owned(),
        role: role.map(str::to_owned),
        scope: scope.map(str::to_owned),
    }))
}

/// `GET /api/v1/users` (admin) → every user: name, role, created, disabled, locked.
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Every user, by name", body = UserList),
    ),
)]
#[get("/api/v1/users")]
pub async fn list_users(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let users = store::list_users(&state.db).await?;
    Ok(HttpResponse::Ok().json(UserList { users: users.into_iter().map(User::from).collect() }))
}

/// A user to create.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUserBody {
    /// 1..=64 of `[A-Za-z0-9_.@-]`.
    #[schema(pattern = "^[A-Za-z0-9_.@-]{1,64}$")]
    name: String,
    #[schema(value_type = crate::schema::Role)]
    role: String,
    /// 12..=256 characters; generated (and answered once) when left out.
    #[schema(format = Password, min_length = 12, max_length = 256)]
    password: Option<String>,
}

/// `POST /api/v1/users` (admin) with `{"name","role","password"?}` → `201` (with the
/// generated password, once, when none was given); `409` when the name is taken.
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 201, description = "Created (audited); `password` is the generated one, shown this once, when none was given", body = UserCreated),
        (status = 400, description = "A malformed body, naming the field: a name not 1..=64 of `[A-Za-z0-9_.@-]`, an unknown role, a password not 12..=256 characters", body = ErrorBody),
        (status = 409, description = "A user with this name and a password exists (naming `name`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/users")]
pub async fn add_user(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<NewUserBody>,
) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    let role = Role::parse(&body.role)?;
    let generated = body.password.is_none();
    let password = body.password.clone().unwrap_or_else(|| auth::random_secret(18));
    let mut tx = state.db.begin().await?;
    auth::create_user(&mut tx, &body.name, role, &password).await?;
    auth::audit_access(&mut tx, &req, &p, &format!("user:{}", body.name), "user.create", None, json!({"role": role}))
        .await?;
    tx.commit().await?;
    Ok(HttpResponse::Created().json(UserCreated {
        name: body.name.clone(),
        role: role.as_str().to_owned(),
        password: generated.then_some(password),
    }))
}

/// A user's new role.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleBody {
    #[schema(value_type = crate::schema::Role)]
    role: String,
}

/// `PUT /api/v1/users/{name}/role` (admin) with `{"role"}`.
#[utoipa::path(
    tag = "auth",
    operation_id = "set_user_role",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("name" = String, Path, description = "The user's name: 1..=64 of `[A-Za-z0-9_.@-]`", pattern = "^[A-Za-z0-9_.@-]{1,64}$")),
    responses(
        (status = 200, description = "Changed (audited), effective on the user's next request", body = UserRole),
        (status = 400, description = "A malformed name, a malformed body or an unknown role", body = ErrorBody),
        (status = 404, description = "Unknown user", body = ErrorBody),
    ),
)]
#[put("/api/v1/users/{name}/role")]
pub async fn set_role(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<RoleBody>,
) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    auth::check_user_name(&path)?;
    let role = Role::parse(&body.role)?;
    let mut tx = state.db.begin().await?;
    if !store::set_role(&mut tx, path.as_str(), role.as_str()).await? {
        return Err(ApiError::NotFound(format!("unknown user {:?}", path.as_str())));
    }
    auth::audit_access(&mut tx, &req, &p, &format!("user:{}", path.as_str()), "user.role", None, json!({"role": role}))
        .await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(UserRole { name: path.into_inner(), role: role.as_str().to_owned() }))
}

/// `POST /api/v1/users/{name}/disable` (admin): the user can no longer sign in and their
/// sessions end.
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("name" = String, Path, description = "The user's name: 1..=64 of `[A-Za-z0-9_.@-]`", pattern = "^[A-Za-z0-9_.@-]{1,64}$")),
    responses(
        (status = 200, description = "Disabled and signed out everywhere (audited)", body = UserDisabled),
        (status = 400, description = "A malformed name", body = ErrorBody),
        (status = 404, description = "No enabled user with this name (unknown, or disabled already)", body = ErrorBody),
    ),
)]
#[post("/api/v1/users/{name}/disable")]
pub async fn disable_user(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    auth::check_user_name(&path)?;
    let mut tx = state.db.begin().await?;
    if !store::disable_user(&mut tx, path.as_str()).await? {
        return Err(ApiError::NotFound(format!("no enabled user {:?}", path.as_str())));
    }
    auth::audit_access(
        &mut tx,
        &req,
        &p,
        &format!("user:{}", path.as_str()),
        "user.disable",
        None,
        json!({"disabled": true}),
    )
    .await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(UserDisabled { name: path.into_inner(), disabled: true }))
}

/// `POST /api/v1/users/{name}/unlock` (admin): ends a lock-out after repeated failed
/// sign-ins, and starts the count over.
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("name" = String, Path, description = "The user's name: 1..=64 of `[A-Za-z0-9_.@-]`", pattern = "^[A-Za-z0-9_.@-]{1,64}$")),
    responses(
        (status = 200, description = "Unlocked (audited)", body = UserUnlocked),
        (status = 400, description = "A malformed name", body = ErrorBody),
        (status = 404, description = "Unknown user", body = ErrorBody),
    ),
)]
#[post("/api/v1/users/{name}/unlock")]
pub async fn unlock_user(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    auth::check_user_name(&path)?;
    let mut tx = state.db.begin().await?;
    if !store::unlock_user(&mut tx, path.as_str()).await? {
        return Err(ApiError::NotFound(format!("unknown user {:?}", path.as_str())));
    }
    auth::audit_access(
        &mut tx,
        &req,
        &p,
        &format!("user:{}", path.as_str()),
        "user.unlock",
        None,
        json!({"unlocked": true}),
    )
    .await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(UserUnlocked { name: path.into_inner(), unlocked: true }))
}

/// `GET /api/v1/tokens` (admin) → every API token: id, name, prefix, scope, created,
/// last used, revoked (never the secret).
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Every API token, by id; never the secret", body = TokenList),
    ),
)]
#[get("/api/v1/tokens")]
pub async fn list_tokens(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let tokens = store::list_tokens(&state.db).await?;
    Ok(HttpResponse::Ok().json(TokenList { tokens: tokens.into_iter().map(ApiToken::from).collect() }))
}

/// An API token to create.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTokenBody {
    /// 1..=64 of ASCII letters, digits, space, `_.@-`, not blank.
    #[schema(pattern = "^ *[A-Za-z0-9_.@-][A-Za-z0-9 _.@-]{0,63}$", max_length = 64)]
    name: String,
    /// `dataplane` or `admin`.
    #[schema(value_type = crate::schema::TokenScope)]
    scope: Scope,
    /// Tenants a data-plane token may reserve, settle and release for: names, or `["*"]`
    /// (the default) for any.
    #[serde(default)]
    #[schema(value_type = Option<crate::schema::BoundNames>)]
    tenants: Option<Vec<String>>,
    /// Pools it may draw from: names, or `["*"]` (the default).
    #[serde(default)]
    #[schema(value_type = Option<crate::schema::BoundNames>)]
    pools: Option<Vec<String>>,
    /// Routes it may draw through: names, or `["*"]` (the default).
    #[serde(default)]
    #[schema(value_type = Option<crate::schema::BoundNames>)]
    routes: Option<Vec<String>>,
    /// Channels it may report outcomes for: codes, or `["*"]` (the default).
    #[serde(default)]
    #[schema(value_type = Option<crate::schema::BoundCodes>)]
    channels: Option<Vec<String>>,
}

impl NewTokenBody {
    fn bindings(&self) -> TokenBindings {
        let any = TokenBindings::default();
        TokenBindings {
            tenants: self.tenants.clone().unwrap_or(any.tenants),
            pools: self.pools.clone().unwrap_or(any.pools),
            routes: self.routes.clone().unwrap_or(any.routes),
            channels: self.channels.clone().unwrap_or(any.channels),
        }
    }
}

/// `POST /api/v1/tokens` (admin) with `{"name","scope","tenants"?,"pools"?,"routes"?,
/// "channels"?}` → `201 {"id","name","scope","token"}`: the token is shown this once; only
/// its hash is kept. A data-plane token serves only what its lists name (each `["*"]`, any,
/// when left out).
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 201, description = "Created (audited); the token (`tsr_…`) is shown this once, only its hash is kept", body = TokenCreated),
        (status = 400, description = "A malformed body, naming the field: a name not 1..=64 of ASCII letters, digits, space, `_.@-`; an unknown scope; a binding that is not a name of its kind (`tenants[i]`, …), named twice, or `*` beside names; bindings on an admin-scope token (`scope`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/tokens")]
pub async fn add_token(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<NewTokenBody>,
) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    let mut tx = state.db.begin().await?;
    let created = auth::create_token(&mut tx, &body.name, body.scope, &body.bindings(), &p.name).await?;
    auth::audit_access(
        &mut tx,
        &req,
        &p,
        &format!("token:{}", created.id),
        "token.create",
        None,
        json!({"name": created.name, "scope": created.scope, "bindings": created.bindings}),
    )
    .await?;
    tx.commit().await?;
    Ok(HttpResponse::Created().json(TokenCreated {
        id: created.id,
        name: created.name,
        scope: created.scope.as_str().to_owned(),
        token: created.token,
    }))
}

/// `POST /api/v1/tokens/{id}/revoke` (admin): the token stops working at once.
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The token's id")),
    responses(
        (status = 200, description = "Revoked at once (audited)", body = TokenRevoked),
        (status = 400, description = "An id that is not an integer", body = ErrorBody),
        (status = 404, description = "No live token with this id (unknown, or revoked already)", body = ErrorBody),
    ),
)]
#[post("/api/v1/tokens/{id}/revoke")]
pub async fn revoke_token(
    req: HttpRequest,
    state: web::Data<AppState>,
    tokens: web::Data<TokenCache>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    let id: i64 = path.parse().map_err(|_| ApiError::bad_request("id", "must be an integer"))?;
    let mut tx = state.db.begin().await?;
    let hash = store::revoke_token(&mut tx, id).await?;
    let Some(hash) = hash else {
        return Err(ApiError::NotFound(format!("no live token {id}")));
    };
    auth::audit_access(&mut tx, &req, &p, &format!("token:{id}"), "token.revoke", None, json!({"revoked": true}))
        .await?;
    tx.commit().await?;
    // This instance forgets it at once; others within auth::TOKEN_CACHE_TTL.
    tokens.remove(&hash);
    Ok(HttpResponse::Ok().json(TokenRevoked { id, revoked: true }))
}

/// `PUT /api/v1/tokens/{id}/bindings` (admin) with `{"tenants","pools","routes","channels"}`
/// (each names, or `["*"]` for any; a list left out is `["*"]`): what a live data-plane
/// token serves from now on (this instance at once, the others within the token cache's
/// 10 s). Audited with the lists before and after.
#[utoipa::path(
    tag = "auth",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The token's id")),
    request_body(content = crate::schema::TokenBindingsBody),
    responses(
        (status = 200, description = "Bound (audited)", body = TokenBound),
        (status = 400, description = "An id that is not an integer, or a binding that is not a name of its kind (`tenants[i]`, …), named twice, or `*` beside names", body = ErrorBody),
        (status = 404, description = "No live token with this id (unknown, or revoked)", body = ErrorBody),
        (status = 422, description = "An admin-scope token (`scope`): it reaches no data plane", body = ErrorBody),
    ),
)]
#[put("/api/v1/tokens/{id}/bindings")]
pub async fn bind_token(
    req: HttpRequest,
    state: web::Data<AppState>,
    tokens: web::Data<TokenCache>,
    path: web::Path<String>,
    body: web::Json<TokenBindings>,
) -> Result<HttpResponse, ApiError> {
    let p = auth::principal(&req)?;
    let id: i64 = path.parse().map_err(|_| ApiError::bad_request("id", "must be an integer"))?;
    let bound = auth::bindings::Bindings::parse(&body)?.body();
    let mut tx = state.db.begin().await?;
    match store::live_token_scope(&mut tx, id).await?.as_deref() {
        None => return Err(ApiError::NotFound(format!("no live token {id}"))),
        Some("dataplane") => {}
        Some(scope) => {
            return Err(ApiError::Unprocessable {
                field: "scope".into(),
                rule: format!("token {id} has {scope} scope: it reaches no data plane, so it has nothing to bind"),
            })
        }
    }
    let Some((hash, before)) = store::set_bindings(&mut tx, id, &bound).await? else {
        return Err(ApiError::NotFound(format!("no live token {id}")));
    };
    let (before, after) = (json!({"bindings": before}), json!({"bindings": bound}));
    auth::audit_access(&mut tx, &req, &p, &format!("token:{id}"), "token.bindings", Some(before), after).await?;
    tx.commit().await?;
    tokens.remove(&hash);
    Ok(HttpResponse::Ok().json(TokenBound { id, bindings: bound }))
}
