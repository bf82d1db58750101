//! The audit trail as CSV (`GET /api/v1/audit.csv`), and its check away from the database
//! (`tessera audit verify --csv FILE`): every row's hash recomputed from the exported
//! content, each link to the row before, and, with the key, each signature.
//!
//! A field encodes one stored value so that the export can be read back exactly:
//! - a NULL is an empty field; a value is never empty: the empty string is written `'`;
//! - a value that begins with `'`, `=`, `+`, `-`, `@`, a tab or a carriage return gets one
//!   `'` in front (a spreadsheet then never runs an actor's or a reason's text as a
//!   formula), and one leading `'` is taken off when read back;
//! - RFC 4180 quoting: a field holding `,`, `"`, a line feed or a carriage return is
//!   quoted, with `"` doubled.

use super::chain::{Problem, StoredRow, Walk};
use crate::inputs::{hex, parse_hex};

/// The export's first line: the columns, in order.
pub const HEADER: &str = "id,at,actor,source,action,entity,before,after,reason,request_id,prev_hash,hash,mac";

/// One stored value as a CSV field (`None`: a NULL).
pub fn field(value: Option<&str>) -> String {
    let Some(value) = value else { return String::new() };
    let safe = if value.is_empty() || value.starts_with(['\'', '=', '+', '-', '@', '\t', '\r']) {
        format!("'{value}")
    } else {
        value.to_owned()
    };
    if safe.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", safe.replace('"', "\"\""))
    } else {
        safe
    }
}

/// A line of `text` that is not CSV as [`field`] writes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {rule}")]
pub struct ParseError {
    pub line: usize,
    pub rule: String,
}

/// One record: the line it starts on, and its fields decoded (`None` for a NULL).
pub type Record = (usize, Vec<Option<String>>);

/// The records of `text`.
pub fn records(text: &str) -> Result<Vec<Record>, ParseError> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while chars.peek().is_some() {
        let start = line;
        let mut fields = Vec::new();
        loop {
            let mut raw = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        None => return Err(ParseError { line: start, rule: "a quoted field is not closed".into() }),
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            raw.push('"');
                        }
                        Some('"') => break,
                        Some(c) => {
                            line += usize::from(c == '\n');
                            raw.push(c);
                        }
                    }
                }
                if !matches!(chars.peek(), None | Some(',') | Some('\n')) {
                    return Err(ParseError { line, rule: "text after a quoted field's closing quote".into() });
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c == ',' || c == '\n' {
                        break;
                    }
                    if c == '"' {
                        return Err(ParseError { line, rule: "a quote inside a field that is not quoted".into() });
                    }
                    raw.push(c);
                    chars.next();
                }
            }
            fields.push(decode(raw));
            match chars.next() {
                Some(',') => continue,
                Some('\n') => {
                    line += 1;
                    break;
                }
                _ => break,
            }
        }
        out.push((start, fields));
    }
    Ok(out)
}

fn decode(raw: String) -> Option<String> {
    if raw.is_empty() {
        None
    } else if let Some(value) = raw.strip_prefix('\'') {
        Some(value.to_owned())
    } else {
        Some(raw)
    }
}

/// What a check of an export found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExportReport {
    /// Rows read.
    pub rows: u64,
    /// The first row's and the last row's ids.
    pub first: Option<i64>,
    pub last: Option<i64>,
    /// The last row's hash (hex): compare it with a head recorded elsewhere.
    pub head: Option<String>,
    /// Whether every signature was checked (a key was given).
    pub signatures_checked: bool,
    pub intact: bool,
    /// The first row that fails, and why (`gap`, `content`, `link`, `signature`, `unsigned`).
    pub first_broken: Option<i64>,
    pub problem: Option<&'static str>,
}

