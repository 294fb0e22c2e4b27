//! A member that is a master under Redis Sentinel: the node's connection goes to the
//! address a majority of its sentinel group reports for the service, and its votes count
//! only while such a majority has confirmed that address recently.
//!
//! The group is not the member's URL list: every round learns from the sentinels which
//! others they know (`SENTINEL SENTINELS`, `num-other-sentinels` of `SENTINEL MASTER`),
//! asks those too, and counts a majority of every sentinel ever learnt
//! (`rules::sentinel::SentinelGroup`). A majority of a partial list would not do: a client
//! listing one sentinel cut off with the old master would go on confirming it.
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

use std::collections::HashMap;

use futures::StreamExt;
use futures::future::{BoxFuture, Shared};
use futures::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redis::{Client, ConnectionAddr, ConnectionInfo, FromRedisValue, RedisError, RedisResult};

use crate::net::timely;

/// The confirmation's lifetime (`rules::sentinel`): a request renews it in the background
/// once half of it has passed, and before its vote is judged once all of it has.
pub(crate) use crate::rules::sentinel::CONFIRM_WINDOW;
use crate::rules::sentinel::{GroupReport, RoundOutcome, SentinelGroup, vouched};

/// An address as the sentinels report it: a master's, or a sentinel's.
pub(crate) type MasterAddr = (String, u16);

/// One member under Sentinel.
pub(crate) struct SentinelMaster {
    service: String,
    /// One link per sentinel address asked, those of the URL first; learnt ones are added
    /// and none is removed.
    links: Mutex<Vec<Arc<SentinelLink>>>,
    /// The sentinels of the group as learnt so far, which only grows.
    group: Mutex<SentinelGroup<MasterAddr>>,
    /// A learnt sentinel's connection settings (those of the first listed one).
    sentinel_template: Option<ConnectionInfo>,
    /// The master's connection settings (credentials, database, TCP), its address aside.
    template: ConnectionInfo,
    state: Mutex<State>,
}

/// What one sentinel answered in a round.
struct Answer {
    /// The sentinel's address, as asked.
    sentinel: MasterAddr,
    /// The master it names; `None`: no answer in time, or no such service.
    master: Option<MasterAddr>,
    /// What it told of its group, when it did.
    group: Option<GroupReport<MasterAddr>>,
}

