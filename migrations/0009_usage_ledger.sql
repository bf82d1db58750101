-- The usage ledger: every finished reservation (settled, released, expired), as the quota
-- script that finished it appended it to the tenant's usage stream in Redis. Drained by
-- the leader (source 'stream') or written by the instance that settled it when the stream
-- lost it (source 'instance'). Idempotent by tenant, request id and outcome (a reservation
-- that expired and was settled late has both rows). Redis's counters can be rebuilt from
-- it: plan use per period, use per grant, requests per day.
create table usage_ledger (
    id bigserial primary key,
    tenant text not null,
    request_id text not null,
    outcome text not null check (outcome in ('settled', 'released', 'expired')),
    -- settled after its reservation expired or was lost
    late boolean not null default false,
    model text,
    reserved bigint not null check (reserved >= 0),
    actual bigint check (actual is null or actual >= 0),
    -- tokens charged per bucket: {"plan": n, "<grant id>": n}
    charged jsonb not null default '{}',
    -- the plan's part per period: {"YYYY-MM": n}
    plan_periods jsonb not null default '{}',
    reserved_at timestamptz not null,
    at timestamptz not null,
    source text not null check (source in ('stream', 'instance')),
    recorded_at timestamptz not null default now(),
    unique (tenant, request_id, outcome)
);
create index usage_ledger_tenant_at on usage_ledger (tenant, at);
