//! The docs' examples, run as written against a server of their own: the README's "first
//! five minutes" (sign in, a data-plane token, a draw, a reserve and its settle, a change
//! request approved by a second person, the audit chain checked) and the tutorial's two
//! days (docs/tutorial.md), in bash with curl and jq, as a reader would paste them; and
//! every relative link of the docs, to a file and a heading that exist. An example that
//! stops working, or a link that leads nowhere, fails here.

use std::collections::HashMap;
use std::time::Duration;

use integration::{spawn_app_with, workspace_root, TestApp};

/// The fenced blocks that follow each `<!-- tested: NAME -->` in `file`, in order, as one
/// script (a reader pastes them one after the other into one shell).
fn tested_block(file: &str, name: &str) -> String {
    let text = std::fs::read_to_string(workspace_root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let marker = format!("<!-- tested: {name} -->\n```sh\n");
    let blocks: Vec<&str> = text
        .split(&marker)
        .skip(1)
        .map(|rest| {
            let close = rest.find("\n```").unwrap_or_else(|| panic!("{file}: a block after {marker} is not closed"));
            &rest[..close]
        })
        .collect();
    assert!(!blocks.is_empty(), "{file} has no ```sh block right after <!-- tested: {name} -->");
    blocks.join("\n")
}

/// A server with access control on and the demo data published; the demo users' passwords.
async fn demo_app() -> (TestApp, HashMap<String, String>) {
    let app = spawn_app_with(|s| s.auth.open = false).await;
    assert!(
        std::process::Command::new("jq").arg("--version").output().is_ok_and(|o| o.status.success()),
        "the examples need jq (Debian: apt install jq; scripts/test installs it)"
    );
    let report = integration::seed_demo(&app).await;
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

/// Runs the tutorial's part `name` twice against a demo server whose scheduled jobs run (the
/// tutorial waits for the health evaluation and the publisher, as a reader's server does),
/// with each demo user's password as `<ROLE>_PASSWORD`; answers the first run's output.
async fn run_tutorial(name: &str) -> String {
    let (app, passwords) = demo_app().await;
    let scheduler = server::jobs::Scheduler::start(app.state.clone()).await.expect("the jobs start");
    let script = tested_block("docs/tutorial.md", name);
    let mut env: Vec<(String, String)> = vec![("URL".into(), app.address.clone())];
    for (user, password) in &passwords {
        let role = user.strip_prefix("demo-").unwrap_or(user).to_uppercase();
        env.push((format!("{role}_PASSWORD"), password.clone()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let first = bash(&script, &env).await;
    let second = bash(&script, &env).await;
    scheduler.shutdown().await;
    for (run, (status, stdout, stderr)) in [("first", &first), ("second", &second)] {
        assert_eq!(*status, Some(0), "the {run} run of {name} failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains(&format!("{name}: done")), "the {run} run of {name} did not finish: {stdout}");
    }
    first.1
}

#[tokio::test]
async fn the_tutorials_payments_day_runs_as_written() {
    let output = run_tutorial("tutorial-payments").await;
    eprintln!("{output}");
}

#[tokio::test]
async fn the_tutorials_llm_day_runs_as_written() {
    let output = run_tutorial("tutorial-llm").await;
    eprintln!("{output}");
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The targets of the Markdown links `[text](target)` in `text`.
fn link_targets(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.find(')').map(|end| &rest[..end]))
        .filter(|target| !target.is_empty() && !target.contains(char::is_whitespace))
        .map(str::to_owned)
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// The markdown a reader is sent to: README, ARCHITECTURE, SECURITY, ops/README, docs/.
fn markdown_files() -> Vec<std::path::PathBuf> {
    let root = workspace_root();
    let mut files: Vec<std::path::PathBuf> =
        ["README.md", "ARCHITECTURE.md", "SECURITY.md", "ops/README.md"].iter().map(|f| root.join(f)).collect();
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("an entry of docs/").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

/// The texts between backquotes, each trimmed of the punctuation a sentence adds (code
/// blocks' fences are left out: their backquotes come in threes).
fn backquoted(text: &str) -> Vec<String> {
    let prose = text.replace("```", "");
    assert!(prose.matches('`').count().is_multiple_of(2), "an odd number of backquotes: a quote is not closed");
    prose.split('`').skip(1).step_by(2).map(|s| s.trim_end_matches([',', '.', ';', ':']).to_owned()).collect()
}

/// The folders a clone does not have (`/target`, `/.tools`, `/data`: what `.gitignore`
/// names at the root): what a path into them names is made by a run, not kept.
fn ignored_folders(root: &std::path::Path) -> Vec<String> {
    let ignore = std::fs::read_to_string(root.join(".gitignore")).unwrap_or_default();
    ignore.lines().filter_map(|l| l.strip_prefix('/')).map(|l| l.trim_end_matches('/').to_owned()).collect()
}

/// Whether `name` (a file path from the repository's root, or a Rust path such as
/// `server::access::requirement`) names something that exists; `None`: not a path this
/// check reads (a URL, a pattern, a path relative to something else).
fn names_what_exists(root: &std::path::Path, name: &str) -> Option<bool> {
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    if let Some((krate, rest)) = name.split_once("::") {
        if !["server", "client", "engine", "api", "app"].contains(&krate)
            || !rest.split("::").all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            return None;
        }
        // Down the module files as far as they go; then the next name must be defined there.
        let mut dir = root.join(krate).join("src");
        let mut file = dir.join("lib.rs");
        for segment in rest.split("::") {
            let (as_file, as_dir) = (dir.join(format!("{segment}.rs")), dir.join(segment).join("mod.rs"));
            if as_file.is_file() || as_dir.is_file() {
                file = if as_file.is_file() { as_file } else { as_dir };
                dir = dir.join(segment);
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let word =
                |line: &str| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|w| w == segment);
            let kinds = ["fn ", "struct ", "enum ", "const ", "type ", "trait ", "mod ", "static ", "macro_rules! "];
            let defined = text.lines().any(|l| {
                let l = l.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                let l = l.trim_start_matches("async ");
                (kinds.iter().any(|k| l.starts_with(k)) || l.starts_with("use ")) && word(l)
            });
            return Some(defined);
        }
        return Some(true);
    }
    // What a reader makes (`./tessera.toml`) or a run writes (`target/…`, `data/…`) is not in a clone.
    let first = name.split('/').next().unwrap_or_default();
    let made = [".", ""].contains(&first) || ignored_folders(root).iter().any(|f| f == first);
    if !name.contains('/') || !plain(name) || made || !root.join(first).exists() {
        return None;
    }
    Some(root.join(name.trim_end_matches('/')).exists())
}

#[test]
fn every_path_the_docs_and_scripts_name_exists() {
    let root = workspace_root();
    let mut missing = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for name in backquoted(&text) {
            match names_what_exists(&root, &name) {
                Some(true) => checked += 1,
                Some(false) => missing.push(format!("{}: `{name}`", file.display())),
                None => {}
            }
        }
    }
    // The scripts' comments name modules too (`server::access::requirement`).
    for script in ["scripts/build", "scripts/conformance", "scripts/lib.sh", "scripts/run", "scripts/test", ".ci/run"] {
        let text = std::fs::read_to_string(root.join(script)).unwrap_or_else(|e| panic!("{script}: {e}"));
        for word in text.split(|c: char| c.is_whitespace() || "()`'\",;".contains(c)) {
            if word.contains("::") {
                match names_what_exists(&root, word.trim_end_matches('.')) {
                    Some(true) => checked += 1,
                    Some(false) => missing.push(format!("{script}: {word}")),
                    None => {}
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} paths checked: is the pattern right?");
    assert!(missing.is_empty(), "named but missing:\n{}", missing.join("\n"));
    // The check sees what it checks.
    assert_eq!(names_what_exists(&root, "server::db"), Some(false));
    assert_eq!(names_what_exists(&root, "server/src/db.rs"), Some(false));
    assert_eq!(names_what_exists(&root, "server::access::requirement"), Some(true));
    assert_eq!(names_what_exists(&root, "/api/v1/pools"), None);
}

#[test]
fn every_relative_link_in_the_docs_leads_to_a_file_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &markdown_files() {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, heading) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() { file.clone() } else { file.parent().expect("a folder").join(path) };
            let Ok(linked_text) =
                std::fs::read_to_string(&linked).or_else(|e| if linked.is_dir() { Ok(String::new()) } else { Err(e) })
            else {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            };
            if !heading.is_empty() && !anchors(&linked_text).iter().any(|a| a == heading) {
                broken.push(format!("{}: {target} (no heading #{heading} in {})", file.display(), linked.display()));
            }
        }
    }
    assert!(checked > 20, "only {checked} links checked: is the pattern right?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
