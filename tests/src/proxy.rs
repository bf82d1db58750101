//! A TCP proxy that a test can cut: the app talks to a dependency through it, and
//! [`Proxy::cut`] takes the dependency away from that app alone (the shared Postgres keeps
//! serving every other test), [`Proxy::restore`] brings it back.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Forwards every connection made to [`Proxy::addr`] to the target, until cut.
pub struct Proxy {
    addr: SocketAddr,
    /// `true` while cut; every forwarding task watches it.
    cut: Arc<watch::Sender<bool>>,
    acceptor: JoinHandle<()>,
}

impl Proxy {
    /// Listens on `127.0.0.1:<random port>` and forwards to `target` (`host:port`).
    pub async fn start(target: impl Into<String>) -> Self {
        let target = target.into();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (cut, _) = watch::channel(false);
        let cut = Arc::new(cut);
        let acceptor = tokio::spawn(accept(listener, target, cut.clone()));
        Self { addr, cut, acceptor }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every open connection (both ends see them close) and hangs up on new ones as
    /// soon as they are accepted, as a dependency that went away would.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Forwards new connections again (the ones cut stay closed; clients reconnect).
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut.send_replace(true);
    }
}

async fn accept(listener: TcpListener, target: String, cut: Arc<watch::Sender<bool>>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else { continue };
        if *cut.borrow() {
            drop(inbound);
            continue;
        }
        tokio::spawn(forward(inbound, target.clone(), cut.subscribe()));
    }
}

/// Copies bytes both ways until either side closes or the proxy is cut; dropping both
/// streams then closes both connections.
async fn forward(mut inbound: TcpStream, target: String, mut cut: watch::Receiver<bool>) {
    let Ok(mut outbound) = TcpStream::connect(&target).await else { return };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}

/// The `host:port` a Postgres URL points at (the target of a proxy in front of it).
pub fn postgres_address(url: &str) -> String {
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("a valid Postgres URL");
    format!("{}:{}", options.get_host(), options.get_port())
}

/// `url` with its host and port replaced by `addr` (user, database and query kept).
pub fn through(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("url has a scheme");
    let (authority, tail) = rest.split_once('/').map_or((rest, String::new()), |(a, t)| (a, format!("/{t}")));
    let user = authority.rsplit_once('@').map(|(user, _)| format!("{user}@")).unwrap_or_default();
    format!("{scheme}://{user}{addr}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_through_the_proxy_keeps_the_user_the_database_and_the_query() {
        let addr: SocketAddr = "127.0.0.1:40001".parse().unwrap();
        assert_eq!(
            through("postgres://postgres@127.0.0.1:5432/t1?sslmode=disable", addr),
            "postgres://postgres@127.0.0.1:40001/t1?sslmode=disable"
        );
        assert_eq!(through("postgres://u:p@db/t1", addr), "postgres://u:p@127.0.0.1:40001/t1");
        assert_eq!(postgres_address("postgres://u@db.internal/t1"), "db.internal:5432");
    }
}
