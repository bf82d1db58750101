-- A request id used again once its done marker expired (after the tenant's retention, at
-- most 400 days) starts a new reservation: its rows are rows of their own, told apart from
-- a second write of the same record (the stream's and the instance's copy of one settle)
-- by the reservation's time, and named by `reuse_of`, the earlier row of the same request
-- id and outcome. Before this, the unique key on (tenant, request_id, outcome) dropped the
-- new row silently while the counters charged it.
alter table usage_ledger drop constraint usage_ledger_tenant_request_id_outcome_key;
alter table usage_ledger
    add constraint usage_ledger_once unique (tenant, request_id, outcome, reserved_at),
    add column reuse_of bigint;
