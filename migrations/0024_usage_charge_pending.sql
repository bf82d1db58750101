-- A settle row is written to the ledger before it is charged to counters that may not hold
-- it (counted by a Redis that since lost it, or written from an instance's own records):
-- `charge_pending` marks it from the insert until that charge was decided, so a failure or a
-- crash in between leaves it marked, and the drain retries it until it is decided (the
-- script refuses a row twice). The compensation passes over a tenant with marked rows (the
-- counters may or may not hold them yet), so it never corrects what the retry will charge. `generation` is the counters'
-- generation the row was counted in, which the retry needs.
alter table usage_ledger
    add column generation text,
    add column charge_pending boolean not null default false;
create index usage_ledger_charge_pending on usage_ledger (id) where charge_pending;
