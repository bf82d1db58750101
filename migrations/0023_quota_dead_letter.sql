-- Operations a process kept for Redis in its quota journal (admitted, settled or released
-- while Redis was away) whose tenant does not exist here: they can never be charged, so
-- they are set aside here, never dropped, and shown by the usage API
-- (GET /api/v1/usage/dead_letters). One row per journal, tenant, request id and operation: a
-- set-aside retried after a crash writes nothing twice, and the same operation kept by two
-- processes (a retry sent to another instance) is listed from each journal.
create table quota_dead_letter (
    id bigint generated always as identity primary key,
    tenant text not null,
    request_id text not null,
    operation text not null check (operation in ('admit', 'settle', 'release')),
    tokens bigint check (tokens >= 0),
    actual bigint check (actual >= 0),
    closed text check (closed in ('settled', 'released')),
    journal text not null,
    at timestamptz not null default now(),
    unique (journal, tenant, request_id, operation)
);
