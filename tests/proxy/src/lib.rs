//! A TCP proxy a test can cut: the code under test reaches a dependency (Postgres, Redis)
//! through it, and [`Proxy::cut`] takes that dependency away from this code alone (the
//! shared server keeps serving every other test) until [`Proxy::restore`] brings it back.
//!
//! One proxy for the whole workspace: the client's tests put it in front of Redis, the
//! integration tests in front of Postgres. [`through`] rewrites a URL to go through it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Forwards every connection made to [`Proxy::addr`] to the target, unless cut.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    acceptor: JoinHandle<()>,
}

/// Whether the proxy is cut, and the connections it forwards. One lock for both: a
/// connection is either refused as cut or registered before [`Proxy::cut`] takes the list.
#[derive(Default)]
struct State {
    cut: bool,
    connections: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on `127.0.0.1:<random port>` and forwards to `target` (`host:port`).
    pub async fn start(target: impl Into<String>) -> Self {
        let target = target.into();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(Mutex::new(State::default()));
        let acceptor = tokio::spawn(accept(listener, target, state.clone()));
        Self { addr, state, acceptor }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every open connection (both ends see it close) and, until restored, hangs up
    /// on new ones as soon as they are accepted, as a dependency that went away would.
    /// Returns once every connection is closed: nothing sent afterwards reaches the target.
    pub async fn cut(&self) {
        let open = {
            let mut state = self.state.lock().expect("proxy state");
            state.cut = true;
            std::mem::take(&mut state.connections)
        };
        for connection in open {
            connection.abort();
            // Returns once the task is gone, and with it both streams.
            let _ = connection.await;
        }
    }

    /// Forwards new connections again (the ones cut stay closed; clients reconnect).
    pub fn restore(&self) {
        self.state.lock().expect("proxy state").cut = false;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        if let Ok(mut state) = self.state.lock() {
            state.connections.drain(..).for_each(|connection| connection.abort());
        }
    }
}

async fn accept(listener: TcpListener, target: String, state: Arc<Mutex<State>>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else { continue };
        let mut guard = state.lock().expect("proxy state");
        if guard.cut {
            drop(inbound);
            continue;
        }
        guard.connections.retain(|connection| !connection.is_finished());
        guard.connections.push(tokio::spawn(forward(inbound, target.clone())));
    }
}

/// Copies bytes both ways until either side closes; aborting the task drops both streams,
/// which closes both connections.
async fn forward(mut inbound: TcpStream, target: String) {
    let Ok(mut outbound) = TcpStream::connect(&target).await else { return };
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}

/// `url` with its host and port replaced by `addr` (user, password, database and query
/// kept): the URL of the same dependency through a proxy listening on `addr`.
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
        assert_eq!(through("redis://127.0.0.1:6379", addr), "redis://127.0.0.1:40001");
        assert_eq!(through("redis://:secret@cache:6379/2", addr), "redis://:secret@127.0.0.1:40001/2");
    }

    /// A target that answers every line with the same line.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    /// Sends `ping` and answers what came back (empty when the connection closed).
    async fn ping(stream: &mut TcpStream) -> Vec<u8> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        if stream.write_all(b"ping").await.is_err() {
            return Vec::new();
        }
        let mut reply = [0; 4];
        match stream.read_exact(&mut reply).await {
            Ok(_) => reply.to_vec(),
            Err(_) => Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_cut_closes_open_connections_and_hangs_up_on_new_ones_until_restored() {
        // Arrange
        let proxy = Proxy::start(echo().await.to_string()).await;
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(ping(&mut open).await, b"ping");

        // Act
        proxy.cut().await;
        let mut during = TcpStream::connect(proxy.addr()).await.unwrap();
        let (old, new) = (ping(&mut open).await, ping(&mut during).await);
        proxy.restore();
        let mut after = TcpStream::connect(proxy.addr()).await.unwrap();

        // Assert
        assert!(old.is_empty() && new.is_empty(), "nothing gets through a cut proxy: {old:?} {new:?}");
        assert_eq!(ping(&mut after).await, b"ping");
    }
}
