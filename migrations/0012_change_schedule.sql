-- Scheduled change requests: an approved request may be given a time to be applied at by
-- the change_apply job (leader, every 10 s).
alter table change_request add column scheduled_at timestamptz;
alter table change_request add column scheduled_by text check (scheduled_by is null or length(scheduled_by) between 1 and 200);
alter table change_request drop constraint change_request_state_check;
alter table change_request add constraint change_request_state_check check (state in ('in_review', 'approved',
    'scheduled', 'rejected', 'applied', 'suspended', 'cancelled', 'expired'));
create index change_request_due_idx on change_request (scheduled_at) where state = 'scheduled';

-- An edit makes a new content hash: a reviewer may review the new content again.
alter table change_review drop constraint change_review_request_id_actor_key;
alter table change_review add constraint change_review_once_per_content unique (request_id, actor, content_hash);
