-- Run once by the postgres image when its data directory is new (docker-compose.yml): the
-- server's roles. Migration 0021 grants tessera_server what the server may do (append to
-- the audit trail, not rewrite it); the login role `tessera` serves as a member of it,
-- while the owner (postgres) migrates. Change the password for anything but a demo.
create role tessera_server nologin;
create role tessera login password 'tessera-server' in role tessera_server;
