//! Headless Debian Chromium driven through chromedriver (WebDriver), for UI tests.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::TimeoutConfiguration;
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

/// One browser at a time in a test binary: two Chromiums instantiating the debug bundle
/// beside two debug servers starve each other on 2 cores (a renderer that stopped
/// answering for minutes, a 10 s wait run out, now and then). The tests' own setup still
/// runs in parallel.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A chromedriver process and one browser session; both end when this is dropped.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    _profile: TempDir,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless Chromium session with a
    /// fresh profile. The flags keep Chromium from reaching for the network.
    pub async fn start() -> anyhow::Result<Self> {
        let turn = ONE_AT_A_TIME.lock().await;
        let driver_bin = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_owned());
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log_dir = crate::workspace_root().join("target/chromedriver");
        std::fs::create_dir_all(&log_dir)?;
        // Its own process group: on drop the whole group (chromedriver and the Chromium it
        // started) is killed, also when a test panicked before closing the session.
        let driver = Command::new(&driver_bin)
            .process_group(0)
            .arg(format!("--port={port}"))
            // Its warnings (a renderer that stopped answering, say) where a failed run's
            // reader finds them.
            .arg(format!("--log-path={}", log_dir.join(format!("chromedriver-{port}.log")).display()))
            .arg("--log-level=WARNING")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {driver_bin} (install chromium-driver; scripts/test does): {e}"))?;
        let profile = std::env::temp_dir().join(format!("tessera-chromium-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&profile)?;
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,800",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last_error = None;
        for _ in 0..50 {
            match ClientBuilder::new(HttpConnector::new()).capabilities(caps.clone()).connect(&url).await {
                Ok(client) => {
                    // A navigation that hangs fails in 30 s, naming the test, instead of
                    // chromedriver's 300 s.
                    let timeouts = TimeoutConfiguration::new(
                        Some(Duration::from_secs(30)),
                        Some(Duration::from_secs(30)),
                        Some(Duration::ZERO),
                    );
                    client.update_timeouts(timeouts).await?;
                    return Ok(Self { client, driver, _profile: TempDir(profile), _turn: turn });
                }
                Err(e) => {
                    last_error = Some(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        kill_group(&driver);
        anyhow::bail!("no WebDriver session after 5 s: {last_error:?}")
    }

    /// Ends the session and stops chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
        // Drop kills what is left of the process group.
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&self.driver);
        let _ = self.driver.wait();
    }
}

/// Kills chromedriver's process group (chromedriver and its Chromium processes).
fn kill_group(driver: &Child) {
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", driver.id())]).stderr(Stdio::null()).status();
}
