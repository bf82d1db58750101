-- The audit trail, the outbox, and immutable snapshots (DESIGN §5).

-- Snapshots are history: a published version never changes.
create function refuse_change() returns trigger language plpgsql as $$
begin
    raise exception '% rows are append-only: % refused', tg_table_name, tg_op
        using errcode = 'insufficient_privilege';
end
$$;

create trigger snapshot_append_only before update or delete on snapshot
    for each row execute function refuse_change();
create trigger snapshot_no_truncate before truncate on snapshot
    for each statement execute function refuse_change();

-- One row per change: who, from where, what, before and after, why. Rows are chained in
-- the order they were written: `id` is given under a lock by the insert trigger, and each
-- row stores the SHA-256 of its content together with the previous row's hash.
create table audit (
    id         bigint      primary key,
    at         timestamptz not null default now(),
    actor      text        not null check (length(actor) between 1 and 200),
    source     text        not null check (source in ('api', 'ui', 'health', 'schedule', 'system')),
    action     text        not null check (length(action) between 1 and 100),
    entity     text        not null check (length(entity) between 1 and 200),
    before     jsonb,
    after      jsonb,
    reason     text        check (reason is null or length(reason) <= 2000),
    request_id text        check (request_id is null or length(request_id) <= 200),
    prev_hash  bytea,
    hash       bytea       not null
);
create index audit_entity_idx on audit (entity, id);
create index audit_actor_idx on audit (actor, id);
create index audit_action_idx on audit (action, id);
create index audit_at_idx on audit (at, id);

-- The hash of a row's content and its predecessor's hash: one definition, used when
-- writing and when verifying.
create function audit_row_hash(a audit) returns bytea language sql stable as $$
    -- A JSON array keeps every field apart and NULL distinct from '' and from JSON null.
    select sha256(convert_to(jsonb_build_array(
        a.id,
        to_char(a.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        a.actor, a.source, a.action, a.entity,
        a.before, a.after, a.reason, a.request_id,
        encode(a.prev_hash, 'hex'))::text, 'UTF8'))
$$;

create function audit_chain() returns trigger language plpgsql as $$
begin
    -- One writer at a time until commit: ids and hashes follow the order of writing.
    perform pg_advisory_xact_lock(hashtext('tessera.audit.chain'));
    select id + 1, hash into new.id, new.prev_hash from audit order by id desc limit 1;
    new.id := coalesce(new.id, 1);
    -- The time of writing (not of the transaction's start), so times follow ids.
    new.at := clock_timestamp();
    new.hash := audit_row_hash(new);
    return new;
end
$$;

create trigger audit_chain before insert on audit
    for each row execute function audit_chain();
create trigger audit_append_only before update or delete on audit
    for each row execute function refuse_change();
create trigger audit_no_truncate before truncate on audit
    for each statement execute function refuse_change();

-- Changes waiting to be published to Redis; a row is delivered once Redis holds the
-- snapshot version (or a newer one).
create table outbox (
    id           bigint generated always as identity primary key,
    entity       text        not null,
    version      bigint      not null,
    created_at   timestamptz not null default now(),
    delivered_at timestamptz,
    attempts     integer     not null default 0,
    last_error   text
);
create index outbox_pending_idx on outbox (id) where delivered_at is null;
