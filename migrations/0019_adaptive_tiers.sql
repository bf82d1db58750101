-- Adaptive tiers (issue 20): a pool's tier policy, what each channel's recent windows
-- have said, and the moves its policy found.

-- A tiers pool's tier policy (`engine::adaptive::TierPolicy`; `{}`: the defaults, mode off).
alter table pool add column tier_policy jsonb not null default '{}'::jsonb
    check (jsonb_typeof(tier_policy) = 'object');

-- Per pool and channel: which way its windows since the last reset point, their success
-- rates (oldest first), when it last moved, and the last window judged (epoch minutes /
-- window_minutes), so that each window is judged once.
create table tier_streak (
    pool          text        not null references pool (name) on delete cascade,
    channel       text        not null,
    -- The tier the streak was counted in: another tier (a person moved the channel) starts
    -- it again.
    tier          text        check (tier in ('G', 'N', 'U')),
    direction     text        check (direction in ('up', 'down')),
    rates         float8[]    not null default '{}',
    last_move_at  timestamptz,
    window_minutes integer    check (window_minutes between 1 and 60),
    judged_window bigint,
    updated_at    timestamptz not null default now(),
    primary key (pool, channel)
);

-- The moves a pool's tier policy found: applied at once (automatic), or offered until a
-- person accepts or dismisses them (suggest). A newer move of the same channel in the same
-- pool supersedes an open one; an automatic move that the pool could not take (it would
-- leave a tier with weight empty) stays open, with the rule it broke.
create table tier_move (
    id             bigint generated always as identity primary key,
    pool           text        not null references pool (name) on delete cascade,
    channel        text        not null,
    from_tier      text        not null check (from_tier in ('G', 'N', 'U')),
    to_tier        text        not null check (to_tier in ('G', 'N', 'U')),
    rates          float8[]    not null,
    window_minutes integer     not null check (window_minutes between 1 and 60),
    state          text        not null check (state in ('open', 'applied', 'accepted', 'dismissed', 'superseded')),
    -- Why an automatic move was not applied, or why it was dismissed or superseded.
    note           text,
    created_at     timestamptz not null,
    decided_by     text,
    decided_at     timestamptz,
    -- The audit row of the pool change that applied it.
    audit_id       bigint,
    constraint tier_move_from_to_check check (from_tier <> to_tier)
);
create unique index tier_move_one_open_idx on tier_move (pool, channel) where state = 'open';
create index tier_move_pool_idx on tier_move (pool, id desc);
