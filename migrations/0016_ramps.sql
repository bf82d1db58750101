-- Ramps: staged gray releases of a pool's weights, guarded by channel outcomes. A ramp
-- holds its plan (every step's weights, holds and minimum draws; the guards; what a breach
-- does), the baseline it started from, where it is, and what it measured; each step it
-- publishes is an ordinary pool version, audited with source 'ramp'.
alter table audit drop constraint audit_source_check;
alter table audit add constraint audit_source_check
    check (source in ('api', 'ui', 'health', 'schedule', 'system', 'ramp'));

create table ramp (
    id              bigint generated always as identity primary key,
    pool            text        not null references pool (name),
    state           text        not null check (state in ('running', 'paused', 'aborting', 'completed', 'aborted')),
    -- The plan as parsed: steps (weights, hold, min_draws; the last one is the target),
    -- guards, on_breach, abort_seconds, mode, hold_in_peaks.
    plan            jsonb       not null,
    -- The pool's weights when the ramp started.
    baseline        jsonb       not null,
    -- 0 = the baseline, 1..=n the steps (n: the target).
    step            integer     not null check (step >= 0),
    -- The configuration version the ramp's last write left the pool at: a pool changed
    -- by anything else since pauses the ramp instead of being overwritten.
    config_version  bigint      not null,
    step_started_at timestamptz not null,
    -- The pool's draw counters when the step started ({"day", "hits"}).
    step_hits       jsonb,
    -- Breaches in a row per guard (by index), and why the step is held, if it is.
    guard_state     jsonb       not null default '{}',
    -- A gradual abort: the weights it started from, when, and the stages done.
    abort_from      jsonb,
    change_request  bigint      references change_request (id),
    created_by      text        not null check (length(created_by) between 1 and 200),
    reason          text        not null check (length(reason) between 1 and 2000),
    created_at      timestamptz not null,
    updated_at      timestamptz not null,
    ended_at        timestamptz
);
-- One live ramp per pool.
create unique index ramp_live_per_pool on ramp (pool) where state in ('running', 'paused', 'aborting');

-- What a ramp did and why: each step, breach, pause, control, the values measured, and
-- one sentence.
create table ramp_event (
    id        bigint generated always as identity primary key,
    ramp_id   bigint      not null references ramp (id),
    at        timestamptz not null,
    kind      text        not null check (kind in ('start', 'step', 'breach', 'pause', 'resume', 'step_back',
                                                   'abort', 'aborted', 'complete', 'dry_run', 'hold', 'control')),
    step      integer     not null,
    actor     text        not null,
    sentence  text        not null,
    measured  jsonb,
    audit_id  bigint
);
create index ramp_event_ramp_idx on ramp_event (ramp_id, id);

-- Webhook notifications, written in the transaction of what they announce and delivered
-- by the notify job with retries and backoff (never blocking the ramp).
create table notification (
    id              bigint generated always as identity primary key,
    event           text        not null,
    body            jsonb       not null,
    created_at      timestamptz not null default now(),
    attempts        integer     not null default 0,
    next_attempt_at timestamptz not null default now(),
    delivered_at    timestamptz,
    failed_at       timestamptz,
    last_error      text
);
create index notification_due_idx on notification (next_attempt_at) where delivered_at is null and failed_at is null;

-- What each evaluation measured (per growing and baseline member over the guards'
-- windows, and each guard's verdict), for the ramp page's charts.
create table ramp_sample (
    ramp_id  bigint      not null references ramp (id),
    at       timestamptz not null,
    step     integer     not null,
    measured jsonb       not null,
    primary key (ramp_id, at)
);
