//! The audit trail as CSV (`GET /api/v1/audit.csv`), and its check away from the database
//! (`tessera audit verify --csv FILE`): every row's hash recomputed from the exported
//! content, each link to the row before, and, with the key, each signature.
//!
//! A field encodes one stored value so that the export can be read back exactly:
//! - a NULL is an empty field; every value is quoted (RFC 4180: `"` doubled), so no
//!   spreadsheet splits it on a `;` or a tab and runs a part of it;
//! - a value that is empty or begins with `'`, `=`, `+`, `-`, `@`, a tab or a carriage
//!   return gets one `'` in front (a spreadsheet never runs an actor's or a reason's text
//!   as a formula); one leading `'` is taken off when read back.
//!
//! Without the key the check proves only that the file is self-consistent: the row hash is
//! SHA-256 of text anyone can rebuild, so whoever rewrites a row can rewrite the chain after
//! it. A trail that is signed is therefore not called intact without the key. Rows cut from
//! either end leave a consistent file: `--head` names a row (and its hash) recorded
//! elsewhere that must be in it.

use std::io::BufRead;

use super::chain::{Problem, StoredRow, Walk};
use crate::inputs::{hex, parse_hex};

/// The export's first line: the columns, in order.
pub const HEADER: &str = "id,at,actor,source,action,entity,before,after,reason,request_id,prev_hash,hash,mac";

/// The most bytes one field may hold when read back (a stored JSON body is far smaller):
/// a file that is not an export cannot make the check hold more than this per field.
const MAX_FIELD: usize = 64 << 20;

/// One stored value as a CSV field (`None`: a NULL).
pub fn field(value: Option<&str>) -> String {
    let Some(value) = value else { return String::new() };
    let guard = if value.is_empty() || value.starts_with(['\'', '=', '+', '-', '@', '\t', '\r']) { "'" } else { "" };
    format!("\"{guard}{}\"", value.replace('"', "\"\""))
}

/// A place in a file that is not CSV as [`field`] writes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {rule}")]
pub struct ParseError {
    pub line: usize,
    pub rule: String,
}

/// One record: the line it starts on, and its fields decoded (`None` for a NULL).
pub type Record = (usize, Vec<Option<String>>);

/// The records of a CSV file, read as they come (one record in memory at a time). Lines
/// end in `\n` or `\r\n`.
pub struct Records<R: BufRead> {
    input: std::iter::Peekable<std::io::Bytes<R>>,
    line: usize,
    failed: bool,
}

impl<R: BufRead> Records<R> {
    pub fn new(input: R) -> Self {
        Self { input: input.bytes().peekable(), line: 1, failed: false }
    }

    fn error(&self, rule: &str) -> ParseError {
        ParseError { line: self.line, rule: rule.to_owned() }
    }

    fn peek(&mut self) -> Result<Option<u8>, ParseError> {
        match self.input.peek() {
            None => Ok(None),
            Some(Ok(byte)) => Ok(Some(*byte)),
            Some(Err(_)) => {
                let e = self.input.next().and_then(Result::err).map_or_else(String::new, |e| e.to_string());
                Err(self.error(&format!("cannot be read: {e}")))
            }
        }
    }

    fn take(&mut self) -> Result<Option<u8>, ParseError> {
        let byte = self.peek()?;
        self.input.next();
        Ok(byte)
    }

