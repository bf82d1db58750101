//! The server's Postgres sessions: every connection, pooled or a job leader's own, asks
//! for a statement timeout and server-side TCP keepalives.

use integration::spawn_app;
use sqlx::{Connection, PgConnection, PgExecutor};

/// `statement_timeout`, `tcp_keepalives_idle`, `tcp_keepalives_interval`, `tcp_keepalives_count`.
async fn session_settings(db: impl PgExecutor<'_>) -> (String, String, String, String) {
    sqlx::query_as(
        "select current_setting('statement_timeout'), current_setting('tcp_keepalives_idle'), \
         current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count')",
    )
    .fetch_one(db)
    .await
    .unwrap()
}

fn expected() -> (String, String, String, String) {
    ("30s".into(), "30".into(), "10".into(), "3".into())
}

#[tokio::test]
async fn a_pooled_connection_times_out_statements_after_30_s_and_keeps_alive() {
    let app = spawn_app().await;

    let settings = session_settings(&app.state.db).await;

    assert_eq!(settings, expected());
}

#[tokio::test]
async fn a_leaders_own_connection_has_the_same_session_settings() {
    let app = spawn_app().await;

    // What `Leadership::ensure` opens: a connection of its own, from the pool's options.
    let mut own = PgConnection::connect_with(&app.state.db.connect_options()).await.unwrap();
    let settings = session_settings(&mut own).await;
    own.close().await.unwrap();

    assert_eq!(settings, expected());
}
