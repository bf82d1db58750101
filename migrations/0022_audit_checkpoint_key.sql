-- Checkpoints keyed by their row and their signature (issue 37): the server's role may
-- insert checkpoints (it records them), so a forged one at a row must not keep the real
-- one from being recorded beside it; verify names the forged one.
alter table audit_checkpoint drop constraint audit_checkpoint_pkey;
alter table audit_checkpoint add primary key (id, mac);

