//! A member that is a master under Redis Sentinel: the node's connection goes to the
//! address a majority of its sentinels report for the service, and its votes count only
//! while such a majority has confirmed that address recently.
//!
//! Why the confirmation: after a failover the old master may go on accepting writes for a
//! while (until Sentinel reconfigures it, seconds later, or for as long as it stays
//! partitioned), so a client still connected to it and one that resolved the new master
//! would each get this member's vote. Every vote of this member is counted only if a
//! sentinel majority named the connection's address in a round that started less than
//! [`CONFIRM_WINDOW`] before the vote was judged. Two majorities of the sentinels share
//! one, which answered the old address before it answered the new one (its view only moves
//! forward), so a vote on the old master is made less than [`CONFIRM_WINDOW`] after the
//! client that reached the new master resolved it; and the new master, a promoted replica,
//! is quarantined from then on for a TTL and that window (see `Node::learn_facts`), so no
//! lock it may lack can still be valid when it votes.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{Client, ConnectionAddr, ConnectionInfo, RedisError, RedisResult};

use crate::net::timely;

/// The confirmation's lifetime (`rules::sentinel`): a request renews it in the background
/// once half of it has passed, and before its vote is judged once all of it has.
pub(crate) use crate::rules::sentinel::CONFIRM_WINDOW;
use crate::rules::sentinel::{agreed, vouched};

/// An address as the sentinels report it.
pub(crate) type MasterAddr = (String, u16);

/// One member under Sentinel.
pub(crate) struct SentinelMaster {
    service: String,
    sentinels: Vec<SentinelLink>,
    /// The master's connection settings (credentials, database, TCP), its address aside.
    template: ConnectionInfo,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The address the node's current connection goes to.
    connected: Option<MasterAddr>,
    /// The last confirmation: when its round started, and the address it agreed on.
    confirmed: Option<(Instant, MasterAddr)>,
    /// A confirmation round under way, which every request that needs one awaits.
    confirming: Option<Shared<BoxFuture<'static, ()>>>,
}

impl std::fmt::Debug for SentinelMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelMaster")
            .field("service", &self.service)
            .finish()
    }
}

