//! The client against a real Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`): one
//! test binary, one module per area, so a failure is named `<area>::<test>`.

mod cluster;
mod failover;
mod health;
mod pool;
mod quota;
mod route;
mod support;
