//! The docs' examples, run as written against a server of their own: the README's "first
//! five minutes" (sign in, a data-plane token, a draw, a reserve and its settle, a change
//! request approved by a second person, the audit chain checked) in bash with curl and jq,
//! as a reader would paste it. An example that stops working fails here.

use std::collections::HashMap;
use std::time::Duration;

use integration::{spawn_app_with, workspace_root, TestApp};

/// The fenced block that follows `<!-- tested: NAME -->` in `file`.
fn tested_block(file: &str, name: &str) -> String {
    let text = std::fs::read_to_string(workspace_root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let marker = format!("<!-- tested: {name} -->");
    let at = text.find(&marker).unwrap_or_else(|| panic!("{file} has no {marker}"));
    let rest = &text[at + marker.len()..];
    let open = rest.find("```sh\n").unwrap_or_else(|| panic!("{file}: no ```sh block after {marker}")) + 6;
    let close = rest[open..].find("\n```").unwrap_or_else(|| panic!("{file}: the block after {marker} is not closed"));
    rest[open..open + close].to_owned()
}

/// A server with access control on and the demo data published; the demo users' passwords.
async fn demo_app() -> (TestApp, HashMap<String, String>) {
    let app = spawn_app_with(|s| s.auth.open = false).await;
    let report = server::seed::demo_seed(&app.state.db).await.unwrap();
    let delivered = server::publish::drain_outbox(&app.state).await.unwrap();
    assert!(delivered.failed.is_empty(), "{delivered:?}");
    (app, report.users.into_iter().map(|(name, _, password)| (name, password)).collect())
}

/// Runs `script` in bash (`-euo pipefail`) with `env`, at most 60 s: its exit status,
/// standard output and standard error.
async fn bash(script: &str, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let child = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bash runs");
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let output = match tokio::time::timeout(Duration::from_secs(60), waited).await {
        Ok(output) => output.expect("the wait").expect("the example's output"),
        Err(_) => {
            let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the example did not finish within 60 s");
        }
    };
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_readmes_first_five_minutes_run_as_written() {
    // Arrange
    assert!(
        std::process::Command::new("jq").arg("--version").output().is_ok_and(|o| o.status.success()),
        "the example needs jq (Debian: apt install jq; scripts/test installs it)"
    );
    let (app, passwords) = demo_app().await;
    let block = tested_block("README.md", "first-five-minutes");

    // Act: twice, as a reader may (the second run must work on what the first left)
    let env = [
        ("URL", app.address.as_str()),
        ("ADMIN_PASSWORD", passwords["demo-admin"].as_str()),
        ("PM_PASSWORD", passwords["demo-pm"].as_str()),
    ];
    let first = bash(&block, &env).await;
    let second = bash(&block, &env).await;

    // Assert: both succeed; a draw, a settle, two changes applied, the chain intact
    for (status, stdout, stderr) in [&first, &second] {
        assert_eq!(*status, Some(0), "the example failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains(r#""pool":"cn-pay""#), "no draw: {stdout}");
        assert!(stdout.contains(r#""result":"settled""#), "no settle: {stdout}");
        assert!(stdout.contains(r#"{"state":"approved"}"#), "not approved: {stdout}");
        assert!(stdout.contains(r#""state":"applied""#), "not applied: {stdout}");
        assert!(stdout.contains(r#"{"intact":true}"#), "{stdout}");
    }
    let alipay: i64 =
        sqlx::query_scalar("select weight from pool_member where pool = 'cn-pay' and channel = 'ALIPAY_A'")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert_eq!(alipay, 45, "ALIPAY_A's weight went 45 -> 40 -> 45");
    eprintln!("{}", first.1);
    let applied: i64 = sqlx::query_scalar("select count(*) from change_request where state = 'applied'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(applied, 2, "each run applied its change");
}
