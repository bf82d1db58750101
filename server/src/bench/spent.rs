//! What Redis spent on a phase of a benchmark, summed over every primary (one server, or
//! each node of a cluster): the time `INFO commandstats` records for script calls, and the
//! CPU of Redis's main thread from `INFO cpu`.

use client::RedisHandle;

/// The script calls whose `usec` counts: a script's time includes the commands it runs
/// (which commandstats also lists on their own, so those are not added again).
const SCRIPT_COMMANDS: [&str; 6] = ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"];

/// Redis's counters at one instant, or their difference over a phase.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct RedisSpent {
    /// Microseconds spent executing script calls (`INFO commandstats`).
    pub script_usec: f64,
    /// Script calls made.
    pub script_calls: f64,
    /// Microseconds of CPU of the main thread, user and system (`INFO cpu`): parsing,
    /// replies and networking besides the commands.
    pub main_thread_usec: f64,
    /// Microseconds spent in every other command (`INFO commandstats`): those the scripts
    /// ran, and any the run sent besides (the bench's own reads of these figures not
    /// counted). A script's time less this is about what its Lua did itself.
    pub command_usec: f64,
}

/// Commands the bench itself sends to read or set up its figures: not counted.
const BENCH_COMMANDS: [&str; 6] = ["info", "config|get", "config|set", "slowlog|get", "slowlog|reset", "cluster|slots"];

impl RedisSpent {
    /// What was spent between `before` and this reading.
    pub fn since(self, before: RedisSpent) -> RedisSpent {
        RedisSpent {
            script_usec: self.script_usec - before.script_usec,
            script_calls: self.script_calls - before.script_calls,
            main_thread_usec: self.main_thread_usec - before.main_thread_usec,
            command_usec: self.command_usec - before.command_usec,
        }
    }

    /// Microseconds of the commands (not the script calls) per operation.
    pub fn command_us_per(&self, operations: u64) -> f64 {
        if operations == 0 {
            0.0
        } else {
            self.command_usec / operations as f64
        }
    }

    /// Script microseconds per operation (0 when no operation was made).
    pub fn script_us_per(&self, operations: u64) -> f64 {
        if operations == 0 {
            0.0
        } else {
            self.script_usec / operations as f64
        }
    }

    /// Main-thread CPU microseconds per operation.
    pub fn cpu_us_per(&self, operations: u64) -> f64 {
        if operations == 0 {
            0.0
        } else {
            self.main_thread_usec / operations as f64
        }
    }
}

/// Reads the counters of every primary now.
pub async fn read(redis: &RedisHandle) -> anyhow::Result<RedisSpent> {
    let mut conn = redis.connection().await?;
    let mut total = RedisSpent::default();
    for node in conn.primaries().await? {
        let stats: String =
            redis::from_owned_redis_value(conn.on_node(node.as_ref(), redis::cmd("INFO").arg("commandstats")).await?)?;
        let cpu: String =
            redis::from_owned_redis_value(conn.on_node(node.as_ref(), redis::cmd("INFO").arg("cpu")).await?)?;
        let one = parse(&stats, &cpu);
        total.script_usec += one.script_usec;
        total.script_calls += one.script_calls;
        total.main_thread_usec += one.main_thread_usec;
        total.command_usec += one.command_usec;
    }
    Ok(total)
}

/// Script calls slower than this are recorded by the watch (Redis's slow log, in µs).
const SLOW_SCRIPT_US: i64 = 100;

/// Redis's slow log set to record every call over [`SLOW_SCRIPT_US`] on every primary, so
/// that the slowest script call of a run can be read afterwards; each node's own settings
/// are put back by [`SlowScripts::finish`]. `None` when a node refuses `CONFIG` (a managed
/// Redis): the run then reports no slowest call.
pub struct SlowScripts {
    /// Per primary: its `slowlog-log-slower-than` and `slowlog-max-len` before.
    before: Vec<(Option<client::Node>, String, String)>,
}

impl SlowScripts {
    pub async fn start(redis: &RedisHandle) -> Option<SlowScripts> {
        let mut conn = redis.connection().await.ok()?;
        let mut before = Vec::new();
        for node in conn.primaries().await.ok()? {
            let config = |name: &str| redis::cmd("CONFIG").arg("GET").arg(name).to_owned();
            let get = |reply: redis::Value| -> Option<String> {
                redis::from_owned_redis_value::<Vec<String>>(reply).ok()?.into_iter().nth(1)
            };
            let slower = get(conn.on_node(node.as_ref(), &config("slowlog-log-slower-than")).await.ok()?)?;
            let max_len = get(conn.on_node(node.as_ref(), &config("slowlog-max-len")).await.ok()?)?;
            let set = redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(SLOW_SCRIPT_US)
                .arg("slowlog-max-len")
                .arg(4096)
                .to_owned();
            conn.on_node(node.as_ref(), &set).await.ok()?;
            conn.on_node(node.as_ref(), &redis::cmd("SLOWLOG").arg("RESET").to_owned()).await.ok()?;
            before.push((node, slower, max_len));
        }
        Some(SlowScripts { before })
    }

