-- Checkpoints keyed by their row and their signature (issue 37): the server's role may
-- insert checkpoints (it records them), so a forged one at a row must not keep the real
-- one from being recorded beside it; verify names the forged one.
alter table audit_checkpoint drop constraint audit_checkpoint_pkey;
alter table audit_checkpoint add primary key (id, mac);

-- The server's role needs no temporary tables.
do $$
begin
    if exists (select from pg_roles where rolname = 'tessera_server') then
        execute format('revoke temporary on database %I from tessera_server', current_database());
    end if;
end
$$;
