//! Logging and tracing: one subscriber for the process, text or JSON.

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

use crate::configuration::LogFormat;

/// Installs the global subscriber. `filter` uses `RUST_LOG` syntax (`info,sqlx=warn`);
/// `RUST_LOG`, when set, wins. Logs go to stderr so that CLI output on stdout stays clean.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => registry.with(fmt::layer().with_writer(std::io::stderr)).try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true).with_current_span(true).with_writer(std::io::stderr))
            .try_init(),
    };
    // A second init (tests start several apps in one process) keeps the first subscriber.
    let _ = result;
}
