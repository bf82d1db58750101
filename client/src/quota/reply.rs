//! Reading script replies: flat arrays of strings and integers, by position.

use redis::Value;

use super::{Part, QuotaError, ReservationState};

pub(super) struct Fields<'a> {
    script: &'static str,
    items: &'a [Value],
}

impl<'a> Fields<'a> {
    pub(super) fn new(script: &'static str, items: &'a [Value]) -> Self {
        Self { script, items }
    }

    fn get(&self, i: usize) -> Result<&'a Value, QuotaError> {
        self.items.get(i).ok_or_else(|| QuotaError::Protocol {
            script: self.script,
            detail: format!("reply has {} items, wanted item {i}", self.items.len()),
        })
    }

    pub(super) fn str(&self, i: usize) -> Result<&'a str, QuotaError> {
        match self.get(i)? {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).map_err(|_| self.bad(i, "not utf-8")),
            Value::SimpleString(s) => Ok(s.as_str()),
            _ => Err(self.bad(i, "not a string")),
        }
    }

    pub(super) fn int(&self, i: usize) -> Result<i64, QuotaError> {
        match self.get(i)? {
            Value::Int(n) => Ok(*n),
            Value::BulkString(_) | Value::SimpleString(_) => self.str(i)?.parse().map_err(|_| self.bad(i, "not an integer")),
            _ => Err(self.bad(i, "not an integer")),
        }
    }

    pub(super) fn uint(&self, i: usize) -> Result<u64, QuotaError> {
        u64::try_from(self.int(i)?).map_err(|_| self.bad(i, "negative"))
    }

    pub(super) fn array(&self, i: usize) -> Result<Vec<&'a [Value]>, QuotaError> {
        match self.get(i)? {
            Value::Array(rows) => rows
                .iter()
                .map(|row| match row {
                    Value::Array(items) => Ok(items.as_slice()),
                    _ => Err(self.bad(i, "not an array of arrays")),
                })
                .collect(),
            _ => Err(self.bad(i, "not an array")),
        }
    }

    /// `bucket:amount,bucket:amount` (empty: none).
    pub(super) fn parts(&self, i: usize) -> Result<Vec<Part>, QuotaError> {
        let raw = self.str(i)?;
        raw.split(',')
            .filter(|s| !s.is_empty())
            .map(|part| {
                let (bucket, tokens) = part.split_once(':').ok_or_else(|| self.bad(i, "part without ':'"))?;
                let tokens = tokens.parse().map_err(|_| self.bad(i, "part amount not an integer"))?;
                Ok(Part { bucket: bucket.to_owned(), tokens })
            })
            .collect()
    }

    pub(super) fn state(&self, i: usize) -> Result<ReservationState, QuotaError> {
        Ok(match self.str(i)? {
            "open" => ReservationState::Open,
            "settled" => ReservationState::Settled,
            "released" => ReservationState::Released,
            "expired" => ReservationState::Expired,
            other => return Err(self.unexpected(other)),
        })
    }

    pub(super) fn unexpected(&self, what: &str) -> QuotaError {
        QuotaError::Protocol { script: self.script, detail: format!("unexpected {what:?}") }
    }

    fn bad(&self, i: usize, why: &str) -> QuotaError {
        QuotaError::Protocol { script: self.script, detail: format!("item {i}: {why}") }
    }
}