impl SentinelMaster {
    /// The member for `service`, asking `sentinels`; `template` holds the master's
    /// connection settings.
    pub(crate) fn new(service: String, sentinels: Vec<Client>, template: ConnectionInfo) -> Self {
        SentinelMaster {
            service,
            sentinels: sentinels.into_iter().map(SentinelLink::new).collect(),
            template,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the sentinels for the master (each within `timeout`) and returns a client for
    /// the address a majority of them report, recording that as a confirmation.
    ///
    /// # Errors
    ///
    /// When no address has a majority of the sentinels (too few answer, or they disagree
    /// while a failover is in progress).
    pub(crate) async fn master_client(
        &self,
        timeout: Duration,
    ) -> RedisResult<(MasterAddr, Client)> {
        let addr = self.confirm(timeout).await?;
        let (host, port) = addr.clone();
        let info = self
            .template
            .clone()
            .set_addr(ConnectionAddr::Tcp(host, port));
        Ok((addr, Client::open(info)?))
    }

    /// Asks the sentinels for the master (each within `timeout`) and records the address a
    /// majority of them report as the confirmation, from when the round started.
    async fn confirm(&self, timeout: Duration) -> RedisResult<MasterAddr> {
        let started = Instant::now();
        let addr = self.agreed_master(timeout).await?;
        self.lock().confirmed = Some((started, addr.clone()));
        Ok(addr)
    }

    /// The address of the master that a majority of the sentinels report now.
    async fn agreed_master(&self, timeout: Duration) -> RedisResult<MasterAddr> {
        let reports = self.ask_every(timeout).await;
        agreed(&reports, self.sentinels.len()).ok_or_else(|| {
            let seen: Vec<String> = reports
                .iter()
                .map(|r| {
                    r.as_ref()
                        .map_or("no answer".into(), |(h, p)| format!("{h}:{p}"))
                })
                .collect();
            RedisError::from((
                redis::ErrorKind::Io,
                "no sentinel majority names the master",
                format!("service {:?}: {}", self.service, seen.join(", ")),
            ))
        })
    }

    /// What each configured sentinel names as the master now (each within `timeout`), in
    /// the order of the member's URL: the sentinel's `host:port` and its answer, `None`
    /// when it gave none in time or knows no such service. Records no confirmation: the
    /// deployment check reads it, no vote depends on it.
    pub(crate) async fn survey(&self, timeout: Duration) -> Vec<(String, Option<MasterAddr>)> {
        let reports = self.ask_every(timeout).await;
        self.sentinels
            .iter()
            .map(|s| s.client.get_connection_info().addr().to_string())
            .zip(reports)
            .collect()
    }

    /// Every configured sentinel's answer, in the order of the member's URL, each asked
    /// at once and within `timeout`.
    async fn ask_every(&self, timeout: Duration) -> Vec<Option<MasterAddr>> {
        let asks = self.sentinels.iter().map(|s| s.ask(&self.service, timeout));
        futures::future::join_all(asks).await
    }

    /// Notes that the node's connection now goes to `addr`.
    pub(crate) fn connected_to(&self, addr: MasterAddr) {
        self.lock().connected = Some(addr);
    }

    /// The address the last confirmation agreed on.
    pub(crate) fn named(&self) -> Option<MasterAddr> {
        self.lock().confirmed.as_ref().map(|(_, addr)| addr.clone())
    }

    /// Whether this member's votes count now: a confirmation that started less than
    /// [`CONFIRM_WINDOW`] ago named the connection's address.
    pub(crate) fn vouches(&self) -> bool {
        let state = self.lock();
        vouched(
            state.confirmed.as_ref(),
            state.connected.as_ref(),
            Instant::now(),
        )
    }

    /// Whether a request needs no confirmation round of its own: the last confirmation is
    /// less than half a window old, or there is none yet, so the request's connect resolves
    /// the master, which confirms it.
    pub(crate) fn is_fresh(&self) -> bool {
        self.confirmation_age()
            .is_none_or(|age| age < CONFIRM_WINDOW / 2)
    }

    /// How old the last confirmation is (`None`: there is none).
    fn confirmation_age(&self) -> Option<Duration> {
        self.lock().confirmed.as_ref().map(|(at, _)| at.elapsed())
    }

    /// Renews a confirmation that is no longer fresh (see [`is_fresh`](Self::is_fresh)):
    /// awaited once a whole window has passed (the coming vote would not count without
    /// it), else left to run in the background. Returns `false` when the sentinels name
    /// another master than the connection's: the connection must be dropped.
    pub(crate) async fn keep_confirmed(self: &Arc<Self>, timeout: Duration) -> bool {
        let round = self.confirming(timeout);
        if self
            .confirmation_age()
            .is_none_or(|age| age >= CONFIRM_WINDOW)
        {
            round.await;
        }
        let state = self.lock();
        match (&state.confirmed, &state.connected) {
            (Some((_, addr)), Some(connected)) => addr == connected,
            _ => true,
        }
    }

    /// The confirmation round under way, or a new one (spawned, so that it completes
    /// whoever waits for it).
    fn confirming(self: &Arc<Self>, timeout: Duration) -> Shared<BoxFuture<'static, ()>> {
        let mut state = self.lock();
        if let Some(round) = &state.confirming {
            return round.clone();
        }
        let member = Arc::clone(self);
        let confirm = async move {
            // A round without a majority leaves the last confirmation to age out.
            let _ = member.confirm(timeout).await;
            member.lock().confirming = None;
        };
        let round = match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let task = handle.spawn(confirm);
                async move {
                    let _ = task.await;
                }
                .boxed()
            }
            Err(_) => confirm.boxed(),
        }
        .shared();
        state.confirming = Some(round.clone());
        round
    }
}

/// One sentinel, and the connection to it kept between confirmations.
struct SentinelLink {
    client: Client,
    conn: Mutex<Option<MultiplexedConnection>>,
}

impl SentinelLink {
    fn new(client: Client) -> Self {
        SentinelLink {
            client,
            conn: Mutex::new(None),
        }
    }

    fn kept(&self) -> MutexGuard<'_, Option<MultiplexedConnection>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sentinel's answer to `SENTINEL get-master-addr-by-name`, read within `timeout`,
    /// or `None`. On the kept connection, else (or when that one fails: its runtime may be
    /// gone) on a new one, which is kept.
    async fn ask(&self, service: &str, timeout: Duration) -> Option<MasterAddr> {
        let query = async {
            let kept = self.kept().clone();
            if let Some(conn) = kept {
                if let Ok(reply) = ask_on(conn, service).await {
                    return reply;
                }
                *self.kept() = None;
            }
            let conn = self.client.get_multiplexed_async_connection().await.ok()?;
            *self.kept() = Some(conn.clone());
            ask_on(conn, service).await.ok().flatten()
        };
        // An answer read at the deadline or later timed out too (see `timely`): it names
        // no master for the confirmation, and the connection goes as after a timeout.
        let deadline = crate::rules::deadline::after(tokio::time::Instant::now(), timeout);
        let answer = timely::within(deadline, query).await;
        if answer.is_none() {
            *self.kept() = None;
        }
        answer.flatten()
    }
}

/// `SENTINEL get-master-addr-by-name service` on `conn`: the address, `None` when the
/// sentinel knows no such service or answers something else.
async fn ask_on(mut conn: MultiplexedConnection, service: &str) -> RedisResult<Option<MasterAddr>> {
    let reply: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(service)
        .query_async(&mut conn)
        .await?;
    Ok(reply.and_then(|(host, port)| Some((host.to_ascii_lowercase(), port.parse().ok()?))))
}
