-- Short-window caps, the draw log and recorded outcomes (issue 20).

-- A pool's short cap window (minutes, epoch-aligned) and each member's cap in it, besides
-- the daily cap; and whether its draws are appended to the draw log.
alter table pool add column window_minutes integer check (window_minutes between 1 and 1440);
alter table pool add column draw_log boolean not null default true;
alter table pool_member add column window_cap bigint check (window_cap > 0);

-- The draw log: the draws a pool's draw script handed out, drained from its Redis stream
-- by the `draw_log` job. One row per pool, minute (by the draw script's clock) and drain:
-- the members the row names, and the draws in order as indices into them (`width` bytes
-- each, little-endian). Rows are pruned after `draws.retention_days`.
create table draw_log (
    id         bigint generated always as identity primary key,
    pool       text        not null check (length(pool) between 1 and 64),
    minute     timestamptz not null,
    members    text[]      not null,
    width      smallint    not null check (width in (1, 2)),
    seq        bytea       not null,
    draws      integer     not null check (draws >= 0),
    -- Tickets of leases returned (`r` entries) that no draw of the row could take back:
    -- their draws were in an earlier row.
    returned   integer     not null default 0 check (returned >= 0),
    created_at timestamptz not null default now(),
    constraint draw_log_seq_check check (length(seq) = draws * width)
);
create index draw_log_pool_minute_idx on draw_log (pool, minute, id);
create index draw_log_created_idx on draw_log (created_at);

-- Where the drain of each pool's stream is: the id of the last entry written here.
create table draw_log_cursor (
    pool       text        primary key,
    last_id    text        not null,
    updated_at timestamptz not null default now()
);

-- Channel outcome reports per minute, as the apps reported them (copied from Redis by the
-- `draw_log` job; Redis keeps about an hour): what traffic replay's expected success rates
-- come from. Pruned with the draw log.
create table outcome_minute (
    channel        text        not null check (length(channel) between 1 and 64),
    minute         timestamptz not null,
    ok             bigint      not null check (ok >= 0),
    fail           bigint      not null check (fail >= 0),
    latency_ms_sum bigint      not null default 0 check (latency_ms_sum >= 0),
    latency_count  bigint      not null default 0 check (latency_count >= 0),
    primary key (channel, minute)
);
create index outcome_minute_minute_idx on outcome_minute (minute);
