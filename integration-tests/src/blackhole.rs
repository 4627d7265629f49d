//! A TCP proxy that can stop forwarding without closing anything: the network fault a process
//! cannot see. A crash or a restart closes sockets and is noticed at once; a blackhole (a switch
//! dropping packets, a stalled NAT entry, a peer whose host froze) leaves every connection open and
//! silent, so only timeouts and heartbeats can tell. The chaos ledger puts one between a relay and
//! its database or broker to check that nothing is lost or stuck when that happens.
//!
//! While blackholed the proxy reads nothing and writes nothing in either direction, so the peers'
//! kernel buffers fill and their writes block, exactly as on a dead path; connections made during
//! the blackhole are accepted (the SYN is answered by the kernel) and then stay silent too. On
//! [`Blackhole::resume`] the held bytes flow again, in order.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy from [`addr`](Blackhole::addr) to one target, forwarding until
/// [`blackhole`](Blackhole::blackhole)d; stops (closing every connection) when dropped.
pub struct Blackhole {
    addr: SocketAddr,
    gate: Arc<watch::Sender<bool>>,
    accepting: JoinHandle<()>,
}

impl Blackhole {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (gate, _) = watch::channel(false);
        let gate = Arc::new(gate);
        let accepting = tokio::spawn(accept(listener, target, Arc::clone(&gate)));
        Ok(Self { addr, gate, accepting })
    }

    /// The address clients connect to instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding in both directions, keeping every connection open.
    pub fn blackhole(&self) {
        self.gate.send_replace(true);
    }

    /// Forwards again, the held bytes first.
    pub fn resume(&self) {
        self.gate.send_replace(false);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Accepts connections until the proxy is dropped; the pumps of each end with it, since they
/// watch the gate its sender owns.
async fn accept(listener: TcpListener, target: SocketAddr, gate: Arc<watch::Sender<bool>>) {
    let mut pumps = tokio::task::JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let mut held = gate.subscribe();
        // A connection made while blackholed reaches nothing until the path is back.
        if held.wait_for(|held| !*held).await.is_err() {
            return;
        }
        let Ok(server) = TcpStream::connect(target).await else {
            // The target refused: the client sees its connection closed, as it would directly.
            continue;
        };
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        pumps.spawn(pump(client_read, server_write, gate.subscribe()));
        pumps.spawn(pump(server_read, client_write, gate.subscribe()));
        // Reap the pumps of closed connections so a long run does not keep them all.
        while pumps.try_join_next().is_some() {}
    }
}

/// Copies `from` to `to`, waiting at the gate before each read and before each write, so nothing
/// read while the gate closes is passed on until it opens again. An end of either side closes the
/// other's write half, as a plain connection would.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut held: watch::Receiver<bool>,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        if held.wait_for(|held| !*held).await.is_err() {
            return;
        }
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if held.wait_for(|held| !*held).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An echo server on a free loopback port.
    async fn echo() -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        Ok(addr)
    }

    async fn round_trip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text).await?;
        let mut answer = vec![0_u8; text.len()];
        stream.read_exact(&mut answer).await?;
        Ok(answer)
    }

    #[tokio::test]
    async fn a_blackhole_holds_bytes_without_closing_and_resume_delivers_them_in_order() -> std::io::Result<()>
    {
        let proxy = Blackhole::start(echo().await?).await?;
        let mut stream = TcpStream::connect(proxy.addr()).await?;
        assert_eq!(round_trip(&mut stream, b"before").await?, b"before");

        proxy.blackhole();
        stream.write_all(b"held").await?;
        let mut answer = [0_u8; 4];
        let silent = tokio::time::timeout(Duration::from_millis(300), stream.read_exact(&mut answer)).await;
        assert!(silent.is_err(), "nothing comes back while blackholed, and the connection stays open");
        // The kernel completes the handshake from the listen backlog; the proxy holds the rest.
        let mut second = TcpStream::connect(proxy.addr()).await?;
        proxy.resume();
        stream.read_exact(&mut answer).await?;
        assert_eq!(&answer, b"held", "the held bytes arrive once the path is back");
        assert_eq!(
            round_trip(&mut second, b"after").await?,
            b"after",
            "a connection made in the blackhole works"
        );
        Ok(())
    }
}