/// Checks an export: the header, then each row in order from the first (row 1, or the
/// row after the first row's `prev_hash`: an export of a period checks from there; an
/// export filtered by entity, actor or action has gaps and fails as such). `signatures`:
/// check each row's signature with the process's key ([`super::key`]).
pub fn verify_export(text: &str, signatures: bool) -> anyhow::Result<ExportReport> {
    let records = records(text)?;
    let mut records = records.into_iter();
    let header =
        records.next().map(|(_, fields)| fields.into_iter().map(Option::unwrap_or_default).collect::<Vec<_>>());
    anyhow::ensure!(
        header.as_ref().is_some_and(|h| h.join(",") == HEADER),
        "line 1: the header must be {HEADER} (an export of GET /api/v1/audit.csv)"
    );
    let mut report = ExportReport {
        rows: 0,
        first: None,
        last: None,
        head: None,
        signatures_checked: signatures,
        intact: true,
        first_broken: None,
        problem: None,
    };
    let mut walk: Option<Walk> = None;
    for (line, fields) in records {
        let (row, mac) = stored_row(line, fields)?;
        let walk = walk.get_or_insert_with(|| match &row.prev_hash {
            Some(prev) => Walk::after(row.id.saturating_sub(1), prev.clone(), signatures),
            None => Walk::from_first(signatures),
        });
        report.rows += 1;
        report.first.get_or_insert(row.id);
        report.last = Some(row.id);
        report.head = Some(hex(&row.hash));
        if let Err(problem) = walk.step(&row, mac.as_deref()) {
            report.intact = false;
            report.first_broken = Some(row.id);
            report.problem = Some(Problem::as_str(problem));
            break;
        }
    }
    Ok(report)
}

/// The report for people.
pub fn render(report: &ExportReport) -> String {
    let range = match (report.first, report.last) {
        (Some(first), Some(last)) => format!("rows {first} to {last}"),
        _ => "no rows".to_owned(),
    };
    let signatures = if report.signatures_checked {
        "hashes, links and signatures checked"
    } else {
        "hashes and links checked; signatures not (set TESSERA_AUDIT_KEY to check them)"
    };
    let verdict = match (report.first_broken, report.problem) {
        (Some(id), Some(problem)) => format!("broken at row {id}: {problem}"),
        _ => format!("intact; head {}", report.head.as_deref().unwrap_or("(none)")),
    };
    format!("{} {range} read; {signatures}\n{verdict}\n", report.rows)
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
        let text = format!("{}\n{}\n", line.join(","), line.join(","));
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
    }

    fn export(rows: &[StoredRow]) -> String {
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
                None,
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
        let report = verify_export(&export(&rows), false).unwrap();
        assert!(report.intact, "{report:?}");
        assert_eq!((report.rows, report.first, report.last), (3, Some(1), Some(3)));
        assert_eq!(report.head, Some(hex(&rows[2].hash)));

        // An empty reason read as NULL would change the hash: it must not.
        let mut nulled = rows.clone();
        nulled[1].reason = None;
        let report = verify_export(&export(&nulled), false).unwrap();
        assert_eq!((report.first_broken, report.problem), (Some(2), Some("content")));

        // A period's export (from row 2) checks from its first row's prev_hash.
        assert!(verify_export(&export(&rows[1..]), false).unwrap().intact);
        // A row left out is a gap.
        let gapped = [rows[0].clone(), rows[2].clone()];
        let report = verify_export(&export(&gapped), false).unwrap();
        assert_eq!((report.first_broken, report.problem), (Some(3), Some("gap")));
    }

    #[test]
    fn a_file_that_is_not_an_export_is_refused_by_line() {
        assert!(verify_export("id,at\n1,x\n", false).unwrap_err().to_string().contains("line 1: the header must be"));
        let bad_id = format!("{HEADER}\nx,2026-12-07T10:00:00Z,a,api,x,e,,,,,,00,\n");
        assert!(verify_export(&bad_id, false).unwrap_err().to_string().contains("line 2: id must be a whole number"));
        let short = format!("{HEADER}\n1,2\n");
        assert!(verify_export(&short, false).unwrap_err().to_string().contains("line 2: 2 fields, the header has 13"));
    }
}
