-- How long Redis answers a repeated reserve, settle or release of a finished reservation
-- itself (its done marker); after that the usage ledger answers. A minute to 400 days,
-- an hour by default (issue 42: markers kept for the tenant's retention cost 200 bytes
-- per finished request for 62 days).
alter table tenant
    add column idempotency_window_ms bigint not null default 3600000
        check (idempotency_window_ms between 60000 and 34560000000);

-- What the reservation took from each bucket ("bucket:amount,...", paying order) and its
-- deadline, so the ledger answers a repeated reserve with the first reply once Redis's
-- done marker is gone. Null for rows written before they were kept.
alter table usage_ledger
    add column reserved_parts text,
    add column deadline timestamptz;
-- The repeat look-up: the rows of one request id of a tenant.
create index usage_ledger_tenant_request on usage_ledger (tenant, request_id);