/// What the deployment check shows of a member's sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Survey {
    /// Each known sentinel: its `host:port`, whether the URL lists it, and the master it
    /// names now (`None`: no answer in time, or no such service). Listed ones first.
    pub(crate) answers: Vec<(String, bool, Option<MasterAddr>)>,
    /// How many sentinels the group has, as the member counts them.
    pub(crate) group_size: usize,
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
        let links: Vec<Arc<SentinelLink>> = sentinels
            .into_iter()
            .map(|client| Arc::new(SentinelLink::new(client)))
            .collect();
        SentinelMaster {
            service,
            group: Mutex::new(SentinelGroup::new(links.iter().map(|l| l.addr.clone()))),
            sentinel_template: links
                .first()
                .map(|l| l.client.get_connection_info().clone()),
            links: Mutex::new(links),
            template,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn group(&self) -> MutexGuard<'_, SentinelGroup<MasterAddr>> {
        self.group.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn links(&self) -> MutexGuard<'_, Vec<Arc<SentinelLink>>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The link to the sentinel at `addr`, made (and kept) if there is none yet; `None`
    /// when the driver cannot use the address.
    fn link_to(&self, addr: &MasterAddr) -> Option<Arc<SentinelLink>> {
        let mut links = self.links();
        if let Some(link) = links.iter().find(|l| l.addr == *addr) {
            return Some(Arc::clone(link));
        }
        let (host, port) = addr.clone();
        let info = self
            .sentinel_template
            .clone()?
            .set_addr(ConnectionAddr::Tcp(host, port));
        let link = Arc::new(SentinelLink::new(Client::open(info).ok()?));
        links.push(Arc::clone(&link));
        Some(link)
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

    /// The address of the master that a majority of the sentinel group reports now.
    async fn agreed_master(&self, timeout: Duration) -> RedisResult<MasterAddr> {
        let (answers, outcome) = self.round(timeout, true).await;
        match outcome {
            RoundOutcome::Agreed(addr) => Ok(addr),
            _ => {
                let seen: Vec<String> = answers
                    .iter()
                    .map(|a| {
                        let named = a
                            .master
                            .as_ref()
                            .map_or("no answer".into(), |(h, p)| format!("{h}:{p}"));
                        format!("{}:{} {named}", a.sentinel.0, a.sentinel.1)
                    })
                    .collect();
                Err(RedisError::from((
                    redis::ErrorKind::Io,
                    "no sentinel majority names the master",
                    format!(
                        "service {:?}, a group of {}: {}",
                        self.service,
                        self.group().size(),
                        seen.join(", ")
                    ),
                )))
            }
        }
    }

    /// One round: asks every sentinel of the group at once (each within `timeout`),
    /// learning the group from their answers and asking the sentinels new to it as they
    /// come. With `settle`, it ends as soon as its outcome is certain, so that a silent
    /// sentinel costs nothing once a majority agrees; else it waits for every answer.
    async fn round(
        &self,
        timeout: Duration,
        settle: bool,
    ) -> (Vec<Answer>, RoundOutcome<MasterAddr>) {
        let links: Vec<Arc<SentinelLink>> = self.links().clone();
        let service = self.service.as_str();
        let mut asks: FuturesUnordered<_> = links
            .into_iter()
            .map(|l| ask(l, service, timeout))
            .collect();
        let mut answers: Vec<Answer> = Vec::new();
        while let Some(answer) = asks.next().await {
            if let Some(report) = &answer.group {
                let new = self.group().learn(&answer.sentinel, report);
                for addr in new {
                    if let Some(link) = self.link_to(&addr) {
                        asks.push(ask(link, service, timeout));
                    }
                }
            }
            answers.push(answer);
            if settle {
                let outcome = self.outcome(&answers, asks.len());
                if outcome != RoundOutcome::Undecided {
                    return (answers, outcome);
                }
            }
        }
        let outcome = self.outcome(&answers, 0);
        (answers, outcome)
    }

    /// Where a round with `answers` and `pending` asks under way stands.
    fn outcome(&self, answers: &[Answer], pending: usize) -> RoundOutcome<MasterAddr> {
        let named: Vec<(MasterAddr, Option<MasterAddr>)> = answers
            .iter()
            .map(|a| (a.sentinel.clone(), a.master.clone()))
            .collect();
        self.group().outcome(&named, pending)
    }

    /// What each known sentinel of the group names as the master now (each within
    /// `timeout`), listed ones first, and the group's size. Records no confirmation: the
    /// deployment check reads it, no vote depends on it.
    pub(crate) async fn survey(&self, timeout: Duration) -> Survey {
        let (answers, _) = self.round(timeout, false).await;
        let group = self.group();
        let shown = group
            .members()
            .iter()
            .map(|member| {
                let named = answers
                    .iter()
                    .filter(|a| member.addrs.contains(&a.sentinel))
                    .find_map(|a| a.master.clone());
                let (host, port) = &member.addrs[0];
                (format!("{host}:{port}"), member.listed, named)
            })
            .collect();
        Survey {
            answers: shown,
            group_size: group.size(),
        }
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
        let round = crate::net::shared_task::spawn_shared(confirm);
        state.confirming = Some(round.clone());
        round
    }
}

/// One sentinel, and the connection to it kept between confirmations.
struct SentinelLink {
    /// Its address, as the URL lists it or a sentinel reported it.
    addr: MasterAddr,
    client: Client,
    conn: Mutex<Option<MultiplexedConnection>>,
}

impl SentinelLink {
    fn new(client: Client) -> Self {
        let addr = match client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host.to_ascii_lowercase(), *port)
            }
            other => (other.to_string(), 0),
        };
        SentinelLink {
            addr,
            client,
            conn: Mutex::new(None),
        }
    }

    fn kept(&self) -> MutexGuard<'_, Option<MultiplexedConnection>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sentinel's answer read within `timeout`, or `None`. On the kept connection,
    /// else (or when that one fails: its runtime may be gone) on a new one, which is kept.
    async fn ask(&self, service: &str, timeout: Duration) -> Option<Reply> {
        let query = async {
            let kept = self.kept().clone();
            if let Some(conn) = kept {
                if let Ok(reply) = ask_on(conn, service).await {
                    return Some(reply);
                }
                *self.kept() = None;
            }
            let conn = self.client.get_multiplexed_async_connection().await.ok()?;
            *self.kept() = Some(conn.clone());
            ask_on(conn, service).await.ok()
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

/// Asks the sentinel of `link` (within `timeout`) and returns its answer.
async fn ask(link: Arc<SentinelLink>, service: &str, timeout: Duration) -> Answer {
    let reply = link.ask(service, timeout).await;
    let (master, group) = reply.map_or((None, None), |r| (r.master, r.group));
    Answer {
        sentinel: link.addr.clone(),
        master,
        group,
    }
}

/// One sentinel's reply: the master it names, and what it tells of its group.
struct Reply {
    master: Option<MasterAddr>,
    group: Option<GroupReport<MasterAddr>>,
}

/// `SENTINEL get-master-addr-by-name`, `MASTER`, `SENTINELS` (for `service`) and `MYID`
/// pipelined on `conn`. The master is `None` when the sentinel knows no such service or
/// answers something else; the group report is `None` unless both `MASTER` and
/// `SENTINELS` answered (`MYID`, which Redis before 6.2 lacks, may not).
async fn ask_on(mut conn: MultiplexedConnection, service: &str) -> RedisResult<Reply> {
    let replies: Vec<redis::Value> = redis::pipe()
        .ignore_errors()
        .cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(service)
        .cmd("SENTINEL")
        .arg("MASTER")
        .arg(service)
        .cmd("SENTINEL")
        .arg("SENTINELS")
        .arg(service)
        .cmd("SENTINEL")
        .arg("MYID")
        .query_async(&mut conn)
        .await?;
    let mut replies = replies.into_iter();
    let mut next = || replies.next().unwrap_or(redis::Value::Nil);
    let master = Option::<(String, String)>::from_redis_value(next())
        .ok()
        .flatten()
        .and_then(|(host, port)| Some((host.to_ascii_lowercase(), port.parse().ok()?)));
    let counted = HashMap::<String, String>::from_redis_value(next())
        .ok()
        .and_then(|m| m.get("num-other-sentinels")?.parse::<usize>().ok());
    let others = Vec::<HashMap<String, String>>::from_redis_value(next()).ok();
    let id = String::from_redis_value(next()).ok();
    let group = counted.zip(others).map(|(num_others, others)| GroupReport {
        id,
        others: others
            .iter()
            .filter_map(|s| {
                let addr = (
                    s.get("ip")?.to_ascii_lowercase(),
                    s.get("port")?.parse().ok()?,
                );
                Some((addr, s.get("runid").cloned()))
            })
            .collect(),
        num_others,
    });
    Ok(Reply { master, group })
}
