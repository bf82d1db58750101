//! A pool's draw log as the control plane drains it: the stream the draw scripts append to
//! (one entry per call: `t` when, by the script's clock, in ms; `m` the members handed
//! out, in order) and the lease return script too (`r` the members of tickets given back,
//! which the log had as drawn when they were leased).

use super::admin::PoolAdmin;
use super::{PoolError, PoolName};

/// What one entry of the draw log says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoggedDraws {
    /// Tickets handed out, in order.
    Drawn(Vec<String>),
    /// Tickets of a lease given back unserved.
    Returned(Vec<String>),
    /// An entry this reader cannot make sense of (what is wrong with it): skipped, so one
    /// bad entry does not stop the drain of every entry after it.
    Unreadable(String),
}

/// One entry of a pool's draw log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawLogEntry {
    /// The stream id (`<ms>-<seq>`): where a drain that wrote this entry resumes.
    pub id: String,
    /// When the script ran (ms since the epoch, by its clock).
    pub at_ms: i64,
    pub draws: LoggedDraws,
}

/// The latest time an entry may name (the end of year 9999, in ms).
const LAST_MS: i64 = 253_402_300_799_999;

fn parse_entry(id: String, fields: Vec<String>) -> DrawLogEntry {
    let mut at_ms = None;
    let mut draws = None;
    let mut wrong = None;
    if !fields.len().is_multiple_of(2) {
        wrong = Some("an odd field list".to_owned());
    }
    for pair in fields.chunks_exact(2) {
        let (name, value) = (&pair[0], &pair[1]);
        let members = || value.split(',').filter(|m| !m.is_empty()).map(str::to_owned).collect();
        match name.as_str() {
            "t" => match value.parse::<i64>() {
                Ok(t) if (0..=LAST_MS).contains(&t) => at_ms = Some(t),
                _ => wrong = Some(format!("t {value:?} is not a time in ms")),
            },
            "m" => draws = Some(LoggedDraws::Drawn(members())),
            "r" => draws = Some(LoggedDraws::Returned(members())),
            _ => {}
        }
    }
    match (wrong, at_ms, draws) {
        (None, Some(at_ms), Some(draws)) => DrawLogEntry { id, at_ms, draws },
        (wrong, at_ms, _) => DrawLogEntry {
            id,
            at_ms: at_ms.unwrap_or(0),
            draws: LoggedDraws::Unreadable(wrong.unwrap_or_else(|| "no t, or neither m nor r".to_owned())),
        },
    }
}

/// Whether stream id `a` is before `b` (`<ms>-<seq>`, compared as numbers).
pub fn id_before(a: &str, b: &str) -> bool {
    let parts = |id: &str| {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (ms.parse::<u64>().unwrap_or(0), seq.parse::<u64>().unwrap_or(0))
    };
    parts(a) < parts(b)
}

impl PoolAdmin {
    /// Up to `count` entries of the pool's draw log after the entry `after` (none: from
    /// the start), oldest first.
    pub async fn read_draw_log(
        &self,
        pool: &PoolName,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<DrawLogEntry>, PoolError> {
        let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        let raw: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(self.keys.pool_draw_log(pool.as_str()))
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)?;
        Ok(raw.into_iter().map(|(id, fields)| parse_entry(id, fields)).collect())
    }

    /// The id of the last entry of the pool's draw log, if it holds any.
    pub async fn draw_log_last_id(&self, pool: &PoolName) -> Result<Option<String>, PoolError> {
        let raw: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(self.keys.pool_draw_log(pool.as_str()))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)?;
        Ok(raw.into_iter().next().map(|(id, _)| id))
    }

    /// Deletes the draw log's entries up to and including `through` (drained); returns how
    /// many.
    pub async fn trim_draw_log(&self, pool: &PoolName, through: &str) -> Result<u64, PoolError> {
        let key = self.keys.pool_draw_log(pool.as_str());
        let mut conn = self.conn().await?;
        let before: u64 = redis::cmd("XTRIM")
            .arg(&key)
            .arg("MINID")
            .arg(through)
            .query_async(&mut conn)
            .await
            .map_err(PoolError::Redis)?;
        let last: u64 =
            redis::cmd("XDEL").arg(&key).arg(through).query_async(&mut conn).await.map_err(PoolError::Redis)?;
        Ok(before + last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<String> {
        pairs.iter().flat_map(|(k, v)| [k.to_string(), v.to_string()]).collect()
    }

    #[test]
    fn entries_read_their_time_and_members() {
        let drawn = parse_entry("1-0".into(), fields(&[("t", "1700000000123"), ("m", "A,B,A")]));
        assert_eq!(drawn.at_ms, 1_700_000_000_123);
        assert_eq!(drawn.draws, LoggedDraws::Drawn(vec!["A".into(), "B".into(), "A".into()]));
        let back = parse_entry("2-0".into(), fields(&[("t", "5"), ("r", "C")]));
        assert_eq!(back.draws, LoggedDraws::Returned(vec!["C".into()]));
        for bad in [fields(&[("m", "A")]), fields(&[("t", "x"), ("m", "A")]), fields(&[("t", "-1"), ("m", "A")])] {
            assert!(matches!(parse_entry("3-0".into(), bad).draws, LoggedDraws::Unreadable(_)));
        }
        let mut odd = fields(&[("t", "5"), ("m", "A")]);
        odd.push("x".into());
        assert!(matches!(parse_entry("4-0".into(), odd).draws, LoggedDraws::Unreadable(_)));
    }

    #[test]
    fn stream_ids_compare_as_numbers() {
        assert!(id_before("999-0", "1000-0"));
        assert!(id_before("1000-2", "1000-10"));
        assert!(!id_before("1000-10", "1000-10"));
    }
}
