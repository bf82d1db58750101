//! The audit trail: every change audited in its own transaction, append-only, hash-chained,
//! verified and exported over HTTP, against a running server with its own database.

use integration::{spawn_app, TestApp};
use serde_json::{json, Value};
use server::audit::store::Source;
use server::error::ChangeError;
use server::pools::{apply_change, Change};
use sqlx::Connection;

async fn count(app: &TestApp, table: &str) -> i64 {
    sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(&app.state.db).await.unwrap()
}

/// The demo pool's current body with new weights: a valid next snapshot.
async fn reweighted(app: &TestApp) -> Value {
    let mut body: Value =
        sqlx::query_scalar("select body from snapshot where entity = 'pool:cn-pay' order by version desc limit 1")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    body["weights"] = json!([
        {"member": "ALIPAY_A", "weight": 40},
        {"member": "WECHAT_B", "weight": 35},
        {"member": "UNION_C", "weight": 25}
    ]);
    body
}

fn change<'a>(entity: &'a str, body: &'a Value, reason: Option<&'a str>, expected: Option<i64>) -> Change<'a> {
    Change {
        entity,
        action: "pool.weights",
        actor: "alice",
        source: Source::Api,
        reason,
        request_id: Some("req-1"),
        body,
        expected_version: expected,
    }
}

