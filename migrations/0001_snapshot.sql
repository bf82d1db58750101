-- Snapshots: every published configuration body, versioned per entity and never changed.
-- An entity is a published thing such as 'pool:cn-pay' or 'tenant:acme'.
create table snapshot (
    id         bigint generated always as identity primary key,
    entity     text        not null check (length(entity) between 1 and 200),
    version    bigint      not null check (version > 0),
    body       jsonb       not null,
    created_at timestamptz not null default now(),
    constraint snapshot_entity_version_key unique (entity, version)
);
