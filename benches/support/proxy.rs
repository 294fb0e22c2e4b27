//! A user-space TCP proxy that delays every server→client chunk by a fixed time.
//!
//! Client→server bytes are forwarded at once. Each chunk read from the server is stamped
//! with its arrival time and written to the client at `arrival + delay`, in order: replies
//! are late by `delay` (plus timer granularity, about 1 ms with tokio), but back-to-back
//! replies are not delayed cumulatively.
//!
//! The proxy runs on its own thread with its own current-thread runtime, so it neither
//! competes with the measured client for worker threads nor adds to its task counts.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// A running proxy on `127.0.0.1:<ephemeral>`; stopped (every connection closed) on drop.
pub struct DelayProxy {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Starts forwarding to `upstream`, delaying each reply chunk by `delay`.
    pub fn start(upstream: SocketAddr, delay: Duration) -> DelayProxy {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind proxy");
        listener
            .set_nonblocking(true)
            .expect("proxy set_nonblocking");
        let addr = listener.local_addr().expect("proxy local_addr");
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("delay-proxy".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("proxy listener");
                    let mut stop_rx = stop_rx;
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => break,
                            accepted = listener.accept() => match accepted {
                                Ok((client, _)) => {
                                    tokio::spawn(serve(client, upstream, delay));
                                }
                                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                            },
                        }
                    }
                });
                // Dropping the runtime cancels every connection task and closes its sockets.
                drop(rt);
            })
            .expect("spawn proxy thread");
        DelayProxy {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Forwards one client connection until either side closes.
async fn serve(client: TcpStream, upstream: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();

    let upward = async {
        let _ = tokio::io::copy(&mut client_rd, &mut server_wr).await;
    };

    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read_replies = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match server_rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
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
    let write_replies = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if client_wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    // The connection ends as soon as the client stops sending or the reply path ends.
    tokio::select! {
        () = upward => {}
        _ = async { tokio::join!(read_replies, write_replies) } => {}
    }
}
