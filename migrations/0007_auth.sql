-- Identity and access (DESIGN §5, issue 8): passwords (argon2id PHC strings), login
-- throttling, sessions, API tokens. Secrets are stored only as hashes: a session id and a
-- token are shown once and kept as their SHA-256.

alter table app_user
    add column password_hash text,
    add column failed_logins integer not null default 0 check (failed_logins >= 0),
    add column locked_until  timestamptz,
    add column updated_at    timestamptz not null default now();

create table user_session (
    id_hash      bytea       primary key,
    user_name    text        not null references app_user (name) on delete cascade,
    -- Sent back on every unsafe request made with the session (header X-CSRF-Token).
    csrf_token   text        not null,
    created_at   timestamptz not null default now(),
    expires_at   timestamptz not null,
    last_seen_at timestamptz not null default now()
);
create index user_session_user_idx on user_session (user_name);
create index user_session_expires_idx on user_session (expires_at);

create table api_token (
    id          bigint generated always as identity primary key,
    name        text        not null check (name ~ '^[A-Za-z0-9_.@ -]{1,64}$'),
    -- The token's first characters, to tell tokens apart in listings.
    prefix      text        not null,
    hash        bytea       not null unique,
    scope       text        not null check (scope in ('dataplane', 'admin')),
    created_by  text        not null,
    created_at  timestamptz not null default now(),
    last_used_at timestamptz,
    revoked_at  timestamptz
);
