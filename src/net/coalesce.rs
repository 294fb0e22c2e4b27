//! The byte stream under a node connection: plain TCP whose writes are coalesced within
//! one pass of the scheduler.
//!
//! The `redis` driver writes whatever requests its channel holds each time it runs, and
//! it runs as soon as one request wakes it (tokio polls a task woken by the running one
//! next). With many tasks on one client, each request then leaves in a write and a TCP
//! segment of its own, and the server reads them one by one. While an earlier write is
//! unanswered (requests are in flight, so other tasks are likely about to send too),
//! [`Coalescing`] answers a write with `Pending` once and yields: the tasks already
//! runnable queue their requests, and the next write carries them all. Unlike Nagle's
//! algorithm this never waits for the network; a lone request never yields.
//!
//! How to yield depends on the ensemble (`examples/cycle_probe.rs tasks`, 16 tasks, three
//! or four runs each, lock + release cycles a second against the driver's own stream):
//! at N = 1, tokio's `yield_now` (woken once the worker has run its other tasks) gave
//! 1.4x, a plain self-wake 1.1x; at N = 5, where one attempt wakes five drivers, the
//! self-wake gave 1.25x and `yield_now` 1.1x (each driver then waited for the others).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::io::tcp::socket2::SockRef;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How [`Coalescing`] yields (see the module docs for the numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Yield {
    /// `tokio::task::yield_now`: polled again once the worker has run its other tasks.
    /// For a single-node client.
    Deferred,
    /// A self-wake: back in the run queue at once, behind the tasks already there.
    Rescheduled,
}

impl Yield {
    /// The better one for an ensemble of `nodes`.
    pub(crate) fn for_nodes(nodes: usize) -> Yield {
        if nodes == 1 {
            Yield::Deferred
        } else {
            Yield::Rescheduled
        }
    }
}

/// A stream whose writes yield to the scheduler once while an earlier one is unanswered.
pub(crate) struct Coalescing<S> {
    inner: S,
    how: Yield,
    /// Where the write under way is in its yield; back to [`WriteYield::Ahead`] once a write
    /// completes.
    turn: WriteYield,
    /// Bytes were written and none have been read since: requests are in flight, so
    /// other tasks are likely about to send too. Without this, a lone request (one task
    /// locking in a loop) yields for nothing, and that cost 1.7x the client CPU per cycle.
    unanswered: bool,
}

/// The yield of the write under way.
enum WriteYield {
    /// Not started.
    Ahead,
    /// Waiting for tokio's `yield_now` ([`Yield::Deferred`]).
    Deferred(Pin<Box<dyn Future<Output = ()> + Send>>),
    /// The task woke itself ([`Yield::Rescheduled`]); over at its next poll.
    Rescheduled,
    /// Over: the write goes through.
    Over,
}

impl<S> Coalescing<S> {
    pub(crate) fn new(inner: S, how: Yield) -> Self {
        Coalescing {
            inner,
            how,
            turn: WriteYield::Ahead,
            unanswered: false,
        }
    }
}

impl<S: Unpin> Coalescing<S> {
    /// Pending until the yield of the write under way is over.
    fn yield_once(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            self.turn = match &mut self.turn {
                WriteYield::Ahead => match self.how {
                    Yield::Deferred => WriteYield::Deferred(Box::pin(tokio::task::yield_now())),
                    Yield::Rescheduled => {
                        self.turn = WriteYield::Rescheduled;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                },
                WriteYield::Deferred(turn) => {
                    std::task::ready!(turn.as_mut().poll(cx));
                    WriteYield::Over
                }
                WriteYield::Rescheduled => WriteYield::Over,
                WriteYield::Over => return Poll::Ready(()),
            };
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalescing<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.unanswered = false;
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalescing<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.unanswered {
            std::task::ready!(self.yield_once(cx));
        }
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if written.is_ready() {
            // Also when an answer cut a yield short: the next one starts afresh.
            self.turn = WriteYield::Ahead;
        }
        if let Poll::Ready(Ok(n)) = written {
            self.unanswered |= n > 0;
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
/// and a yield on top of it took 40 % off the rate of 16 tasks), through the driver's own connect
/// otherwise (TLS, Unix sockets, Nagle, no tokio runtime).
pub(crate) async fn connect(
    client: &redis::Client,
    config: &AsyncConnectionConfig,
    how: Yield,
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
        Coalescing::new(stream, how),
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

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    async fn a_write_yields_once_while_an_earlier_one_is_unanswered() {
        for how in [Yield::Deferred, Yield::Rescheduled] {
            yields_once_while_unanswered(how).await;
        }
    }

    async fn yields_once_while_unanswered(how: Yield) {
        let (near, mut far) = tokio::io::duplex(64);
        let mut stream = Coalescing::new(near, how);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        // Nothing in flight: a lone request goes at once.
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        for round in 1..=2 {
            assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
            // The runtime wakes a yielded task once it has run the others.
            tokio::task::yield_now().await;
            assert_eq!(count.0.load(Ordering::Relaxed), round, "{how:?}: woken");
            assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        }
        let mut got = [0u8; 18];
        far.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"PING\r\nPING\r\nPING\r\n");
        // An answer came: the next request is alone again.
        far.write_all(b"+PONG\r\n").await.expect("answer");
        let mut answer = [0u8; 7];
        stream
            .read_exact(&mut answer)
            .await
            .expect("read the answer");
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
    }

    #[tokio::test]
    async fn a_write_that_waits_for_room_does_not_yield_again() {
        for how in [Yield::Deferred, Yield::Rescheduled] {
            waits_for_room_without_yielding_again(how).await;
        }
    }

    async fn waits_for_room_without_yielding_again(how: Yield) {
        let (near, mut far) = tokio::io::duplex(12);
        let mut stream = Coalescing::new(near, how);
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        // The pipe is full: the next write yields once, then waits for room.
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
        let mut got = [0u8; 6];
        far.read_exact(&mut got).await.expect("read");
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
    }
    #[tokio::test]
    async fn an_answer_during_a_yield_leaves_the_next_yield_whole() {
        for how in [Yield::Deferred, Yield::Rescheduled] {
            answer_during_a_yield(how).await;
        }
    }

    async fn answer_during_a_yield(how: Yield) {
        let (near, mut far) = tokio::io::duplex(64);
        let mut stream = Coalescing::new(near, how);
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending);
        // The answer comes before the yield is over: the write goes through at once.
        far.write_all(b"+PONG\r\n").await.expect("answer");
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer).await.expect("read");
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
        // In flight again: the next write yields, a whole yield of its own.
        assert_eq!(write(&mut stream, &mut cx), Poll::Pending, "{how:?}");
        tokio::task::yield_now().await;
        assert_eq!(write(&mut stream, &mut cx), Poll::Ready(6));
    }
}
