-- Pool samples (DESIGN §5): every 10 s the sampler records, per pool, how long its lists
-- are and how many draws each member had, so the dashboard can chart a pool draining and
-- refilling and each member's actual share against its expected one. Rows older than the
-- configured retention (default 7 days) are pruned daily.

-- One sample of one pool.
create table pool_sample (
    id             bigint generated always as identity primary key,
    pool           text             not null check (length(pool) between 1 and 64),
    -- When the sample was taken, by the one clock (Redis TIME).
    taken_at       timestamptz      not null,
    -- The snapshot version Redis held (the one draws used).
    version        bigint           not null check (version > 0),
    -- The pool-local day whose hit counters the members' `hits` are.
    day            date             not null,
    -- Tickets in the pool's list, and in its standby batch.
    tickets        bigint           not null check (tickets >= 0),
    standby        bigint           not null check (standby >= 0),
    -- A `tiers` pool's tier lists: {"G": {"tickets": n, "standby": n}, ...}; null otherwise.
    tiers          jsonb,
    -- The span of the share window: back to the sample about a minute earlier; null when
    -- there was none (the first minute, or after a pause in sampling).
    window_seconds double precision check (window_seconds is null or window_seconds > 0),
    -- Draws in that window (all members).
    draws          bigint           check (draws is null or draws >= 0),
    created_at     timestamptz      not null default now(),
    constraint pool_sample_window_check check ((window_seconds is null) = (draws is null))
);
-- A pool's samples over time (the read endpoint, the share window's earlier sample).
create index pool_sample_pool_taken_idx on pool_sample (pool, taken_at);
-- The daily prune.
create index pool_sample_taken_idx on pool_sample (taken_at);

-- One member of one sample.
create table pool_sample_member (
    sample_id      bigint           not null references pool_sample (id) on delete cascade,
    member         text             not null check (length(member) between 1 and 64),
    -- The member's draws on the sample's day so far (the pool's day counter).
    hits           bigint           not null check (hits >= 0),
    -- Draws in the sample's window (null when the sample has no window).
    window_hits    bigint           check (window_hits is null or window_hits >= 0),
    -- The share its published weight gives it (peak-window overrides and ejections applied).
    expected_share double precision not null check (expected_share between 0 and 1),
    -- Its share of the window's draws (null when the window had none, or there is no window).
    actual_share   double precision check (actual_share is null or actual_share between 0 and 1),
    constraint pool_sample_member_pkey primary key (sample_id, member)
);
