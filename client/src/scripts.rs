//! One [`redis::Script`] per file in `lua/`, built once per process. Invoking one sends
//! `EVALSHA`, and on `NOSCRIPT` (after `SCRIPT FLUSH` or a Redis restart) loads it again.
//! The quota scripts are one Redis Functions library instead ([`QuotaLibrary`]).

use std::sync::OnceLock;

use redis::{Script, Value};

const QUOTA_LIB: &str = include_str!("../../lua/quota_lib.lua");
const CHUNK_LIB: &str = include_str!("../../lua/chunk_lib.lua");
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

/// The quota scripts. Each is a function of one Redis Functions library (see
/// [`QuotaLibrary`]): `lua/quota_lib.lua`, then the script's own body run as a function,
/// then the library's `flush()` (which writes the counters the body changed through the
/// library's cache, once per call), then the body's reply. A body that fails part-way still
/// has its counter changes written before the error is raised: Redis keeps a function's
/// writes up to an error, so the counters must match the ledger entries, leases and records
/// written directly. `publish_tenant` needs none of the library and stays a script.
pub struct QuotaScripts {
    pub library: QuotaLibrary,
    pub reserve: QuotaFn,
    pub settle: QuotaFn,
    pub settle_expired: QuotaFn,
    pub release: QuotaFn,
    pub sweep: QuotaFn,
    pub return_chunk: QuotaFn,
    pub read: QuotaFn,
    pub publish_tenant: Script,
    pub apply_usage: QuotaFn,
    pub read_counters: QuotaFn,
    pub correct_counter: QuotaFn,
}

/// The quota scripts' bodies, by the name each is registered under.
const QUOTA_BODIES: [(&str, &str); 10] = [
    ("reserve_quota", include_str!("../../lua/reserve_quota.lua")),
    ("settle_quota", include_str!("../../lua/settle_quota.lua")),
    ("settle_expired", include_str!("../../lua/settle_expired.lua")),
    ("release_quota", include_str!("../../lua/release_quota.lua")),
    ("sweep_quota", include_str!("../../lua/sweep_quota.lua")),
    ("return_chunk", include_str!("../../lua/return_chunk.lua")),
    ("read_quota", include_str!("../../lua/read_quota.lua")),
    ("apply_usage", include_str!("../../lua/apply_usage.lua")),
    ("read_counters", include_str!("../../lua/read_counters.lua")),
    ("correct_counter", include_str!("../../lua/correct_counter.lua")),
];

/// The quota scripts that write nothing (registered `no-writes`).
const READ_ONLY: [&str; 2] = ["read_quota", "read_counters"];

/// The quota scripts as one Redis Functions library, loaded once per primary
/// (`FUNCTION LOAD`; on a cluster, on every primary) and called with `FCALL`. A script sent
/// with `EVALSHA` runs the library's top level (some 50 helpers, their tables, the clock)
/// again on every call, 6-14 µs of Redis time before it reads a key; a function does not.
///
/// The library's and its functions' names carry a hash of its code, so instances of
/// different builds sharing a Redis each call their own (function names are global to a
/// server). A Redis that lacks the library (restarted without persistence, `FUNCTION
/// FLUSH`, a new empty node; a promoted replica has it from replication) answers "Function
/// not found": the call loads it and runs once more, as `NOSCRIPT` does for a script.
pub struct QuotaLibrary {
    name: String,
    code: String,
}

impl QuotaLibrary {
    fn build() -> Self {
        let mut body = format!("{QUOTA_LIB}\n{CHUNK_LIB}\n");
        for (name, code) in QUOTA_BODIES {
            body.push_str(&format!("local function {name}()\n{code}\nend\n"));
        }
        body.push_str(
            "local function entry(body)\n  return function(keys, args)\n    begin(keys, args)\n    \
             begin_chunks()\n    local ok, reply = pcall(body)\n    flush_chunks()\n    flush()\n    end_call()\n    if not ok then error(reply, 0) end\n    \
             return reply\n  end\nend\n",
        );
        let hash = Script::new(&body).get_hash()[..16].to_owned();
        let name = format!("tessera_quota_{hash}");
        for (function, _) in QUOTA_BODIES {
            // The two readers may run while Redis refuses writes (full under `noeviction`,
            // `NOREPLICAS`), as their scripts did: a function without flags is refused then
            // before it runs.
            let flags = if READ_ONLY.contains(&function) { "{'no-writes'}" } else { "{}" };
            body.push_str(&format!(
                "redis.register_function{{function_name = '{name}_{function}', callback = entry({function}), \
                 flags = {flags}}}\n"
            ));
        }
        Self { code: format!("#!lua name={name}\n{body}"), name }
    }

