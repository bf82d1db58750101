//! The `tessera` command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Tessera: weighted traffic allocation and tenant token quotas, on Postgres and Redis.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
pub struct Cli {
    /// Configuration file (TOML). Default: ./tessera.toml when present. Environment
    /// variables (DATABASE_URL, REDIS_URL, TESSERA_REDIS_PREFIX, TESSERA_BIND, …) override it.
    #[arg(long, global = true, env = "TESSERA_CONFIG")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What to do; `serve` when none is given.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Migrate the database, then serve the HTTP API and the admin UI.
    Serve,
    /// Create the database when missing and apply every migration.
    Migrate,
    /// Create the database when missing, migrate, and load demo data (idempotent).
    DemoSeed,
}
