//! Reading script replies: flat arrays of strings and integers, by position.

use redis::Value;

/// A reply this client does not understand (a script of another version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyError {
    pub script: &'static str,
    pub detail: String,
}

pub(crate) struct Fields<'a> {
    script: &'static str,
    items: &'a [Value],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(script: &'static str, items: &'a [Value]) -> Self {
        Self { script, items }
    }

    fn get(&self, i: usize) -> Result<&'a Value, ReplyError> {
        self.items.get(i).ok_or_else(|| ReplyError {
            script: self.script,
            detail: format!("reply has {} items, wanted item {i}", self.items.len()),
        })
    }

    pub(crate) fn str(&self, i: usize) -> Result<&'a str, ReplyError> {
        match self.get(i)? {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).map_err(|_| self.bad(i, "not utf-8")),
            Value::SimpleString(s) => Ok(s.as_str()),
            _ => Err(self.bad(i, "not a string")),
        }
    }

    pub(crate) fn int(&self, i: usize) -> Result<i64, ReplyError> {
        match self.get(i)? {
            Value::Int(n) => Ok(*n),
            Value::BulkString(_) | Value::SimpleString(_) => {
                self.str(i)?.parse().map_err(|_| self.bad(i, "not an integer"))
            }
            _ => Err(self.bad(i, "not an integer")),
        }
    }

    /// The item as it came.
    pub(crate) fn raw(&self, i: usize) -> Result<&'a Value, ReplyError> {
        self.get(i)
    }

    pub(crate) fn uint(&self, i: usize) -> Result<u64, ReplyError> {
        u64::try_from(self.int(i)?).map_err(|_| self.bad(i, "negative"))
    }

    pub(crate) fn array(&self, i: usize) -> Result<Vec<&'a [Value]>, ReplyError> {
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

    pub(crate) fn unexpected(&self, what: &str) -> ReplyError {
        ReplyError { script: self.script, detail: format!("unexpected {what:?}") }
    }

    pub(crate) fn bad(&self, i: usize, why: &str) -> ReplyError {
        ReplyError { script: self.script, detail: format!("item {i}: {why}") }
    }
}