    /// The library's name (`tessera_quota_<hash of its code>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Loads the library (`FUNCTION LOAD REPLACE`: on a cluster, on every primary).
    pub async fn load<C: redis::aio::ConnectionLike>(&self, conn: &mut C) -> redis::RedisResult<()> {
        let _: redis::Value =
            redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(&self.code).query_async(conn).await?;
        Ok(())
    }
}

/// One function of the quota library.
pub struct QuotaFn {
    function: String,
}

impl QuotaFn {
    /// A call of this function with `key` as its first key.
    pub fn key<T: redis::ToRedisArgs>(&self, key: T) -> FnCall<'_> {
        let mut call = FnCall { function: self, keys: Vec::new(), args: Vec::new() };
        call.key(key);
        call
    }
}

/// One `FCALL` being built: keys, then arguments (as [`redis::ScriptInvocation`]).
pub struct FnCall<'a> {
    function: &'a QuotaFn,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl FnCall<'_> {
    pub fn key<T: redis::ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    pub fn arg<T: redis::ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(&self.function.function).arg(self.keys.len());
        for k in &self.keys {
            cmd.arg(k.as_slice());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// Calls the function; when Redis lacks the library, loads it and calls once more.
    pub async fn invoke_async<T: redis::FromRedisValue, C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> redis::RedisResult<T> {
        let cmd = self.command();
        match cmd.query_async(conn).await {
            Err(e) if is_missing(&e) => {
                // On a cluster the load must succeed on every primary; one that fails (an
                // unrelated node away) need not keep this call from its own node, which
                // may hold the library now: the call is tried again all the same.
                let loaded = quota().library.load(conn).await;
                match cmd.query_async(conn).await {
                    Err(again) if is_missing(&again) => Err(loaded.err().unwrap_or(again)),
                    other => other,
                }
            }
            other => other,
        }
    }
}

/// Whether `error` is Redis's answer to an `FCALL` of a function it does not have.
fn is_missing(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::ResponseError && error.to_string().contains("Function not found")
}

/// The quota scripts, built on first use.
pub fn quota() -> &'static QuotaScripts {
    static SCRIPTS: OnceLock<QuotaScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let library = QuotaLibrary::build();
        let function = |name: &str| QuotaFn { function: format!("{}_{name}", library.name) };
        QuotaScripts {
            reserve: function("reserve_quota"),
            settle: function("settle_quota"),
            settle_expired: function("settle_expired"),
            release: function("release_quota"),
            sweep: function("sweep_quota"),
            return_chunk: function("return_chunk"),
            read: function("read_quota"),
            publish_tenant: Script::new(include_str!("../../lua/publish_tenant.lua")),
            apply_usage: function("apply_usage"),
            read_counters: function("read_counters"),
            correct_counter: function("correct_counter"),
            library,
        }
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

/// Loads every script (`SCRIPT LOAD`: on a cluster, on every node) and the quota library.
/// Failures are only logged: a call that meets NOSCRIPT (or a missing function) loads it
/// again.
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
        &q.publish_tenant,
        &h.record_outcome,
    ];
    if let Err(e) = q.library.load(conn).await {
        // Unlike a script, a library also fails to load on a Redis older than 7.0 or a
        // user without FUNCTION LOAD: every quota call would then fail, so this is said.
        tracing::warn!(error = %e, library = q.library.name(), "loading the quota library failed (Redis 7.0 or later is needed, and FUNCTION LOAD and FCALL); calls load it again when missing");
    }
    for script in all {
        if let Err(e) = script.load_async(conn).await {
            tracing::debug!(error = %e, "loading a script ahead of use failed; it loads on first use");
            return;
        }
    }
}

/// The quota libraries a Redis holds (`FUNCTION LIST` on every primary: a library may be
/// on some only, after a node restarted empty): every build's, by name, with whether it is
/// this build's.
pub async fn quota_libraries(conn: &mut crate::RedisConnection) -> redis::RedisResult<Vec<(String, bool)>> {
    let current = quota().library.name();
    let mut names = std::collections::BTreeSet::new();
    for node in conn.primaries().await? {
        names.extend(quota_libraries_on(conn, node.as_ref()).await?);
    }
    Ok(names.into_iter().map(|name| (name.clone(), name == current)).collect())
}

