-- Change requests and approval policies beyond pools: a policy may cover every channel,
-- plan or tenant; a request may be about a channel, a plan or a tenant, and one that
-- creates an entity is made against version 0 (it does not exist yet).
alter table approval_policy drop constraint approval_policy_scope_check;
alter table approval_policy add constraint approval_policy_scope_check
    check (scope ~ '^(pools|channels|plans|tenants|pool:[A-Za-z0-9_-]{1,64})$');

alter table change_request drop constraint change_request_entity_check;
alter table change_request add constraint change_request_entity_check
    check (entity ~ '^(pool:[A-Za-z0-9_-]{1,64}|channel:[A-Za-z0-9_.-]{1,64}|plan:[A-Za-z0-9_-]{1,64}|tenant:[A-Za-z0-9_-]{1,64})$');

alter table change_request drop constraint change_request_base_version_check;
alter table change_request add constraint change_request_base_version_check check (base_version >= 0);
