//! A user-space TCP proxy in front of one node, for the faults this kernel cannot make
//! (there is no `netem` qdisc): reply latency, a silent partition and a fast-failing one.
//!
//! Clients connect to the proxy's URL; the test switches its [`Link`] and delay while they
//! run:
//!
//! - **delay**: each chunk read from the node is written to the client `delay` after it
//!   arrived, in order (replies are late by `delay`; back-to-back replies are not delayed
//!   cumulatively). Requests are forwarded at once.
//! - [`Link::Blackhole`]: nothing is forwarded in either direction and new connections are
//!   accepted but not connected through: requests hang like on a cut cable. Bytes read
//!   meanwhile are kept and delivered, in order, once the link is up again, which is what
//!   TCP retransmission does after a partition heals (a request sent into the partition
//!   still reaches the node late).
//! - [`Link::Reset`]: every connection is closed at once, and new ones are accepted and
//!   closed: clients fail fast, like an `iptables REJECT` or a node whose port is closed.
//!
//! The proxy runs on its own thread with a current-thread runtime, so it neither competes
//! with the client under test for worker threads nor adds to its task counts; dropping it
//! closes every connection. The one proxy of the tests and of `benches/compare.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// State of the proxied link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Forwarding (with the configured delay).
    Up,
    /// Silent partition: nothing moves; kept bytes are delivered after healing.
    Blackhole,
    /// Fast-failing partition: connections are closed, new ones refused.
    Reset,
}

#[derive(Clone, Copy, Debug)]
struct Mode {
    link: Link,
    delay: Duration,
    /// Where new connections go.
    upstream: SocketAddr,
    /// Bumped by [`FaultProxy::move_to`]: connections made before are closed.
    moves: u64,
}

/// A running proxy on `127.0.0.1:<ephemeral>` in front of `upstream`.
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    accepted: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts forwarding to `upstream`, link up, no delay.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind proxy");
        listener
            .set_nonblocking(true)
            .expect("proxy set_nonblocking");
        let addr = listener.local_addr().expect("proxy local_addr");
        let (mode, mode_rx) = watch::channel(Mode {
            link: Link::Up,
            delay: Duration::ZERO,
            upstream,
            moves: 0,
        });
        let accepted = Arc::new(AtomicUsize::new(0));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = {
            let accepted = Arc::clone(&accepted);
            std::thread::Builder::new()
                .name(format!("fault-proxy-{}", addr.port()))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("proxy runtime");
                    rt.block_on(accept_loop(listener, mode_rx, accepted, stop_rx));
                    // Dropping the runtime cancels every connection task and closes its sockets.
                    drop(rt);
                })
                .expect("spawn proxy thread")
        };
        FaultProxy {
            addr,
            mode,
            accepted,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Starts forwarding to `upstream`, delaying every reply chunk by `delay`.
    pub fn with_delay(upstream: SocketAddr, delay: Duration) -> FaultProxy {
        let proxy = FaultProxy::start(upstream);
        proxy.set_delay(delay);
        proxy
    }

    /// `127.0.0.1:PORT` of the proxy.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    pub fn upstream(&self) -> SocketAddr {
        self.mode.borrow().upstream
    }

    /// Moves the proxy's address to another server, as a failover moves a DNS name or a
    /// virtual IP: the connections to the old one are closed, new ones go to `upstream`.
    pub fn move_to(&self, upstream: SocketAddr) {
        self.mode.send_modify(|m| {
            m.upstream = upstream;
            m.moves += 1;
        });
    }

    /// Delay of every reply chunk from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.mode.send_modify(|m| m.delay = delay);
    }

    pub fn set_link(&self, link: Link) {
        self.mode.send_modify(|m| m.link = link);
    }

    pub fn link(&self) -> Link {
        self.mode.borrow().link
    }

    /// Client connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    mode: watch::Receiver<Mode>,
    accepted: Arc<AtomicUsize>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = TcpListener::from_std(listener).expect("proxy listener");
    loop {
        tokio::select! {
            _ = &mut stop => break,
            conn = listener.accept() => match conn {
                Ok((client, _)) => {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(client, mode.clone()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
        }
    }
}

/// Waits while the link is black-holed; true once it is up, false if it was reset (or the
/// proxy is stopping).
async fn link_up(mode: &mut watch::Receiver<Mode>) -> bool {
    let link = mode
        .wait_for(|m| m.link != Link::Blackhole)
        .await
        .map(|m| m.link);
    matches!(link, Ok(Link::Up))
}

/// Completes when the link is reset, or the proxy moved since move number `moves`.
async fn reset(mut mode: watch::Receiver<Mode>, moves: u64) {
    let _ = mode
        .wait_for(|m| m.link == Link::Reset || m.moves != moves)
        .await;
}

/// Forwards one client connection until either side closes, the link is reset or the
/// proxy moves.
async fn serve(client: TcpStream, mode: watch::Receiver<Mode>) {
    let Mode {
        upstream, moves, ..
    } = *mode.borrow();
    let mut before = mode.clone();
    let connected = async {
        if !link_up(&mut before).await {
            return None;
        }
        tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(upstream))
            .await
            .ok()?
            .ok()
    };
    let server = tokio::select! {
        server = connected => server,
        () = reset(mode.clone(), moves) => None,
    };
    // Without an upstream the client is dropped here: it sees the connection closed.
    let Some(server) = server else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_rd, client_wr) = client.into_split();
    let (server_rd, server_wr) = server.into_split();
    let requests = pump(client_rd, server_wr, mode.clone(), false);
    let replies = pump(server_rd, client_wr, mode.clone(), true);
    tokio::select! {
        _ = async { tokio::join!(requests, replies) } => {}
        () = reset(mode, moves) => {}
    }
}

/// Copies `rd` to `wr`, chunk by chunk, holding chunks while the link is black-holed and
/// (for replies) until `arrival + delay`. Returns when either side fails or closes; dropping
/// the halves then closes the connection in that direction.
async fn pump(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    mode: watch::Receiver<Mode>,
    delayed: bool,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read_mode = mode.clone();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let delay = if delayed {
                        read_mode.borrow().delay
                    } else {
                        Duration::ZERO
                    };
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    };
    let mut write_mode = mode;
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            // A chunk due now is written at once: the timer would round up to its next tick.
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if !link_up(&mut write_mode).await {
                return;
            }
            if wr.write_all(&chunk).await.is_err() {
                return;
            }
        }
        // The reader saw EOF: pass it on.
        let _ = wr.shutdown().await;
    };
    tokio::join!(reader, writer);
}
