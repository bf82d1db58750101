-- The boundary (issue 37): a data-plane token is bound to what it serves. Each list holds
-- names of its kind, or '*' alone (any, also what is created later); tokens made before
-- this migration hold '*' in all four and keep working as they did. Admin-scope tokens
-- reach no data plane and keep '*'.
alter table api_token
    add column tenants  text[] not null default '{*}' check (cardinality(tenants) <= 1000),
    add column pools    text[] not null default '{*}' check (cardinality(pools) <= 1000),
    add column routes   text[] not null default '{*}' check (cardinality(routes) <= 1000),
    add column channels text[] not null default '{*}' check (cardinality(channels) <= 1000);

-- A third scope, for scrapers: `/metrics` and `/readyz/details` only (the operational
-- endpoints are no longer public).
alter table api_token drop constraint api_token_scope_check;
alter table api_token add constraint api_token_scope_check check (scope in ('dataplane', 'admin', 'metrics'));