    fn record(&mut self) -> Result<Record, ParseError> {
        let start = self.line;
        let mut fields = Vec::new();
        loop {
            let mut raw = Vec::new();
            let quoted = self.peek()? == Some(b'"');
            if quoted {
                self.take()?;
                loop {
                    match self.take()? {
                        None => return Err(ParseError { line: start, rule: "a quoted field is not closed".into() }),
                        Some(b'"') if self.peek()? == Some(b'"') => {
                            self.take()?;
                            raw.push(b'"');
                        }
                        Some(b'"') => break,
                        Some(byte) => {
                            self.line += usize::from(byte == b'\n');
                            raw.push(byte);
                        }
                    }
                    if raw.len() > MAX_FIELD {
                        return Err(self.error("a field longer than 64 MiB"));
                    }
                }
                if !matches!(self.peek()?, None | Some(b',' | b'\n' | b'\r')) {
                    return Err(self.error("text after a quoted field's closing quote"));
                }
            } else {
                while let Some(byte) = self.peek()? {
                    match byte {
                        b',' | b'\n' | b'\r' => break,
                        b'"' => return Err(self.error("a quote inside a field that is not quoted")),
                        _ if raw.len() >= MAX_FIELD => return Err(self.error("a field longer than 64 MiB")),
                        _ => raw.push(byte),
                    }
                    self.take()?;
                }
            }
            let text = String::from_utf8(raw).map_err(|_| self.error("a field that is not UTF-8"))?;
            fields.push(decode(text, quoted));
            match self.take()? {
                Some(b',') if fields.len() < 64 => continue,
                Some(b',') => return Err(self.error("more than 64 fields")),
                Some(b'\n') => {
                    self.line += 1;
                    break;
                }
                Some(b'\r') if self.peek()? == Some(b'\n') => {
                    self.take()?;
                    self.line += 1;
                    break;
                }
                Some(_) => return Err(self.error("a carriage return that does not end the line")),
                None => break,
            }
        }
        Ok((start, fields))
    }
}

impl<R: BufRead> Iterator for Records<R> {
    type Item = Result<Record, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let record = match self.peek() {
            Ok(None) => return None,
            Ok(Some(_)) => self.record(),
            Err(e) => Err(e),
        };
        self.failed = record.is_err();
        Some(record)
    }
}

/// An unquoted empty field is a NULL; a value loses one leading `'`.
fn decode(text: String, quoted: bool) -> Option<String> {
    if text.is_empty() && !quoted {
        None
    } else if let Some(value) = text.strip_prefix('\'') {
        Some(value.to_owned())
    } else {
        Some(text)
    }
}

/// What a check of an export found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExportReport {
    /// Rows that passed.
    pub rows: u64,
    /// The first and the last row that passed.
    pub first: Option<i64>,
    pub last: Option<i64>,
    /// The last passing row's hash (hex): compare it with a head recorded elsewhere.
    pub head: Option<String>,
    /// Whether the rows carry signatures, and whether they were checked (a key was given).
    pub signed: bool,
    pub signatures_checked: bool,
    /// Every row passed, and the signatures were checked where there are any.
    pub intact: bool,
    /// The first row that fails, and why (`gap`, `content`, `link`, `signature`,
    /// `unsigned`, `head`); `unkeyed` (no row) when the rows are signed and no key was given.
    pub first_broken: Option<i64>,
    pub problem: Option<&'static str>,
}

