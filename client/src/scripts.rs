//! One [`redis::Script`] per file in `lua/`, built once per process. Invoking one sends
//! `EVALSHA`, and on `NOSCRIPT` (after `SCRIPT FLUSH` or a Redis restart) loads it again.

use std::sync::OnceLock;

use redis::Script;

const QUOTA_LIB: &str = include_str!("../../lua/quota_lib.lua");
const POOL_LIB: &str = include_str!("../../lua/pool_lib.lua");

/// The pool scripts (`draw` and `count_draw` are `lua/pool_lib.lua` + their body).
pub struct PoolScripts {
    pub draw: Script,
    pub count_draw: Script,
    pub refill: Script,
    pub shift_tail: Script,
    pub publish: Script,
    pub set_ejected: Script,
    pub restore_hits: Script,
    pub return_tickets: Script,
}

/// The pool scripts, built on first use.
pub fn pool() -> &'static PoolScripts {
    static SCRIPTS: OnceLock<PoolScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| PoolScripts {
        draw: Script::new(&format!("{POOL_LIB}\n{}", include_str!("../../lua/draw_ticket.lua"))),
        count_draw: Script::new(&format!("{POOL_LIB}\n{}", include_str!("../../lua/count_draw.lua"))),
        refill: Script::new(include_str!("../../lua/refill_pool.lua")),
        shift_tail: Script::new(include_str!("../../lua/shift_tail.lua")),
        publish: Script::new(include_str!("../../lua/publish_pool.lua")),
        set_ejected: Script::new(include_str!("../../lua/set_ejected.lua")),
        restore_hits: Script::new(include_str!("../../lua/restore_hits.lua")),
        return_tickets: Script::new(include_str!("../../lua/return_tickets.lua")),
    })
}

/// The quota scripts: each is `lua/quota_lib.lua`, then the script's own body run as a
/// function, then the library's `flush()` (which writes the counters the body changed
/// through the library's cache, once per call), then the body's reply. A body that fails
/// part-way still has its counter changes written before the error is raised: Redis keeps a
/// script's writes up to an error, so the counters must match the ledger entries, leases
/// and records written directly.
pub struct QuotaScripts {
    pub reserve: Script,
    pub settle: Script,
    pub settle_expired: Script,
    pub release: Script,
    pub sweep: Script,
    pub read: Script,
    pub publish_tenant: Script,
    pub apply_usage: Script,
    pub read_counters: Script,
    pub correct_counter: Script,
}

fn with_lib(body: &str) -> Script {
    Script::new(&format!(
        "{QUOTA_LIB}\nlocal function body()\n{body}\nend\nlocal ok, reply = pcall(body)\nflush()\nif not ok then error(reply, 0) end\nreturn reply\n"
    ))
}

/// The quota scripts, built on first use.
pub fn quota() -> &'static QuotaScripts {
    static SCRIPTS: OnceLock<QuotaScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| QuotaScripts {
        reserve: with_lib(include_str!("../../lua/reserve_quota.lua")),
        settle: with_lib(include_str!("../../lua/settle_quota.lua")),
        settle_expired: with_lib(include_str!("../../lua/settle_expired.lua")),
        release: with_lib(include_str!("../../lua/release_quota.lua")),
        sweep: with_lib(include_str!("../../lua/sweep_quota.lua")),
        read: with_lib(include_str!("../../lua/read_quota.lua")),
        publish_tenant: Script::new(include_str!("../../lua/publish_tenant.lua")),
        apply_usage: with_lib(include_str!("../../lua/apply_usage.lua")),
        read_counters: with_lib(include_str!("../../lua/read_counters.lua")),
        correct_counter: with_lib(include_str!("../../lua/correct_counter.lua")),
    })
}

/// The route scripts.
pub struct RouteScripts {
    pub publish: Script,
}

/// The route scripts, built on first use.
pub fn route() -> &'static RouteScripts {
    static SCRIPTS: OnceLock<RouteScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| RouteScripts { publish: Script::new(include_str!("../../lua/publish_route.lua")) })
}

/// The channel health scripts.
pub struct HealthScripts {
    pub record_outcome: Script,
}

/// The channel health scripts, built on first use.
pub fn health() -> &'static HealthScripts {
    static SCRIPTS: OnceLock<HealthScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| HealthScripts { record_outcome: Script::new(include_str!("../../lua/record_outcome.lua")) })
}

/// Loads every script (`SCRIPT LOAD`: on a cluster, on every node). Failures are only
/// logged: a call that meets NOSCRIPT loads its script again.
pub async fn load_all(conn: &mut crate::RedisConnection) {
    let (p, q, h) = (pool(), quota(), health());
    let all = [
        &p.draw,
        &p.count_draw,
        &p.refill,
        &p.shift_tail,
        &p.publish,
        &p.set_ejected,
        &p.restore_hits,
        &p.return_tickets,
        &q.reserve,
        &q.settle,
        &q.release,
        &q.sweep,
        &q.read,
        &q.publish_tenant,
        &q.apply_usage,
        &q.read_counters,
        &q.correct_counter,
        &h.record_outcome,
    ];
    for script in all {
        if let Err(e) = script.load_async(conn).await {
            tracing::debug!(error = %e, "loading a script ahead of use failed; it loads on first use");
            return;
        }
    }
}
