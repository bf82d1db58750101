-- Channel health (DESIGN §5): the state of each pool member as health evaluation sees it,
-- operators' pins, and the history of transitions for the UI's health-decay chart.

-- A pool's health thresholds; keys absent here take the defaults (server::health::Policy).
alter table pool add column health_policy jsonb not null default '{}'::jsonb
    check (jsonb_typeof(health_policy) = 'object');

-- One row per (pool, channel) that health evaluation has judged. Not tied to pool_member
-- rows (those are rewritten on every change of the pool); a member without a row is
-- healthy at factor 1.
create table member_health (
    pool              text             not null references pool (name) on delete cascade,
    channel           text             not null references channel (code),
    state             text             not null default 'healthy'
                      check (state in ('healthy', 'decaying', 'ejected', 'recovering')),
    -- Effective weight = base weight × factor (at least 1 while not ejected).
    factor            double precision not null default 1 check (factor >= 0 and factor <= 1),
    -- Ejection was due but the pool's ejection cap held it at the minimum weight.
    cap_bound         boolean          not null default false,
    last_decay_at     timestamptz,
    -- The last window that failed (the quiet period before recovery counts from it).
    last_failure_at   timestamptz,
    recovering_since  timestamptz,
    recovering_from   double precision check (recovering_from is null or (recovering_from >= 0 and recovering_from <= 1)),
    last_transition_at timestamptz,
    last_reason       text,
    -- The last window measured (null: not enough volume to judge).
    success_rate      double precision check (success_rate is null or (success_rate >= 0 and success_rate <= 1)),
    volume            bigint           not null default 0 check (volume >= 0),
    -- Exponentially weighted error rate and mean latency, for suggested weights.
    ewma_error        double precision check (ewma_error is null or (ewma_error >= 0 and ewma_error <= 1)),
    ewma_latency_ms   double precision check (ewma_latency_ms is null or ewma_latency_ms >= 0),
    updated_at        timestamptz      not null default now(),
    primary key (pool, channel)
);

-- An operator's override: the channel is held healthy (full weight) or ejected in every
-- pool, whatever its outcomes say, until unpinned.
create table channel_pin (
    channel   text        primary key references channel (code),
    state     text        not null check (state in ('healthy', 'ejected')),
    reason    text        not null check (length(reason) between 1 and 500),
    actor     text        not null,
    pinned_at timestamptz not null default now()
);

-- Every change of a member's health state or factor, oldest first.
create table health_transition (
    id            bigint generated always as identity primary key,
    pool          text             not null,
    channel       text             not null,
    at            timestamptz      not null,
    from_state    text             not null,
    to_state      text             not null,
    factor_before double precision not null,
    factor_after  double precision not null,
    success_rate  double precision,
    volume        bigint           not null,
    reason        text             not null
);
create index health_transition_channel_idx on health_transition (channel, at);
create index health_transition_pool_idx on health_transition (pool, at);
