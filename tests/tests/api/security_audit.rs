//! The boundary, part two (issue 37): an audit trail the app cannot rewrite. The server
//! serves as a member of `tessera_server` (as every test app does), which may append to
//! the trail but not change it; each row is signed with a key kept outside the database,
//! so the schema's owner, who can rewrite rows and recompute their hashes, is still caught
//! by `verify`, which names the first rewritten row.

use integration::{spawn_app, TestApp};
use secrecy::ExposeSecret;
use serde_json::json;
use sqlx::Connection;

/// A connection as the schema's owner (the migrating role): all the rights on the trail.
async fn owner(app: &TestApp) -> sqlx::PgConnection {
    let url = app.settings.migrate_database_url.as_ref().expect("test apps migrate as the owner");
    sqlx::PgConnection::connect(url.expose_secret()).await.unwrap()
}

async fn seeded() -> TestApp {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    app
}

#[tokio::test]
async fn the_servers_role_may_append_to_the_trail_but_not_rewrite_it() {
    let app = seeded().await;
    for sql in [
        "update audit set reason = 'nothing happened' where id = 2",
        "delete from audit where id = 3",
        "truncate audit cascade",
        "update audit_mac set mac = mac where id = 2",
        "delete from audit_mac",
        "delete from audit_checkpoint",
        "update snapshot set body = body",
        "delete from config_history",
        "delete from change_review",
    ] {
        let refused = sqlx::query(sql).execute(&app.state.db).await.unwrap_err().to_string();
        assert!(refused.contains("permission denied"), "{sql}: {refused}");
    }
    for sql in [
        "alter table audit disable trigger audit_append_only",
        "alter table audit_mac disable trigger user",
        "drop trigger audit_chain on audit",
        "create or replace function refuse_change() returns trigger language plpgsql as $$ begin return new; end $$",
    ] {
        let refused = sqlx::query(sql).execute(&app.state.db).await.unwrap_err().to_string();
        assert!(refused.contains("must be owner") || refused.contains("permission denied"), "{sql}: {refused}");
    }
    // Every append-only table (a refuse_change trigger) is append-only for the role too,
    // including those a later migration adds.
    let rewritable: Vec<String> = sqlx::query_scalar(
        "select distinct c.relname::text from pg_trigger t join pg_class c on c.oid = t.tgrelid
           join pg_proc p on p.oid = t.tgfoid
          where p.proname = 'refuse_change' and c.relnamespace = 'public'::regnamespace
            and (has_table_privilege('tessera_server', c.oid, 'UPDATE') or has_table_privilege('tessera_server', c.oid, 'DELETE')
                 or has_table_privilege('tessera_server', c.oid, 'TRUNCATE') or has_table_privilege('tessera_server', c.oid, 'TRIGGER'))
          order by 1",
    )
    .fetch_all(&app.state.db)
    .await
    .unwrap();
    assert_eq!(rewritable, Vec::<String>::new(), "append-only tables the server's role may rewrite");
    assert!(!server::store::may_rewrite_audit(&app.state.db).await.unwrap());
    let (status, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(
        (status, &report["intact"], &report["keyed"], &report["rows"]),
        (200, &json!(true), &json!(true), &json!(22))
    );
}

#[tokio::test]
async fn a_rewrite_with_recomputed_hashes_is_named_by_verify_at_its_first_row() {
    let app = seeded().await;
    // An intact chain, verified: a signed checkpoint at its head.
    let (_, before) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(
        (&before["intact"], &before["checkpoint_id"], &before["checked_from"]),
        (&json!(true), &json!(null), &json!(1))
    );
    let (_, again) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((&again["checkpoint_id"], &again["checked_from"]), (&json!(22), &json!(23)), "{again}");

    // The owner rewrites row 5 and recomputes every hash from it on, as the database would
    // have: the hash chain alone is whole again.
    let mut owner = owner(&app).await;
    sqlx::raw_sql(&rewrite_from(5)).execute(&mut owner).await.unwrap();
    let hash_only: Option<i64> = sqlx::query_scalar(
        "select (select id from audit a where hash <> audit_row_hash(a)
                   or prev_hash is distinct from (select hash from audit p where p.id = a.id - 1) order by id limit 1)",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert_eq!(hash_only, None, "the hashes alone no longer show the rewrite");

    // The checkpoint no longer holds, so the whole chain is checked: the signature of row 5
    // is not the key's over its new hash.
    for path in ["/api/v1/audit/verify", "/api/v1/audit/verify?full=true"] {
        let (status, report) = app.get_json(path).await;
        assert_eq!(
            (status, &report["intact"], &report["first_broken"], &report["problem"], &report["checked_from"]),
            (200, &json!(false), &json!(5), &json!("signature"), &json!(1)),
            "{path}: {report}"
        );
    }
    // `tessera audit verify` prints the same report.
    let report = server::audit::store::verify_audit(&app.state.db, false).await.unwrap();
    let text = server::audit::store::render_report(&report);
    assert!(text.starts_with("BROKEN at row 5 (signature)"), "{text}");
}

#[tokio::test]
async fn rows_written_around_the_server_are_reported_unsigned_or_forged() {
    let app = seeded().await;
    // The server's role can insert (it must, to append): a row written with plain SQL, as
    // an injected statement would, carries no signature.
    sqlx::query(
        "insert into audit (actor, source, action, entity) values ('mallory', 'api', 'pool.weights', 'pool:cn-pay')",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((&report["first_broken"], &report["problem"]), (&json!(23), &json!("unsigned")), "{report}");

    // Nor can it sign one: a signature without the key is not the key's.
    let app = seeded().await;
    sqlx::raw_sql(
        "insert into audit (actor, source, action, entity) values ('mallory', 'api', 'pool.weights', 'pool:cn-pay');
         insert into audit_mac (id, mac) select max(id), sha256('a guess'::bytea) from audit;",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((&report["first_broken"], &report["problem"]), (&json!(23), &json!("signature")), "{report}");
}

fn unsign(from: i64) -> String {
    format!(
        "alter table audit_mac disable trigger user; delete from audit_mac where id >= {from};
         alter table audit_mac enable trigger user;"
    )
}

fn unhex(hex: &str) -> Vec<u8> {
    server::inputs::parse_hex(hex).expect("a hash as hex")
}

async fn head_hash(app: &TestApp, id: i64) -> String {
    sqlx::query_scalar("select encode(hash, 'hex') from audit where id = $1")
        .bind(id)
        .fetch_one(&app.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn history_before_the_key_is_signed_by_a_person_once_against_a_recorded_head() {
    use server::audit::store::{adopt_unsigned_history, unadopted_history};
    let app = seeded().await;
    let mut owner = owner(&app).await;
    // As if the trail had been written before the key was set: the server does not sign it
    // on its own (a restart after a rewrite would bless the rewrite), it says so.
    sqlx::raw_sql(&unsign(1)).execute(&mut owner).await.unwrap();
    assert!(unadopted_history(&app.state.db).await.unwrap());
    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((&report["first_broken"], &report["problem"]), (&json!(1), &json!("unsigned")));
    let head = head_hash(&app, 22).await;
    // The person names the head they recorded before the key was set: another hash there,
    // or a row past the history, is refused.
    let refused = adopt_unsigned_history(&app.state.db, (22, vec![7; 32])).await.unwrap_err().to_string();
    assert!(refused.contains(&format!("row 22's hash is {head}, not the")), "{refused}");
    let refused = adopt_unsigned_history(&app.state.db, (23, unhex(&head))).await.unwrap_err().to_string();
    assert!(refused.contains("the unsigned history ends at row 22"), "{refused}");
    assert!(unadopted_history(&app.state.db).await.unwrap(), "nothing signed by a refused adoption");

    let adoption = adopt_unsigned_history(&app.state.db, (22, unhex(&head))).await.unwrap();
    assert_eq!((adoption.signed, adoption.through_id, adoption.through_hash), (22, Some(22), Some(head.clone())));
    assert!(!unadopted_history(&app.state.db).await.unwrap());
    // The adoption is an audit row of its own, signed.
    let (_, page) = app.get_json("/api/v1/audit?action=audit.adopt").await;
    assert_eq!(
        page["rows"][0]["after"],
        json!({"signed": 22, "through_id": 22, "through_hash": head, "anchor_id": 22, "anchor_hash": head}),
        "{page}"
    );
    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((&report["intact"], &report["rows"]), (&json!(true), &json!(23)), "{report}");

    // Signatures removed from row 10 on: rows after a signed row are never signed.
    sqlx::raw_sql(&unsign(10)).execute(&mut owner).await.unwrap();
    assert_eq!(adopt_unsigned_history(&app.state.db, (22, unhex(&head))).await.unwrap().signed, 0);
    let (_, report) = app.get_json("/api/v1/audit/verify?full=true").await;
    assert_eq!((&report["first_broken"], &report["problem"]), (&json!(10), &json!("unsigned")), "{report}");

    // Every signature removed, a row rewritten with recomputed hashes: the checkpoint the
    // first verify signed shows the trail was signed, so it is not signed again.
    sqlx::raw_sql(&format!("{} {}", unsign(1), rewrite_from(5))).execute(&mut owner).await.unwrap();
    let head = head_hash(&app, 23).await;
    let refused = adopt_unsigned_history(&app.state.db, (23, unhex(&head))).await.unwrap_err().to_string();
    assert!(refused.contains("signatures were removed"), "{refused}");

    // A history whose hash chain is broken is not signed at all.
    let app = seeded().await;
    let mut owner = self::owner(&app).await;
    sqlx::raw_sql(&format!(
        "{} alter table audit disable trigger audit_append_only;
         update audit set reason = 'edited' where id = 4;
         alter table audit enable trigger audit_append_only;",
        unsign(1)
    ))
    .execute(&mut owner)
    .await
    .unwrap();
    let head = head_hash(&app, 22).await;
    let refused = adopt_unsigned_history(&app.state.db, (22, unhex(&head))).await.unwrap_err().to_string();
    assert!(refused.contains("broken at row 4 (content)"), "{refused}");
    let signed: i64 = sqlx::query_scalar("select count(*) from audit_mac").fetch_one(&app.state.db).await.unwrap();
    assert_eq!(signed, 0);
}

/// As the owner: rewrites row `from` and recomputes every hash from it on, as the database
/// would have (the hash chain alone is whole again).
fn rewrite_from(from: i64) -> String {
    format!(
        "alter table audit disable trigger audit_append_only;
         update audit set reason = 'nothing to see here' where id = {from};
         do $$ declare r record; prev bytea; begin
             select hash into prev from audit where id = {from} - 1;
             for r in select id from audit where id >= {from} order by id loop
                 update audit set prev_hash = prev where id = r.id;
                 update audit a set hash = audit_row_hash(a) where id = r.id returning hash into prev;
             end loop;
         end $$;
         alter table audit enable trigger audit_append_only;"
    )
}

#[tokio::test]
async fn adopt_cannot_sign_a_history_rewritten_below_the_first_signed_row() {
    use server::audit::store::adopt_unsigned_history;
    let app = seeded().await;
    let mut owner = owner(&app).await;
    let recorded = (10, unhex(&head_hash(&app, 10).await));
    // Rows 1..=10 unsigned (as if written before the key), 11.. signed by the server. The
    // owner rewrites row 5 and recomputes the hashes up to row 10, whose hash row 11 (signed)
    // links to: re-adopting must not bless the rewrite.
    sqlx::raw_sql(
        "alter table audit_mac disable trigger user; delete from audit_mac where id <= 10;
         alter table audit_mac enable trigger user;
         alter table audit disable trigger audit_append_only;
         update audit set reason = 'nothing to see here' where id = 5;
         do $$ declare r record; prev bytea; begin
             select hash into prev from audit where id = 4;
             for r in select id from audit where id between 5 and 10 order by id loop
                 update audit set prev_hash = prev where id = r.id;
                 update audit a set hash = audit_row_hash(a) where id = r.id returning hash into prev;
             end loop;
         end $$;
         alter table audit enable trigger audit_append_only;",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let refused = adopt_unsigned_history(&app.state.db, recorded.clone()).await.unwrap_err().to_string();
    assert!(refused.contains("row 10's hash is") && refused.contains("not the"), "{refused}");
    // Nor when row 11's link is rewritten to match: its signature no longer holds.
    sqlx::raw_sql(
        "alter table audit disable trigger audit_append_only;
         update audit set prev_hash = (select hash from audit where id = 10) where id = 11;
         alter table audit enable trigger audit_append_only;",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let refused = adopt_unsigned_history(&app.state.db, recorded).await.unwrap_err().to_string();
    assert!(refused.contains("row 11, the first signed one"), "{refused}");
    let signed: i64 =
        sqlx::query_scalar("select count(*) from audit_mac where id <= 10").fetch_one(&app.state.db).await.unwrap();
    assert_eq!(signed, 0);

    // Every signature removed, the rows rewritten with recomputed hashes, then a row the
    // server signs on top of the forged head: that row's link vouches for the forgery, so
    // only the head recorded outside the database stops the adoption.
    let app = seeded().await;
    let mut owner = self::owner(&app).await;
    let recorded = (22, unhex(&head_hash(&app, 22).await));
    sqlx::raw_sql(&format!("{} {}", unsign(1), rewrite_from(5))).execute(&mut owner).await.unwrap();
    note(&app, "written on the forged head").await.unwrap();
    let refused = adopt_unsigned_history(&app.state.db, recorded).await.unwrap_err().to_string();
    assert!(refused.contains("row 22's hash is") && refused.contains("not the"), "{refused}");
    let (_, report) = app.get_json("/api/v1/audit/verify?full=true").await;
    assert_eq!((&report["first_broken"], &report["problem"]), (&json!(1), &json!("unsigned")), "{report}");
}

async fn note(app: &TestApp, reason: &str) -> Result<server::audit::store::AuditRow, sqlx::Error> {
    let mut tx = app.state.db.begin().await.unwrap();
    let after = json!({"b": [1, 2.5, {"é": "✓\u{1}"}], "a": null});
    let written = server::audit::store::insert_audit(
        &mut tx,
        &server::audit::store::NewAudit {
            actor: "alice \"quoted\"\t\\",
            source: server::audit::store::Source::Api,
            action: "test.note",
            entity: "test:one",
            before: None,
            after: Some(&after),
            reason: Some(reason),
            request_id: Some("req-1"),
        },
    )
    .await;
    if written.is_ok() {
        tx.commit().await.unwrap();
    }
    written
}

#[tokio::test]
async fn the_server_signs_only_the_row_it_sent_at_the_head() {
    let app = seeded().await;
    // Escapes and unicode in every field: the server's hash is the database's.
    let written = note(&app, "line one\nline two \u{1f}").await.unwrap();
    assert_eq!(written.id, 23);
    let mut owner = owner(&app).await;
    // The owner's own insert trigger (after the chain's) swaps the content and recomputes
    // the hash: the server would sign the forgery if it signed what came back.
    sqlx::raw_sql(
        "create function forge() returns trigger language plpgsql as $$ begin
             new.reason := 'approved by nobody'; new.hash := audit_row_hash(new); return new; end $$;
         create trigger zz_forge before insert on audit for each row execute function forge();",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let refused = note(&app, "a note").await.unwrap_err().to_string();
    assert!(refused.contains("not written as sent (content)"), "{refused}");
    // Or it moves the row onto an old one (removed, with its signature): refused too.
    sqlx::raw_sql(
        "create or replace function forge() returns trigger language plpgsql security definer as $$ begin
             perform set_config('session_replication_role', 'replica', true);
             delete from audit_mac where id = 5; delete from audit where id = 5;
             perform set_config('session_replication_role', 'origin', true);
             new.id := 5; new.prev_hash := (select hash from audit where id = 4);
             new.hash := audit_row_hash(new); return new; end $$;",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let refused = note(&app, "a note").await.unwrap_err().to_string();
    assert!(refused.contains("not written as sent (position)"), "{refused}");
    sqlx::raw_sql("drop trigger zz_forge on audit").execute(&mut owner).await.unwrap();
    let (_, report) = app.get_json("/api/v1/audit/verify?full=true").await;
    assert_eq!((&report["intact"], &report["rows"]), (&json!(true), &json!(23)), "{report}");
}

#[tokio::test]
async fn a_server_without_the_key_does_not_start_on_a_signed_trail() {
    let app = seeded().await;
    let mut settings = app.settings.clone();
    settings.audit_key = None;
    let refused = server::startup::build_state(&settings).await.err().expect("refused").to_string();
    assert!(refused.contains("TESSERA_AUDIT_KEY is not set, but the audit trail is signed"), "{refused}");
}

#[tokio::test]
async fn an_owner_who_replaces_the_hash_function_is_caught_by_the_hashes_the_server_computes() {
    let app = seeded().await;
    let mut owner = owner(&app).await;
    // The owner makes the database's own check vouch for any content, then edits row 7:
    // the server recomputes every hash itself, so row 7 no longer matches its hash.
    sqlx::raw_sql(
        "create or replace function audit_row_hash(a audit) returns bytea language sql immutable as $$ select a.hash $$;
         alter table audit disable trigger audit_append_only;
         update audit set actor = 'nobody' where id = 7;
         alter table audit enable trigger audit_append_only;",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let (_, report) = app.get_json("/api/v1/audit/verify?full=true").await;
    assert_eq!(
        (&report["intact"], &report["first_broken"], &report["problem"]),
        (&json!(false), &json!(7), &json!("content")),
        "{report}"
    );
}

#[tokio::test]
async fn a_forged_checkpoint_is_passed_over_for_the_newest_one_that_holds() {
    let app = seeded().await;
    let (_, first) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(first["intact"], json!(true));
    // The server's role may insert checkpoints (it records them): a forged one, newer and
    // unsigned by the key, neither becomes the start nor forces every row to be checked.
    sqlx::raw_sql(
        "insert into audit (actor, source, action, entity) values ('mallory', 'api', 'test.note', 'test:x');
         insert into audit_checkpoint (id, hash, mac) select id, hash, sha256('forged'::bytea) from audit where id = 23;",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(
        (&report["checkpoint_id"], &report["checked_from"], &report["first_broken"], &report["problem"]),
        (&json!(22), &json!(23), &json!(23), &json!("unsigned")),
        "{report}"
    );
    assert_eq!(report["forged_checkpoints"], json!(1), "{report}");

    // A forged checkpoint beside the real one at the same row neither keeps the real one
    // from being recorded nor passes unnoticed: the trail is reported as tampered with.
    let app = seeded().await;
    sqlx::query("insert into audit_checkpoint (id, hash, mac) select id, hash, sha256('forged'::bytea) from audit where id = 22")
        .execute(&app.state.db)
        .await
        .unwrap();
    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((&report["intact"], &report["checkpoint_id"]), (&json!(false), &json!(null)), "{report}");
    let (_, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(
        (
            &report["intact"],
            &report["checkpoint_id"],
            &report["first_broken"],
            &report["problem"],
            &report["forged_checkpoints"]
        ),
        (&json!(false), &json!(22), &json!(22), &json!("checkpoint"), &json!(1)),
        "{report}"
    );
}

#[tokio::test]
async fn verify_is_incremental_from_a_checkpoint_and_says_so() {
    let app = seeded().await;
    let (_, first) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((&first["intact"], &first["checked_from"]), (&json!(true), &json!(1)));
    let mut tx = app.state.db.begin().await.unwrap();
    server::audit::store::insert_audit(
        &mut tx,
        &server::audit::store::NewAudit {
            actor: "alice",
            source: server::audit::store::Source::Api,
            action: "test.note",
            entity: "test:one",
            before: None,
            after: None,
            reason: Some("after the checkpoint"),
            request_id: None,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let (_, next) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(
        (&next["intact"], &next["checkpoint_id"], &next["checked_from"], &next["rows"]),
        (&json!(true), &json!(22), &json!(23), &json!(23)),
        "{next}"
    );
    let (_, full) = app.get_json("/api/v1/audit/verify?full=true").await;
    assert_eq!((&full["intact"], &full["checked_from"]), (&json!(true), &json!(1)));
    let (status, bad) = app.get_json("/api/v1/audit/verify?full=yes").await;
    assert_eq!((status, bad["field"].as_str()), (400, Some("full")), "{bad}");
}

#[tokio::test]
async fn audit_csv_streams_every_row_across_pages_in_order() {
    let app = seeded().await;
    // 1,500 more rows: the export crosses its page of 1,000.
    sqlx::query(
        "insert into audit (actor, source, action, entity)
         select 'bulk', 'system', 'test.bulk', 'test:' || g from generate_series(1, 1500) g",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let response = app.get("/api/v1/audit.csv").await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let ids: Vec<i64> =
        text.lines().skip(1).map(|l| l.split(',').next().unwrap().trim_matches('"').parse().unwrap()).collect();
    assert_eq!(ids, (1..=1522).collect::<Vec<_>>());
    let filtered = app.get("/api/v1/audit.csv?actor=bulk").await.text().await.unwrap();
    assert_eq!(filtered.lines().count(), 1501, "the header and the bulk rows");
}

#[tokio::test]
async fn a_check_of_the_chain_requested_while_one_runs_is_429_not_queued() {
    let app = seeded().await;
    let running = app.state.audit_verify.lock().await;
    let response = app.get("/api/v1/audit/verify?full=true").await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("5"));
    drop(running);
    let (status, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((status, &report["intact"]), (200, &json!(true)), "{report}");
}

#[tokio::test]
async fn a_time_no_clock_can_hold_is_reported_as_a_changed_row_and_lists_still_answer() {
    let app = seeded().await;
    // The owner moves row 3 to `infinity` and row 4 past year 262143 (neither decodes into
    // a time), recomputing their hashes as the database would.
    let mut owner = owner(&app).await;
    sqlx::raw_sql(
        "alter table audit disable trigger audit_append_only;
         update audit set at = 'infinity' where id = 3;
         update audit set at = '294000-01-01Z' where id = 4;
         update audit a set hash = audit_row_hash(a) where id in (3, 4);
         alter table audit enable trigger audit_append_only;",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    for path in ["/api/v1/audit/verify", "/api/v1/audit/verify?full=true"] {
        let (status, report) = app.get_json(path).await;
        assert_eq!(
            (status, &report["intact"], &report["first_broken"], &report["problem"]),
            (200, &json!(false), &json!(3), &json!("content")),
            "{path}: {report}"
        );
    }
    let (status, rows) = app.get_json("/api/v1/audit").await;
    assert_eq!(status, 200, "{rows}");
    let csv = app.get("/api/v1/audit.csv").await;
    assert_eq!(csv.status().as_u16(), 200);
    assert!(csv.text().await.unwrap().lines().count() > 4);
}

#[tokio::test]
async fn a_flood_of_forged_checkpoints_does_not_force_a_full_walk() {
    let app = seeded().await;
    let (_, first) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(first["intact"], json!(true));
    // A row written around the server (unsigned), then 2,500 forged checkpoints above the
    // real one (more than two pages of them): 2,000 at the new row, 500 beside the real one,
    // inserted with the server's own rights.
    sqlx::raw_sql(
        "insert into audit (actor, source, action, entity) values ('mallory', 'api', 'test.note', 'test:x');
         insert into audit_checkpoint (id, hash, mac)
           select case when n <= 2000 then 23 else 22 end, sha256(n::text::bytea), sha256(('forged' || n)::bytea)
             from generate_series(1, 2500) n;",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let (status, report) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!(
        (
            status,
            &report["checkpoint_id"],
            &report["checked_from"],
            &report["forged_checkpoints"],
            &report["first_broken"]
        ),
        (200, &json!(22), &json!(23), &json!(2500), &json!(23)),
        "{report}"
    );
}
