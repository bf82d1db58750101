-- Break-glass: an operation that only reduces risk (ejecting or restoring a member,
-- rebuilding) stays immediate on a pool under an approval policy, and is flagged here for an
-- auditor (another person than who did it) to acknowledge afterwards. The flag and the
-- acknowledgement are rows of the audit chain too.
create table break_glass (
    id              bigint      generated always as identity primary key,
    audit_id        bigint      not null references audit (id),
    entity          text        not null check (length(entity) between 1 and 200),
    action          text        not null check (length(action) between 1 and 100),
    actor           text        not null check (length(actor) between 1 and 200),
    policy_scope    text        not null,
    at              timestamptz not null default now(),
    acknowledged_by text        check (acknowledged_by is null or length(acknowledged_by) between 1 and 200),
    acknowledged_at timestamptz,
    comment         text        check (comment is null or length(comment) <= 500)
);
create index break_glass_open_idx on break_glass (id) where acknowledged_at is null;
