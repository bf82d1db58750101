//! Rebuilds the server when a migration is added or changed: `sqlx::migrate!` embeds the
//! `migrations/` folder at compile time, and cargo does not watch it by itself.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