/// Checks an export read from `input`: the header, then each row in order from the first
/// (row 1, or the row after the first row's `prev_hash`: an export of a period checks from
/// there; an export filtered by entity, actor or action has gaps and fails as such).
/// `signatures`: check each row's signature with the process's key ([`super::key`]).
/// `head`: a row id and hash recorded elsewhere, which the export must hold unchanged.
pub fn verify_export(
    input: impl BufRead,
    signatures: bool,
    head: Option<(i64, &[u8])>,
) -> anyhow::Result<ExportReport> {
    let mut records = Records::new(input);
    let header = records
        .next()
        .transpose()?
        .map(|(_, fields)| fields.into_iter().map(Option::unwrap_or_default).collect::<Vec<_>>().join(","));
    anyhow::ensure!(
        header.as_deref() == Some(HEADER),
        "line 1: the header must be {HEADER} (an export of GET /api/v1/audit.csv)"
    );
    let mut report = ExportReport {
        rows: 0,
        first: None,
        last: None,
        head: None,
        signed: false,
        signatures_checked: signatures,
        intact: true,
        first_broken: None,
        problem: None,
    };
    let mut walk: Option<Walk> = None;
    let mut head_seen = false;
    for record in records {
        let (line, fields) = record?;
        let (row, mac) = stored_row(line, fields)?;
        report.signed |= mac.is_some();
        let walk = walk.get_or_insert_with(|| match &row.prev_hash {
            Some(prev) => Walk::after(row.id.saturating_sub(1), prev.clone(), signatures),
            None => Walk::from_first(signatures),
        });
        let problem = match walk.step(&row, mac.as_deref()) {
            Err(problem) => Some(Problem::as_str(problem)),
            Ok(()) if head.is_some_and(|(id, hash)| id == row.id && hash != row.hash.as_slice()) => Some("head"),
            Ok(()) => None,
        };
        if let Some(problem) = problem {
            (report.intact, report.first_broken, report.problem) = (false, Some(row.id), Some(problem));
            return Ok(report);
        }
        head_seen |= head.is_some_and(|(id, _)| id == row.id);
        report.rows += 1;
        report.first.get_or_insert(row.id);
        report.last = Some(row.id);
        report.head = Some(hex(&row.hash));
    }
    anyhow::ensure!(report.rows > 0, "the export holds no row: nothing to check");
    if let Some((id, _)) = head.filter(|_| !head_seen) {
        (report.intact, report.first_broken, report.problem) = (false, Some(id), Some("head"));
    } else if report.signed && !signatures {
        (report.intact, report.problem) = (false, Some("unkeyed"));
    }
    Ok(report)
}

/// The report for people.
pub fn render(report: &ExportReport) -> String {
    let range = match (report.first, report.last) {
        (Some(first), Some(last)) => format!("rows {first} to {last}"),
        _ => "no rows".to_owned(),
    };
    let checked = if report.signatures_checked {
        "hashes, links and signatures checked"
    } else {
        "hashes and links checked, no signatures (TESSERA_AUDIT_KEY is not set)"
    };
    let verdict = match (report.first_broken, report.problem) {
        (Some(id), Some("head")) => format!("not intact: row {id} is missing or differs from the head given"),
        (Some(id), Some(problem)) => format!("broken at row {id}: {problem}"),
        (None, Some(_)) => "not verified: the rows are signed and TESSERA_AUDIT_KEY is not set; their hashes and \
                           links hold, but anyone who rewrites a row can recompute those"
            .to_owned(),
        _ => format!("intact; head {}", report.head.as_deref().unwrap_or("(none)")),
    };
    format!("{} {range} passed; {checked}\n{verdict}\n", report.rows)
}

