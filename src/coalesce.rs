//! The byte stream under a node connection: plain TCP whose writes are coalesced within
//! one pass of the scheduler.
//!
//! The `redis` driver writes whatever requests its channel holds each time it runs, and
//! it runs as soon as one request wakes it (tokio polls a task woken by the running one
//! next). With many tasks on one client, each request then leaves in a write and a TCP
//! segment of its own, and the server reads them one by one. [`Coalescing`] answers the
//! first write after a flush with `Pending` and an immediate wake-up: the driver yields
//! once, the tasks already runnable queue their requests, and the next write carries them
//! all. Unlike Nagle's algorithm this never waits for the network: a lone request leaves
//! one scheduler pass later.

use std::pin::Pin;
use std::task::{Context, Poll};

use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::io::tcp::socket2::SockRef;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A stream whose first write after each completed one yields to the scheduler once.
#[derive(Debug)]
pub(crate) struct Coalescing<S> {
    inner: S,
    /// A write was put off once already; the next one goes through.
    yielded: bool,
}

impl<S> Coalescing<S> {
    pub(crate) fn new(inner: S) -> Self {
        Coalescing {
            inner,
            yielded: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalescing<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalescing<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if written.is_ready() {
            self.yielded = false;
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A multiplexed connection to `client`'s node: over a [`Coalescing`] TCP stream for a
/// plain TCP address with `TCP_NODELAY` (with Nagle's algorithm on, the kernel coalesces,
/// and a yield on top of it halved the rate of 16 tasks), through the driver's own connect
/// otherwise (TLS, Unix sockets, Nagle, no tokio runtime).
pub(crate) async fn connect(
    client: &redis::Client,
    config: &AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection> {
    let info: &ConnectionInfo = client.get_connection_info();
    let settings = info.tcp_settings();
    let (ConnectionAddr::Tcp(host, port), true, Ok(runtime)) = (
        info.addr(),
        settings.nodelay(),
        tokio::runtime::Handle::try_current(),
    ) else {
        return client
            .get_multiplexed_async_connection_with_config(config)
            .await;
    };
    let stream = tcp_stream(host, *port, settings).await?;
    let (conn, driver) = MultiplexedConnection::new_with_config(
        info.redis_settings(),
        Coalescing::new(stream),
        config.clone(),
    )
    .await?;
    // The driver ends once every handle of `conn` is gone.
    runtime.spawn(driver);
    Ok(conn)
}

/// A TCP connection to the first of `host`'s addresses that accepts, with `settings`
/// applied as the driver applies them.
async fn tcp_stream(host: &str, port: u16, settings: &TcpSettings) -> std::io::Result<TcpStream> {
    let addrs: Vec<_> = tokio::net::lookup_host((host, port)).await?.collect();
    if addrs.is_empty() {
        let e = format!("{host}:{port} resolves to no address");
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, e));
    }
    let attempts = addrs.into_iter().map(|a| Box::pin(TcpStream::connect(a)));
    let (stream, _) = futures::future::select_ok(attempts)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("connect to {host}:{port}: {e}")))?;
    stream.set_nodelay(settings.nodelay())?;
    let socket = SockRef::from(&stream);
    if let Some(keepalive) = settings.keepalive() {
        socket.set_tcp_keepalive(keepalive)?;
    }
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    socket.set_tcp_user_timeout(settings.user_timeout())?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use tokio::io::AsyncReadExt;

    use super::*;

    /// Counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn write(
        stream: &mut Coalescing<tokio::io::DuplexStream>,
        cx: &mut Context<'_>,
    ) -> Poll<usize> {
        Pin::new(stream)
            .poll_write(cx, b"PING\r\n")
            .map(|r| r.expect("write"))
    }

    #[tokio::test]
    async fn each_write_yields_once_then_goes_through() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut stream = Coalescing::new(near);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        for round in 1..=2 {
            assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
            assert_eq!(count.0.load(Ordering::Relaxed), round, "woken at once");
            assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        }
        let mut got = [0u8; 12];
        far.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"PING\r\nPING\r\n");
    }

    #[tokio::test]
    async fn a_write_that_waits_for_room_does_not_yield_again() {
        let (near, mut far) = tokio::io::duplex(6);
        let mut stream = Coalescing::new(near);
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        // The pipe is full: the next write yields once, then waits for room.
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
        let mut got = [0u8; 6];
        far.read_exact(&mut got).await.expect("read");
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
    }
}
