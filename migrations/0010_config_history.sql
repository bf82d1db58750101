-- Each pool's configuration at each of its configuration versions, as written (before
-- health, pins and disabled channels apply): the pool's history, and what a restore
-- returns to. Rows are history: never changed, never removed. Pools configured before
-- this table get their first row when they next change (the version being replaced).
create table config_history (
    entity         text        not null check (length(entity) between 1 and 200),
    config_version bigint      not null check (config_version > 0),
    body           jsonb       not null,
    -- Who made the version, and by which action (null for a version recorded late).
    actor          text        check (actor is null or length(actor) between 1 and 200),
    action         text        check (action is null or length(action) between 1 and 100),
    created_at     timestamptz not null default now(),
    primary key (entity, config_version)
);

create trigger config_history_append_only before update or delete on config_history
    for each row execute function refuse_change();
create trigger config_history_no_truncate before truncate on config_history
    for each statement execute function refuse_change();
