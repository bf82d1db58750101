-- Routes (issue 20): a named route holds ordered rules; each rule's conditions on a
-- request's attributes (amount ranges, currency, method, country, merchant, any string
-- attribute) choose the pool the request draws from; a request no rule matches goes to
-- the route's default pool. Routes are configuration like pools: every change is one
-- transaction with its audit row, its snapshot version (entity 'route:<name>') and its
-- outbox row, and each version is kept in config_history.

create table route (
    name         text        primary key check (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    default_pool text        not null references pool (name),
    -- The route's newest snapshot version: every change of a route is published.
    version      bigint      not null check (version > 0),
    created_at   timestamptz not null default now(),
    updated_at   timestamptz not null default now()
);

create table route_rule (
    route      text    not null references route (name) on delete cascade,
    position   integer not null check (position >= 0),
    name       text    not null check (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    -- {attribute: condition} in the canonical form of engine::route (amounts as strings).
    conditions jsonb   not null check (jsonb_typeof(conditions) = 'object'),
    pool       text    not null references pool (name),
    primary key (route, position),
    constraint route_rule_name_key unique (route, name)
);
create index route_rule_pool_idx on route_rule (pool);
create index route_default_pool_idx on route (default_pool);

-- A policy may cover every route; a change request may be about a route.
alter table approval_policy drop constraint approval_policy_scope_check;
alter table approval_policy add constraint approval_policy_scope_check
    check (scope ~ '^(pools|channels|plans|tenants|routes|pool:[A-Za-z0-9_-]{1,64})$');

alter table change_request drop constraint change_request_entity_check;
alter table change_request add constraint change_request_entity_check
    check (entity ~ '^(pool:[A-Za-z0-9_-]{1,64}|channel:[A-Za-z0-9_.-]{1,64}|plan:[A-Za-z0-9_-]{1,64}|tenant:[A-Za-z0-9_-]{1,64}|route:[A-Za-z0-9_-]{1,64})$');
