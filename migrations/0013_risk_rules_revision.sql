-- Risk rules of an approval policy: one more approval when a change moves more than this
-- share of a pool's traffic (half the sum of the absolute share changes), or changes the
-- weight of a member carrying more than this share now (percent; null: no such rule).
alter table approval_policy add column moved_percent_over double precision
    check (moved_percent_over is null or (moved_percent_over >= 0 and moved_percent_over <= 100));
alter table approval_policy add column member_share_over double precision
    check (member_share_over is null or (member_share_over >= 0 and member_share_over <= 100));

-- Each edit of a request counts up, and the content hash covers it: an edit back to
-- earlier content still voids the approvals given before it.
alter table change_request add column revision integer not null default 0;