/// The quota libraries one primary holds (`None`: the one server).
async fn quota_libraries_on(
    conn: &mut crate::RedisConnection,
    node: Option<&crate::Node>,
) -> redis::RedisResult<Vec<String>> {
    let list = redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg("tessera_quota_*").to_owned();
    let reply = conn.on_node(node, &list).await?;
    // The pattern is a case-insensitive glob: only this exact prefix is ours.
    Ok(library_names(&reply).into_iter().filter(|name| name.starts_with("tessera_quota_")).collect())
}

/// Removes every quota library but this build's (`FUNCTION DELETE` on each primary that
/// holds it) and returns their names. Each build's library holds its own functions, so a
/// library outlives the instances that ran it; an instance of an older build still running
/// loads its own again on its next call ("Function not found"), so pruning during a rolling
/// upgrade is safe, and once none runs, nothing loads them again.
pub async fn prune_quota_libraries(conn: &mut crate::RedisConnection) -> redis::RedisResult<Vec<String>> {
    let current = quota().library.name();
    let mut removed = std::collections::BTreeSet::new();
    let mut first_error = None;
    // Every primary is tried, also after one failed; the first error is answered after.
    for node in conn.primaries().await? {
        let names = match quota_libraries_on(conn, node.as_ref()).await {
            Ok(names) => names,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        for name in names.into_iter().filter(|name| name != current) {
            let delete = redis::cmd("FUNCTION").arg("DELETE").arg(&name).to_owned();
            match conn.on_node(node.as_ref(), &delete).await {
                Ok(_) => {
                    removed.insert(name);
                }
                // Removed meanwhile (another prune).
                Err(e) if e.to_string().contains("Library not found") => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    match first_error {
        Some(e) => {
            tracing::warn!(removed = ?removed, error = %e, "pruning quota libraries failed on a primary after removing these");
            Err(e)
        }
        None => Ok(removed.into_iter().collect()),
    }
}

/// The `library_name` of every library in a `FUNCTION LIST` reply (RESP2 arrays of
/// name-value pairs, or RESP3 maps).
fn library_names(reply: &Value) -> Vec<String> {
    let Value::Array(libraries) = reply else { return Vec::new() };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    libraries
        .iter()
        .filter_map(|library| {
            let pairs: Vec<(&Value, &Value)> = match library {
                Value::Array(items) => items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
                Value::Map(items) => items.iter().map(|(k, v)| (k, v)).collect(),
                _ => return None,
            };
            pairs.into_iter().find(|(k, _)| text(k).as_deref() == Some("library_name")).and_then(|(_, v)| text(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the library's top level declares (`local function x`, `local x, y`).
    fn top_level_names(lua: &str) -> Vec<String> {
        lua.lines()
            .filter_map(|line| line.strip_prefix("local "))
            .map(|rest| rest.strip_prefix("function ").unwrap_or(rest))
            .flat_map(|rest| {
                let names = rest.split(['=', '(']).next().unwrap_or("");
                names.split(',').map(|n| n.trim().to_owned()).collect::<Vec<_>>()
            })
            .filter(|n| !n.is_empty())
            .collect()
    }

    #[test]
    fn no_top_level_name_of_the_quota_library_is_declared_twice() {
        // A second `local function x` further down would shadow the first for every body
        // after it (the bodies are functions of the same chunk): each name once, and no
        // body named like a helper.
        let mut names = top_level_names(QUOTA_LIB);
        names.extend(top_level_names(CHUNK_LIB));
        names.extend(QUOTA_BODIES.iter().map(|(name, _)| (*name).to_owned()));
        names.push("entry".to_owned());
        let mut seen = std::collections::HashSet::new();
        let twice: Vec<&String> = names.iter().filter(|n| !seen.insert(n.as_str())).collect();
        assert!(twice.is_empty(), "declared twice at the library's top level: {twice:?}");
        assert!(names.iter().any(|n| n == "begin") && names.iter().any(|n| n == "end_call"), "{names:?}");
    }

    #[test]
    fn the_library_registers_every_body_under_its_hashed_name_and_the_readers_write_nothing() {
        let q = quota();
        assert!(q.library.code.starts_with(&format!("#!lua name={}\n", q.library.name)));
        for (name, _) in QUOTA_BODIES {
            let registered = format!("function_name = '{}_{name}'", q.library.name);
            let line = q.library.code.lines().find(|l| l.contains(&registered)).expect(name);
            assert_eq!(line.contains("'no-writes'"), READ_ONLY.contains(&name), "{line}");
        }
        assert_eq!(q.reserve.function, format!("{}_reserve_quota", q.library.name));
    }
}
