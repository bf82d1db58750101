-- The configuration store (DESIGN §5): channels, pools and their members, peak windows,
-- caps, plans, tenants, grants and users, as tables. These rows are the truth; every change
-- to them writes, in the same transaction, the new snapshot of each published entity it
-- touches (a pool, a tenant), an audit row per entity and an outbox row per snapshot.

-- People and automation that act on the system. Login comes later; until then the admin
-- API's configured actor is recorded here.
create table app_user (
    name       text        primary key check (name ~ '^[A-Za-z0-9_.@-]{1,64}$'),
    role       text        not null check (role in ('viewer', 'operator', 'pm', 'auditor', 'admin')),
    created_at timestamptz not null default now(),
    disabled_at timestamptz
);

-- Payment channels: what a pool's tickets name.
create table channel (
    code        text        primary key check (code ~ '^[A-Za-z0-9_.-]{1,64}$'),
    name        text        not null check (length(name) between 1 and 200),
    tier        text        check (tier in ('G', 'N', 'U')),
    enabled     boolean     not null default true,
    base_weight bigint      not null check (base_weight between 0 and 9007199254740991),
    version     bigint      not null default 1 check (version > 0),
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now()
);

create table pool (
    name                  text     primary key check (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    kind                  text     not null check (kind in ('channels', 'tiers')),
    batch_size            integer  not null check (batch_size between 1 and 100000),
    low_water             integer  not null check (low_water >= 0 and low_water < batch_size),
    ordering              text     not null,
    timezone              text     not null,
    eject_rebuild_percent smallint not null check (eject_rebuild_percent between 0 and 100),
    -- The pool's newest snapshot version (health changes publish new ones too).
    version               bigint   not null check (version > 0),
    -- Bumped by every change of the configuration (not by health): what a change's
    -- expected_version is checked against, so health never makes an edit stale.
    config_version        bigint   not null default 1 check (config_version > 0),
    updated_at            timestamptz not null default now()
);

-- A tiers pool's tiers and their weights (its tickets are tiers).
create table pool_tier (
    pool     text    not null references pool (name) on delete cascade,
    tier     text    not null check (tier in ('G', 'N', 'U')),
    position integer not null,
    weight   bigint  not null check (weight between 0 and 9007199254740991),
    primary key (pool, tier)
);

-- A pool's channels: a channels pool's members, or a tiers pool's channels in their tier.
create table pool_member (
    pool      text    not null references pool (name) on delete cascade,
    channel   text    not null references channel (code),
    tier      text    check (tier in ('G', 'N', 'U')),
    position  integer not null,
    weight    bigint  not null check (weight between 0 and 9007199254740991),
    -- Most draws per pool-local day (null: no cap).
    daily_cap bigint  check (daily_cap > 0),
    -- Ejected from this pool by an operator or by health checks.
    ejected   boolean not null default false,
    primary key (pool, channel)
);
create index pool_member_channel_idx on pool_member (channel);

create table peak_window (
    pool       text    not null references pool (name) on delete cascade,
    position   integer not null,
    start_at   text    not null,
    end_at     text    not null check (end_at <> start_at),
    multiplier integer not null check (multiplier > 0),
    -- Weights that replace the pool's during the window, as [{"member","weight"}].
    weights    jsonb,
    primary key (pool, position)
);

create table plan (
    name           text        primary key check (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    monthly_tokens bigint      not null check (monthly_tokens between 0 and 9007199254740991),
    daily_requests bigint      not null check (daily_requests between 0 and 9007199254740991),
    concurrency    integer     not null check (concurrency >= 0),
    version        bigint      not null default 1 check (version > 0),
    created_at     timestamptz not null default now(),
    updated_at     timestamptz not null default now()
);

-- A tenant and its plan assignment; its newest snapshot version is `version`.
create table tenant (
    name               text        primary key check (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    plan               text        not null references plan (name),
    reservation_ttl_ms bigint      not null check (reservation_ttl_ms between 1 and 86400000),
    retention_days     integer     not null check (retention_days between 1 and 3660),
    fallback_policy    text        not null check (fallback_policy in ('fail_closed', 'fail_open_limited')),
    fallback_allowance bigint      check ((fallback_policy = 'fail_open_limited') = (fallback_allowance is not null)),
    version            bigint      not null check (version > 0),
    updated_at         timestamptz not null default now()
);
create index tenant_plan_idx on tenant (plan);

-- Temporary and bonus grants. A revoked grant stays here (and in the audit trail) but is
-- no longer published.
create table quota_grant (
    tenant     text        not null references tenant (name) on delete cascade,
    id         text        not null check (id ~ '^[A-Za-z0-9_-]{1,64}$' and id <> 'plan'),
    kind       text        not null check (kind in ('temporary', 'bonus')),
    priority   integer     not null default 0 check (priority >= 0),
    amount     bigint      not null check (amount between 1 and 9007199254740991),
    starts_at  timestamptz,
    expires_at timestamptz check (expires_at is null or starts_at is null or expires_at > starts_at),
    created_at timestamptz not null default now(),
    revoked_at timestamptz,
    primary key (tenant, id)
);