    /// The slowest script call recorded since [`SlowScripts::start`], in ms (0 when none
    /// took over [`SLOW_SCRIPT_US`]), with every node's slow-log settings put back.
    pub async fn finish(self, redis: &RedisHandle) -> anyhow::Result<f64> {
        let mut conn = redis.connection().await?;
        let mut slowest_us: i64 = 0;
        for (node, slower, max_len) in &self.before {
            let reply = conn.on_node(node.as_ref(), &redis::cmd("SLOWLOG").arg("GET").arg(4096).to_owned()).await?;
            slowest_us = slowest_us.max(slowest_script_us(&reply));
            let restore = redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(slower)
                .arg("slowlog-max-len")
                .arg(max_len)
                .to_owned();
            conn.on_node(node.as_ref(), &restore).await?;
        }
        Ok(slowest_us as f64 / 1000.0)
    }
}

/// The longest duration (µs) of a script call in a `SLOWLOG GET` reply: entries are
/// `[id, timestamp, duration, [command, args…], …]`.
fn slowest_script_us(reply: &redis::Value) -> i64 {
    let redis::Value::Array(entries) = reply else { return 0 };
    entries
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else { return None };
            let duration = match fields.get(2)? {
                redis::Value::Int(us) => *us,
                _ => return None,
            };
            let command: String = match fields.get(3)? {
                redis::Value::Array(args) => redis::from_redis_value(args.first()?).ok()?,
                _ => return None,
            };
            SCRIPT_COMMANDS.contains(&command.to_ascii_lowercase().as_str()).then_some(duration)
        })
        .max()
        .unwrap_or(0)
}

/// One node's counters from its `INFO commandstats` and `INFO cpu` texts.
fn parse(commandstats: &str, cpu: &str) -> RedisSpent {
    let mut spent = RedisSpent::default();
    for line in commandstats.lines() {
        let Some((name, fields)) = line.trim().strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        if BENCH_COMMANDS.contains(&name) {
            continue;
        }
        let script = SCRIPT_COMMANDS.contains(&name);
        for field in fields.split(',') {
            match field.split_once('=') {
                Some(("usec", v)) if script => spent.script_usec += v.parse::<f64>().unwrap_or(0.0),
                Some(("usec", v)) => spent.command_usec += v.parse::<f64>().unwrap_or(0.0),
                Some(("calls", v)) if script => spent.script_calls += v.parse::<f64>().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    for line in cpu.lines() {
        if let Some((name, value)) = line.trim().split_once(':') {
            if name == "used_cpu_user_main_thread" || name == "used_cpu_sys_main_thread" {
                spent.main_thread_usec += value.parse::<f64>().unwrap_or(0.0) * 1e6;
            }
        }
    }
    spent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_script_call_is_read_from_the_slow_log() {
        use redis::Value::{Array, BulkString, Int};
        let entry = |us: i64, command: &str| {
            Array(vec![Int(1), Int(1_700_000_000), Int(us), Array(vec![BulkString(command.as_bytes().to_vec())])])
        };
        let log =
            Array(vec![entry(900, "EVALSHA"), entry(5_000, "KEYS"), entry(1_250, "evalsha"), entry(300, "FCALL")]);
        assert_eq!(slowest_script_us(&log), 1_250);
        assert_eq!(slowest_script_us(&Array(vec![])), 0);
    }

    #[test]
    fn script_time_counts_the_script_calls_only_and_cpu_the_main_thread() {
        let stats = "# Commandstats\r\n\
            cmdstat_evalsha:calls=10,usec=250,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_lpop:calls=40,usec=80,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_fcall:calls=2,usec=30,usec_per_call=15.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_info:calls=3,usec=900,usec_per_call=300.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_hset:calls=20,usec=12,usec_per_call=0.60,rejected_calls=0,failed_calls=0\r\n";
        let cpu = "# CPU\r\nused_cpu_sys:9.5\r\nused_cpu_user_main_thread:1.25\r\nused_cpu_sys_main_thread:0.5\r\n";

        let spent = parse(stats, cpu);

        assert_eq!(spent.script_usec, 280.0);
        assert_eq!(spent.script_calls, 12.0);
        assert_eq!(spent.main_thread_usec, 1_750_000.0);
        assert_eq!(spent.command_usec, 92.0, "lpop and hset; not info");
        let later =
            RedisSpent { script_usec: 580.0, script_calls: 22.0, main_thread_usec: 1_760_000.0, command_usec: 292.0 };
        assert_eq!(later.since(spent).command_us_per(100), 2.0);
        assert_eq!(later.since(spent).script_us_per(100), 3.0);
        assert_eq!(later.since(spent).cpu_us_per(100), 100.0);
        assert_eq!(later.since(spent).script_us_per(0), 0.0);
    }
}