#[tokio::test]
async fn each_change_writes_its_snapshot_audit_row_and_outbox_row_and_the_chain_verifies() {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    let body = reweighted(&app).await;
    let applied = apply_change(&app.state.db, &change("pool:cn-pay", &body, Some("gray 5%"), Some(1))).await.unwrap();

    assert_eq!(applied.version, 2);
    assert_eq!(applied.audit.before.as_ref().unwrap()["timezone"], "Asia/Shanghai");
    assert_eq!(applied.audit.after.as_ref(), Some(&body));
    assert_eq!(
        (count(&app, "audit").await, count(&app, "outbox").await),
        (23, 6),
        "the seed wrote 22 audit rows and 5 outbox rows"
    );

    let (status, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(status, 200);
    assert_eq!((&report["intact"], &report["rows"], &report["first_broken"]), (&json!(true), &json!(23), &Value::Null));
    assert_eq!(
        (report["head_id"].as_i64(), report["head_hash"].as_str()),
        (Some(applied.audit.id), Some(applied.audit.hash.as_str()))
    );

    // Filters and the cursor: newest first, one per page.
    let (_, page) = app.get_json("/api/v1/audit?entity=pool:cn-pay&limit=1").await;
    assert_eq!(page["rows"][0]["action"], "pool.weights");
    assert_eq!(page["rows"][0]["reason"], "gray 5%");
    let next = page["next"].as_i64().unwrap();
    let (_, page) = app.get_json(&format!("/api/v1/audit?entity=pool:cn-pay&limit=1&before_id={next}")).await;
    assert_eq!(page["rows"][0]["action"], "pool.put");
    assert_eq!(page["next"], Value::Null);
    let (_, by_actor) = app.get_json("/api/v1/audit?actor=demo-seed").await;
    assert_eq!(by_actor["rows"].as_array().unwrap().len(), 22);

    let csv = app.get("/api/v1/audit.csv").await.text().await.unwrap();
    assert_eq!(csv.lines().count(), 24, "{csv}");
    assert!(csv.starts_with("id,at,actor,source,action,entity,"), "{csv}");
}

#[tokio::test]
async fn a_stale_expected_version_is_a_conflict_and_a_failed_change_leaves_nothing() {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    let body = reweighted(&app).await;
    let before = (count(&app, "snapshot").await, count(&app, "audit").await, count(&app, "outbox").await);

    // A body that is not a valid snapshot of its kind never reaches the outbox.
    let invalid = json!({"x": 1});
    let refused = apply_change(&app.state.db, &change("pool:cn-pay", &invalid, None, Some(1))).await;
    assert!(matches!(refused, Err(ChangeError::Invalid { .. })), "{refused:?}");
    let not_an_object = json!([1, 2]);
    let refused = apply_change(&app.state.db, &change("pool:cn-pay", &not_an_object, None, Some(1))).await;
    assert!(matches!(refused, Err(ChangeError::Invalid { ref field, .. }) if field == "body"), "{refused:?}");

    let stale = apply_change(&app.state.db, &change("pool:cn-pay", &body, None, Some(7))).await;
    assert!(matches!(stale, Err(ChangeError::Conflict { current: 1, expected: 7, .. })), "{stale:?}");
    // A reason over the audit column's limit fails after the snapshot row was written.
    let too_long = "r".repeat(2001);
    let failed = apply_change(&app.state.db, &change("pool:cn-pay", &body, Some(&too_long), Some(1))).await;
    assert!(matches!(failed, Err(ChangeError::Db(_))), "{failed:?}");

    let after = (count(&app, "snapshot").await, count(&app, "audit").await, count(&app, "outbox").await);
    assert_eq!(before, after);
}

#[tokio::test]
async fn audit_rows_cannot_be_changed_and_a_tampered_row_is_reported_by_verify() {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    // The server's own role may not, by its privileges.
    let refused = sqlx::query("update audit set reason = 'nothing happened' where id = 2").execute(&app.state.db).await;
    assert!(refused.unwrap_err().to_string().contains("permission denied"));
    // The owner may, but the trigger refuses it.
    let url = secrecy::ExposeSecret::expose_secret(app.settings.migrate_database_url.as_ref().unwrap()).to_owned();
    let mut owner = sqlx::PgConnection::connect(&url).await.unwrap();
    let refused = sqlx::query("update audit set reason = 'nothing happened' where id = 2").execute(&mut owner).await;
    assert!(refused.unwrap_err().to_string().contains("append-only"));
    let refused = sqlx::query("delete from audit where id = 3").execute(&mut owner).await;
    assert!(refused.unwrap_err().to_string().contains("append-only"));

    // Someone with the owner's rights disables the guard and edits a row.
    sqlx::query("alter table audit disable trigger audit_append_only").execute(&mut owner).await.unwrap();
    sqlx::query("update audit set reason = 'nothing happened' where id = 2").execute(&mut owner).await.unwrap();
    sqlx::query("alter table audit enable trigger audit_append_only").execute(&mut owner).await.unwrap();

    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(
        (&report["intact"], &report["rows"], &report["first_broken"], &report["problem"]),
        (&json!(false), &json!(22), &json!(2), &json!("content"))
    );
}

#[tokio::test]
async fn bad_audit_queries_are_400_naming_the_parameter() {
    let app = spawn_app().await;
    let (status, body) = app.get_json("/api/v1/audit?limit=0").await;
    assert_eq!((status, body["field"].as_str()), (400, Some("limit")));
    let (status, body) = app.get_json("/api/v1/audit?colour=red").await;
    assert_eq!((status, body["field"].as_str()), (400, Some("colour")), "{body}");
    for (query, field) in [
        ("from=yesterday", "from"),
        ("limit=abc", "limit"),
        ("before_id=x", "before_id"),
        ("actor=a%00b", "actor"),
        ("entity=%00", "entity"),
        ("action=pool.%1Fweights", "action"),
    ] {
        for path in ["/api/v1/audit", "/api/v1/audit.csv"] {
            let (status, body) = app.get_json(&format!("{path}?{query}")).await;
            assert_eq!((status, body["field"].as_str()), (400, Some(field)), "{path}?{query}: {body}");
        }
    }
    let (status, body) = app.get_json("/api/v1/audit?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z").await;
    assert_eq!((status, body["field"].as_str()), (400, Some("to")));
}

/// `tessera audit verify --csv FILE [ARGS]` on an export, with or without the audit key:
/// exit status and standard output and error.
fn verify_csv(file: &std::path::Path, key: Option<&str>, args: &[&str]) -> (bool, String) {
    // The server's binary beside this test's (scripts/build -- --tests builds both).
    let bin = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("tessera");
    assert!(bin.exists(), "no {}: build it (cargo build --workspace --bin tessera --tests)", bin.display());
    let mut command = std::process::Command::new(bin);
    command.args(["audit", "verify", "--csv"]).arg(file).args(args).env_remove("TESSERA_AUDIT_KEY");
    if let Some(key) = key {
        command.env("TESSERA_AUDIT_KEY", key);
    }
    let output = command.output().expect("tessera runs");
    (
        output.status.success(),
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
    )
}

#[tokio::test]
async fn an_exported_trail_is_verified_away_from_the_database_and_a_rewritten_export_is_not() {
    // Arrange: the demo's rows (signed), exported; then rows whose text a CSV could blur
    // (an empty reason beside a NULL one, formulas, quotes, a ';', a line break), appended
    // by the server's role around the server, so not signed, and exported again
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    let signed: i64 = count(&app, "audit").await;
    let head: String = sqlx::query_scalar("select encode(hash, 'hex') from audit order by id desc limit 1")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("tessera-csv-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (first, file) = (app.get("/api/v1/audit.csv").await.text().await.unwrap(), dir.join("audit.csv"));
    sqlx::query(
        "insert into audit (actor, source, action, entity, reason, request_id) values
           ('=bulk', 'system', 'test.csv', 'test:1', '', null),
           ('bulk', 'system', 'test.csv', 'test:2', null, ''),
           ('bulk', 'system', 'test.csv', 'test:3', '''=x; \"y\"' || chr(10) || 'z', '-1')",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let second = app.get("/api/v1/audit.csv").await.text().await.unwrap();
    let key = Some(integration::TEST_AUDIT_KEY);
    let check = |text: &str, key: Option<&str>, args: &[&str]| {
        std::fs::write(&file, text).unwrap();
        verify_csv(&file, key, args)
    };

    // Act + Assert: with the key, hashes, links and signatures: intact, with the head
    let (ok, out) = check(&first, key, &["--json"]);
    assert!(ok, "{out}");
    let report: Value = serde_json::from_str(out.lines().find(|l| l.starts_with('{')).unwrap_or(&out)).unwrap();
    assert_eq!((&report["intact"], &report["rows"], &report["head"]), (&json!(true), &json!(signed), &json!(head)));
    let (ok, out) = check(&first, key, &["--head", &format!("{signed}:{head}")]);
    assert!(ok && out.contains(&format!("{signed} rows 1 to {signed} passed")), "{out}");
    // Without the key a signed trail is not called intact (its hashes anyone can recompute)
    let (ok, out) = check(&first, None, &[]);
    assert!(!ok && out.contains("not verified: the rows are signed"), "{out}");
    // A wrong key finds no row signed by it; the last row cut off misses the head
    let (ok, out) = check(&first, Some(&"k".repeat(40)), &[]);
    assert!(!ok && out.contains("broken at row 1: signature"), "{out}");
    let cut: String = first.lines().take(signed as usize).map(|l| format!("{l}\n")).collect();
    let (ok, out) = check(&cut, key, &["--head", &format!("{signed}:{head}")]);
    assert!(!ok && out.contains(&format!("row {signed} is missing or differs")), "{out}");
    let (ok, out) = check(&first, key, &["--head", "12:zz"]);
    assert!(!ok && out.contains("--head: must be ID:HASH"), "{out}");
    // A reason rewritten in the file is caught
    let rewritten = first.replacen("demo data", "demo date", 1);
    assert_ne!(rewritten, first, "the demo's rows give the reason 'demo data'");
    let (ok, out) = check(&rewritten, key, &[]);
    assert!(!ok && out.contains(": content"), "{out}");
    // The appended rows read back exactly (their hashes hold) but carry no signature
    let (ok, out) = check(&second, key, &[]);
    assert!(!ok && out.contains(&format!("broken at row {}: unsigned", signed + 1)), "{out}");
    // Row signed+1 reads `…,"test:1",,,"'",…`: its empty reason made NULL is a changed row
    let nulled = second.replacen(r#""test:1",,,"'","#, r#""test:1",,,,"#, 1);
    assert_ne!(nulled, second, "{second}");
    let (ok, out) = check(&nulled, key, &[]);
    assert!(!ok && out.contains(&format!("broken at row {}: content", signed + 1)), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
