-- An audit trail the app cannot rewrite (issue 37).
--
-- 1. Each row is signed with a key kept outside the database (TESSERA_AUDIT_KEY): the
--    server writes HMAC-SHA-256(key, every stored column of the row, its prev_hash and its
--    hash) beside the row, in the same transaction. The signature covers the content
--    itself (not only a hash this database computes, whose function its owner could
--    replace) and the previous row's hash; someone with database rights who edits a row
--    and recomputes the hashes cannot recompute the signatures.
-- 2. Verification starts from the newest signed checkpoint ("rows 1..id were intact and
--    row id's hash was this"), so it stays fast as the trail grows.
-- 3. The server runs as a member of the role tessera_server, which may read and append to
--    the append-only tables but not update, delete or truncate them, nor disable their
--    triggers (only their owner, the migrating role, may).

-- Ids are given from 1 by the insert trigger; a row below 1 would sit before every check.
alter table audit add constraint audit_id_positive check (id > 0);

create table audit_mac (
    id  bigint primary key references audit (id),
    mac bytea  not null check (length(mac) = 32)
);
create trigger audit_mac_append_only before update or delete on audit_mac
    for each row execute function refuse_change();
create trigger audit_mac_no_truncate before truncate on audit_mac
    for each statement execute function refuse_change();

create table audit_checkpoint (
    id   bigint      primary key references audit (id),
    hash bytea       not null check (length(hash) = 32),
    at   timestamptz not null default now(),
    -- HMAC-SHA-256(key, 'checkpoint' | id | hash)
    mac  bytea       not null check (length(mac) = 32)
);
create trigger audit_checkpoint_append_only before update or delete on audit_checkpoint
    for each row execute function refuse_change();
create trigger audit_checkpoint_no_truncate before truncate on audit_checkpoint
    for each statement execute function refuse_change();

-- The server's role. Roles belong to the whole Postgres cluster: another database of the
-- cluster may have created it already (or be creating it now). A migrating role that may
-- not create roles leaves it to the operator (SECURITY.md shows the statements).
do $$
begin
    if not exists (select from pg_roles where rolname = 'tessera_server') then
        create role tessera_server nologin;
    end if;
exception
    when duplicate_object or unique_violation then null;
    when insufficient_privilege then
        raise notice 'role tessera_server not created (the migrating role may not create roles)';
end
$$;

do $$
begin
    if not exists (select from pg_roles where rolname = 'tessera_server') then
        return;
    end if;
    execute format('grant connect, temporary on database %I to tessera_server', current_database());
    grant usage on schema public to tessera_server;
    grant select, insert, update, delete on all tables in schema public to tessera_server;
    grant usage, select, update on all sequences in schema public to tessera_server;
    grant execute on all functions in schema public to tessera_server;
    -- The append-only tables: read and append, nothing else.
    revoke update, delete, truncate on audit, audit_mac, audit_checkpoint, snapshot,
        config_history, change_review from tessera_server;
    -- The migrations' own bookkeeping is the owner's.
    revoke insert, update, delete on _sqlx_migrations from tessera_server;
    -- Tables later migrations create: the same rights (an append-only one revokes its own).
    alter default privileges in schema public grant select, insert, update, delete on tables to tessera_server;
    alter default privileges in schema public grant usage, select, update on sequences to tessera_server;
    alter default privileges in schema public grant execute on functions to tessera_server;
end
$$;
