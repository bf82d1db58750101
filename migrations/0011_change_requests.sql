-- Change requests and approval policies (four-eyes): where a policy applies to a pool,
-- its weights change only through a request that others approved.

-- One policy per scope: 'pools' (every pool) or 'pool:<name>' (one pool; it wins over
-- 'pools').
create table approval_policy (
    scope               text        primary key check (scope ~ '^(pools|pool:[A-Za-z0-9_-]{1,64})$'),
    required_approvals  smallint    not null check (required_approvals between 1 and 10),
    -- Who may approve or reject (self-approval is refused to everyone, admins included).
    approver_roles      text[]      not null check (cardinality(approver_roles) between 1 and 5
                                        and approver_roles <@ array['viewer', 'operator', 'pm', 'auditor', 'admin']),
    -- A request not applied within this many hours of its submission expires.
    expires_after_hours integer     not null check (expires_after_hours between 1 and 720),
    version             bigint      not null check (version > 0),
    updated_at          timestamptz not null default now()
);

-- A request to change a pool's weights, bound to what it was made against.
create table change_request (
    id                 bigint      generated always as identity primary key,
    entity             text        not null check (entity ~ '^pool:[A-Za-z0-9_-]{1,64}$'),
    -- The operation, with the body of the direct write it stands for.
    operation          jsonb       not null,
    -- The entity's configuration version the operation was made against.
    base_version       bigint      not null check (base_version > 0),
    -- SHA-256 (hex) of the operation and the base version: an approval names it.
    content_hash       text        not null check (content_hash ~ '^[0-9a-f]{64}$'),
    -- The weights before and after, for reviewers.
    diff               jsonb       not null,
    author             text        not null check (length(author) between 1 and 200),
    reason             text        not null check (length(reason) between 1 and 500),
    state              text        not null check (state in ('in_review', 'approved', 'rejected',
                                        'applied', 'suspended', 'cancelled', 'expired')),
    -- The policy in force when it was submitted (null: none; one approval is asked).
    policy_scope       text,
    required_approvals smallint    not null check (required_approvals between 1 and 10),
    approver_roles     text[]      not null,
    created_at         timestamptz not null default now(),
    expires_at         timestamptz not null,
    updated_at         timestamptz not null default now(),
    -- Why it was suspended (the entity changed under it), or the configuration version it
    -- made when applied.
    outcome            jsonb
);
create index change_request_state_idx on change_request (state, id);
create index change_request_entity_idx on change_request (entity, id);

-- Each approval, rejection or comment, bound to the content hash the reviewer saw.
create table change_review (
    id           bigint      generated always as identity primary key,
    request_id   bigint      not null references change_request (id),
    actor        text        not null check (length(actor) between 1 and 200),
    role         text        not null,
    verdict      text        not null check (verdict in ('approve', 'reject')),
    comment      text        check (comment is null or length(comment) <= 500),
    content_hash text        not null,
    at           timestamptz not null default now(),
    unique (request_id, actor)
);
create trigger change_review_append_only before update or delete on change_review
    for each row execute function refuse_change();