/// One record as a stored row and its signature; a record that cannot be one is an error
/// naming its line and column.
fn stored_row(line: usize, fields: Vec<Option<String>>) -> anyhow::Result<(StoredRow, Option<Vec<u8>>)> {
    let columns: Vec<&str> = HEADER.split(',').collect();
    anyhow::ensure!(
        fields.len() == columns.len(),
        "line {line}: {} fields, the header has {}",
        fields.len(),
        columns.len()
    );
    let mut fields = fields.into_iter();
    let mut next = |name: &str| (name.to_owned(), fields.next().flatten());
    let required = |(name, value): (String, Option<String>)| {
        value.ok_or_else(|| anyhow::anyhow!("line {line}: {name} must not be empty"))
    };
    let bytes = |(name, value): (String, Option<String>)| -> anyhow::Result<Option<Vec<u8>>> {
        value
            .map(|v| parse_hex(&v).ok_or_else(|| anyhow::anyhow!("line {line}: {name} must be hex digits")))
            .transpose()
    };
    let id = required(next("id"))?;
    let id: i64 = id.parse().map_err(|_| anyhow::anyhow!("line {line}: id must be a whole number, got {id:?}"))?;
    let at = required(next("at"))?;
    let at = Some(at.parse().map_err(|_| anyhow::anyhow!("line {line}: at must be an RFC 3339 time, got {at:?}"))?);
    let row = StoredRow {
        id,
        at,
        actor: required(next("actor"))?,
        source: required(next("source"))?,
        action: required(next("action"))?,
        entity: required(next("entity"))?,
        before: next("before").1,
        after: next("after").1,
        reason: next("reason").1,
        request_id: next("request_id").1,
        prev_hash: bytes(next("prev_hash"))?,
        hash: bytes(next("hash"))?.ok_or_else(|| anyhow::anyhow!("line {line}: hash must not be empty"))?,
    };
    let mac = bytes(next("mac"))?;
    Ok((row, mac))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(text: &str) -> Result<Vec<Record>, ParseError> {
        Records::new(text.as_bytes()).collect()
    }

    fn verify(text: &str, head: Option<(i64, &[u8])>) -> anyhow::Result<ExportReport> {
        verify_export(text.as_bytes(), false, head)
    }

    #[test]
    fn every_value_reads_back_as_it_was_written_null_and_empty_apart() {
        let values = [
            None,
            Some(""),
            Some("plain"),
            Some("'"),
            Some("''quoted"),
            Some("=cmd()"),
            Some("'=not a formula"),
            Some("-1"),
            Some("a,b"),
            Some("say \"hi\"\nand, \"bye\"\r\n"),
            Some("\tx"),
            Some("@sum"),
            Some("é✓"),
        ];
        let line: Vec<String> = values.iter().map(|v| field(*v)).collect();
        // Lines may end in \n or \r\n (RFC 4180's).
        let text = format!("{}\r\n{}\n", line.join(","), line.join(","));
        let read = records(&text).unwrap();
        let expected: Vec<Option<String>> = values.iter().map(|v| v.map(str::to_owned)).collect();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0], (1, expected.clone()));
        assert_eq!(read[1].1, expected);
        // A spreadsheet sees no formula: every field that could start one starts with '.
        for (value, written) in values.iter().zip(&line) {
            let shown = written.trim_start_matches('"');
            assert!(!shown.starts_with(['=', '+', '-', '@', '\t', '\r']), "{value:?} written as {written:?}");
        }
    }

    #[test]
    fn malformed_csv_names_the_line_and_the_rule() {
        assert_eq!(records("a,\"b\nc").unwrap_err().rule, "a quoted field is not closed");
        assert_eq!(
            records("a\nb\"c\n").unwrap_err(),
            ParseError { line: 2, rule: "a quote inside a field that is not quoted".into() }
        );
        assert_eq!(records("\"a\"b\n").unwrap_err().rule, "text after a quoted field's closing quote");
        assert_eq!(records("a\rb\n").unwrap_err().rule, "a carriage return that does not end the line");
        assert_eq!(records("\"\u{ff}\"").map(|r| r.len()), Ok(1), "a char, not a byte, is not refused");
        assert_eq!(records(&format!("{}\n", ",".repeat(64))).unwrap_err().rule, "more than 64 fields");
    }

    fn export(rows: &[StoredRow]) -> String {
        export_with(rows, false)
    }

    /// `signed`: each row carries a (made-up) signature.
    fn export_with(rows: &[StoredRow], signed: bool) -> String {
        let mut text = format!("{HEADER}\n");
        for row in rows {
            let at = row.at.unwrap().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            let prev = row.prev_hash.as_deref().map(hex);
            let fields = [
                Some(row.id.to_string()),
                Some(at),
                Some(row.actor.clone()),
                Some(row.source.clone()),
                Some(row.action.clone()),
                Some(row.entity.clone()),
                row.before.clone(),
                row.after.clone(),
                row.reason.clone(),
                row.request_id.clone(),
                prev,
                Some(hex(&row.hash)),
                signed.then(|| "00".to_owned()),
            ];
            let line: Vec<String> = fields.iter().map(|f| field(f.as_deref())).collect();
            text.push_str(&line.join(","));
            text.push('\n');
        }
        text
    }

    fn chain() -> Vec<StoredRow> {
        let mut rows: Vec<StoredRow> = Vec::new();
        for id in 1..=3 {
            let mut row = StoredRow {
                id,
                at: Some("2026-12-07T10:00:00.000001Z".parse().unwrap()),
                actor: "=ops, \"night\"".into(),
                source: "api".into(),
                action: "pool.weights".into(),
                entity: "pool:cn-pay".into(),
                before: (id > 1).then(|| r#"{"a": 1}"#.into()),
                after: Some(r#"{"a": 2, "s": "x,\"y\""}"#.into()),
                reason: if id == 2 { Some(String::new()) } else { None },
                request_id: Some("'r-1".into()),
                prev_hash: rows.last().map(|r| r.hash.clone()),
                hash: vec![],
            };
            row.hash = row.computed_hash();
            rows.push(row);
        }
        rows
    }

    #[test]
    fn an_export_of_an_intact_chain_verifies_and_any_change_is_found() {
        let rows = chain();
        let report = verify(&export(&rows), None).unwrap();
        assert!(report.intact, "{report:?}");
        assert_eq!((report.rows, report.first, report.last), (3, Some(1), Some(3)));
        assert_eq!(report.head, Some(hex(&rows[2].hash)));

        // An empty reason read as NULL would change the hash: it must not.
        let mut nulled = rows.clone();
        nulled[1].reason = None;
        let report = verify(&export(&nulled), None).unwrap();
        assert_eq!((report.first_broken, report.problem), (Some(2), Some("content")));

        // A period's export (from row 2) checks from its first row's prev_hash.
        assert!(verify(&export(&rows[1..]), None).unwrap().intact);
        // A row left out is a gap.
        let gapped = [rows[0].clone(), rows[2].clone()];
        let report = verify(&export(&gapped), None).unwrap();
        assert_eq!((report.first_broken, report.problem), (Some(3), Some("gap")));
        // A broken report counts only the rows that passed.
        assert_eq!((report.rows, report.last), (1, Some(1)));
    }

    #[test]
    fn a_head_recorded_elsewhere_catches_rows_cut_from_the_end_and_a_rewritten_chain() {
        let rows = chain();
        let text = export(&rows);
        assert!(verify(&text, Some((2, &rows[1].hash))).unwrap().intact);
        // The last row cut off: the file is consistent, the head is missing.
        let cut = verify(&export(&rows[..1]), Some((2, &rows[1].hash))).unwrap();
        assert_eq!((cut.intact, cut.first_broken, cut.problem), (false, Some(2), Some("head")));
        // Row 2 rewritten and the chain recomputed after it: consistent, but not the head.
        let mut forged = rows.clone();
        forged[1].reason = Some("rewritten".into());
        forged[1].hash = forged[1].computed_hash();
        forged[2].prev_hash = Some(forged[1].hash.clone());
        forged[2].hash = forged[2].computed_hash();
        assert!(verify(&export(&forged), None).unwrap().intact, "self-consistent without a head");
        let caught = verify(&export(&forged), Some((2, &rows[1].hash))).unwrap();
        assert_eq!((caught.first_broken, caught.problem), (Some(2), Some("head")));
    }

    #[test]
    fn a_signed_export_is_not_called_intact_without_the_key() {
        let report = verify(&export_with(&chain(), true), None).unwrap();
        assert_eq!((report.intact, report.signed, report.problem), (false, true, Some("unkeyed")));
        assert_eq!(report.rows, 3, "its hashes and links were checked");
        assert!(render(&report).contains("not verified"), "{}", render(&report));
    }

    #[test]
    fn a_file_that_is_not_an_export_is_refused_by_line() {
        assert!(verify("id,at\n1,x\n", None).unwrap_err().to_string().contains("line 1: the header must be"));
        assert!(verify(&format!("{HEADER}\n"), None).unwrap_err().to_string().contains("holds no row"));
        let bad_id = format!("{HEADER}\nx,2026-12-07T10:00:00Z,a,api,x,e,,,,,,00,\n");
        assert!(verify(&bad_id, None).unwrap_err().to_string().contains("line 2: id must be a whole number"));
        let short = format!("{HEADER}\n1,2\n");
        assert!(verify(&short, None).unwrap_err().to_string().contains("line 2: 2 fields, the header has 13"));
    }
}
