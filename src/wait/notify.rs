//! Release notifications, so waiters retry when a lock is freed instead of only polling,
//! and only one waiting client is woken per release.
//!
//! Every client has a random id and, from its first contended wait on, one pub/sub
//! connection per node subscribed to its own channel `<prefix>quorum-lock:wake:<id>`. A failed
//! attempt of a waiting client appends the id to the key's waiting list on one node, the
//! first where its subscription stands (see [`scripts::ACQUIRE`](crate::protocol::scripts)); a release
//! pops the first id whose client is still listening and publishes `<token>:<key>` to it
//! alone, on the releasing client's waiting-list node only (the first node while it has
//! none; see `release::Holding`). So clients are woken one at a time, in the order they
//! started waiting, and a herd of waiters never splits the votes of one release between
//! them. A waiter whose waiting-list node changes lists again on the new one
//! ([`Registration::notified`]). Inside the client, the local queue lets one task per
//! resource wait on Redis; the message wakes that task once per distinct token. Expiry
//! announces nothing and a message can be lost, so waiters still poll with jittered
//! backoff.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use redis::Value;
use tokio::sync::{Notify, watch};

use crate::metrics;
use crate::net::answers::{self, Stop};
use crate::net::background::Background;
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::net::node::Node;
use crate::net::request;
use crate::net::subscription::Subscription;
use crate::protocol::holder;
use crate::protocol::keys::{self, Space};
use crate::protocol::{reply, scripts};
use crate::report::NodeOutcome;

/// Channel name prefix; the client id follows.

#[derive(Debug, Default)]
struct Interest {
    listeners: Vec<(u64, Arc<Signal>)>,
    last_token: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Notifier {
    nodes: Vec<Arc<Node>>,
    /// The client's collector, which waits for the `LEAVE` rounds.
    background: Arc<Background>,
    /// This client's id in waiting lists.
    id: String,
    /// The client's key prefix, which its waiting lists and channel start with.
    prefix: String,
    channel: String,
    node_timeout: Duration,
    connect_timeout: Duration,
    interests: Mutex<HashMap<String, Interest>>,
    next_id: AtomicU64,
    /// Whether subscriptions were ever started: a contended wait then listens from the
    /// start (see `Waiting::start`).
    started: AtomicBool,
    /// Set by [`Notifier::stop`]: no subscriber task is started again.
    stopped: AtomicBool,
    /// Per node: is its subscriber task alive? Cleared by the task on its way out, however
    /// it ends (its runtime dropped, cancelled, a panic), so the next waiter starts another.
    running: Vec<AtomicBool>,
    /// Per node: is our subscription confirmed? A waiting list entry is only made on such
    /// a node (see [`Notifier::wake_node`]), so a release there never pops our id without
    /// us hearing of it.
    subscribed: Vec<AtomicBool>,
    /// Number of nodes with a confirmed subscription.
    ready: watch::Sender<usize>,
    /// Dropped with the notifier, which ends the subscriber tasks.
    shutdown: watch::Sender<()>,
}

/// How a waiter is told to try again: a release of its keys, or its waiting-list node
/// changed ([`Signal::moved`]).
#[derive(Debug, Default)]
struct Signal {
    notify: Notify,
    /// Set when the client's waiting-list node changed (a subscription came up or dropped):
    /// the waiter is in a list that releases no longer pop, and must list again where they
    /// do. Not a wake-up by a release: the next attempt is an ordinary (gated) one.
    moved: AtomicBool,
}

/// How [`Registration::wake_or`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake<T> {
    /// A release of the keys was announced to this client.
    Woken,
    /// The client's waiting-list node changed: list again where releases pop.
    Moved,
    /// The other future completed first, with this.
    Other(T),
}

/// A waiter's interest in some keys; withdrawn on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    notifier: Arc<Notifier>,
    id: u64,
    keys: Arc<[String]>,
    signal: Arc<Signal>,
    /// The nodes whose waiting lists may hold this client for these keys: those it sent an
    /// enqueuing request to, less the one where it acquired (the acquire script took it
    /// off there). Left when the registration ends.
    listed: Vec<usize>,
}

impl Registration {
    /// Completes when a release of one of the keys was announced since the last call, or
    /// (while waiting here) when the client's waiting-list node changed: `true` then (see
    /// [`Signal::moved`]).
    /// The future is registered when this is called, not when first polled, so a change of
    /// the waiting-list node between the call and the first poll is not missed; a change
    /// before the call is forgotten (the caller compares the node its attempt used with the
    /// current one after this call).
    pub(crate) fn notified(&self) -> impl Future<Output = bool> + '_ {
        self.signal.moved.store(false, Ordering::Release);
        let notified = self.signal.notify.notified();
        async move {
            notified.await;
            self.signal.moved.swap(false, Ordering::AcqRel)
        }
    }

    /// Waits for a release of the keys announced to this client, while `other` runs:
    /// [`Wake::Moved`] at once when the client's waiting-list node is no longer `listed_on`
    /// (the node its last request listed it on) or changes while it waits (releases then
    /// pop the new node's list, where the next request lists it), [`Wake::Woken`] on a
    /// release, else what `other` gives.
    pub(crate) async fn wake_or<T>(
        &self,
        listed_on: Option<usize>,
        other: impl Future<Output = T>,
    ) -> Wake<T> {
        // Registered before the check, so a change right after it still wakes us.
        let notified = self.notified();
        if self.notifier.wake_node() != listed_on {
            metrics::wait_event("moved");
            return Wake::Moved;
        }
        tokio::select! {
            moved = notified => {
                let wake = if moved { Wake::Moved } else { Wake::Woken };
                metrics::wait_event(if moved { "moved" } else { "woken" });
                wake
            }
            out = other => Wake::Other(out),
        }
    }

    /// Notes that a request about to be sent may put this client in the waiting lists of
    /// `node`.
    pub(crate) fn listing_on(&mut self, node: usize) {
        if !self.listed.contains(&node) {
            self.listed.push(node);
        }
    }

    /// Whether another registration of this client listens for one of these keys: another
    /// task of the client still waits for them.
    pub(crate) fn shared(&self) -> bool {
        let interests = self.notifier.lock();
        (self.keys.iter())
            .filter_map(|key| interests.get(key))
            .any(|interest| interest.listeners.iter().any(|(id, _)| *id != self.id))
    }

    /// Notes that the acquire script set the keys on `node`, which took this client off
    /// its waiting lists there.
    pub(crate) fn acquired_on(&mut self, node: usize) {
        self.listed.retain(|&n| n != node);
    }

    /// An attempt that listed this client on `list_node` won, and `vote` is what that node
    /// answered: a yes (or an answer still pending, settled by [`Notifier::settle`]) means
    /// its script set the keys there and took this client off the lists.
    pub(crate) fn won_with(&mut self, list_node: usize, vote: Option<&NodeOutcome>) {
        if matches!(vote, Some(NodeOutcome::Acquired | NodeOutcome::Pending)) {
            self.acquired_on(list_node);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        {
            let mut interests = self.notifier.lock();
            for key in self.keys.iter() {
                if let Some(interest) = interests.get_mut(key) {
                    interest.listeners.retain(|(id, _)| *id != self.id);
                    if interest.listeners.is_empty() {
                        interests.remove(key);
                    }
                }
            }
        }
        if !self.listed.is_empty() {
            // Gave up, cancelled, or acquired without the waiting-list node's answer: leave
            // the lists that may still hold us, or the next release there would wake this
            // client instead of one that still waits (costing that waiter a poll interval).
            self.notifier.leave(Arc::clone(&self.keys), &self.listed);
        }
    }
}

/// A new client's id in waiting lists: random, then, unless `holder` (the client's
/// description, see [`holder::describe`]) is empty, who the client is and since when, in
/// the format of a lock value, so that `status` can say who waits.
fn client_id(holder: &str) -> String {
    let random = uuid::Uuid::from_bytes(rand::random::<[u8; 16]>())
        .simple()
        .to_string();
    if holder.is_empty() {
        return random;
    }
    holder::value(&random, holder::unix_ms(SystemTime::now()), holder)
}

impl Notifier {
    pub(crate) fn new(
        nodes: Vec<Arc<Node>>,
        background: Arc<Background>,
        connect_timeout: Duration,
        node_timeout: Duration,
        prefix: String,
        holder: &str,
    ) -> Self {
        let id = client_id(holder);
        Notifier {
            subscribed: nodes.iter().map(|_| AtomicBool::new(false)).collect(),
            running: nodes.iter().map(|_| AtomicBool::new(false)).collect(),
            nodes,
            background,
            channel: keys::wake_channel(&prefix, &id),
            prefix,
            id,
            node_timeout,
            connect_timeout,
            interests: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            started: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            ready: watch::channel(0).0,
            shutdown: watch::channel(()).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Interest>> {
        self.interests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the subscriber tasks for good (client shutdown): they are never started again.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.started.store(true, Ordering::Release);
        self.shutdown.send_replace(());
    }

    /// Whether the subscriptions were started once (waiters for keys known to be contended
    /// then listen from the start; a subscriber that died since is started again by
    /// [`Notifier::register`]).
    pub(crate) fn is_started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Registers interest in `keys`, starting the subscriber tasks that do not run (all of
    /// them on first use).
    pub(crate) fn register(self: &Arc<Self>, keys: &Arc<[String]>) -> Registration {
        self.start();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(Signal::default());
        let mut interests = self.lock();
        for key in keys.iter() {
            interests
                .entry(key.clone())
                .or_default()
                .listeners
                .push((id, Arc::clone(&signal)));
        }
        Registration {
            notifier: Arc::clone(self),
            id,
            keys: Arc::clone(keys),
            signal,
            listed: Vec::new(),
        }
    }

    /// After an attempt won its majority before the waiting-list node `node` answered:
    /// waits for that answer (`reply`, the acquire script's or a woken client's plain
    /// `SET`, bounded by its round's deadline) in the background, and leaves the lists there
    /// unless the script set the keys, which took this client off them (a plain `SET` lists
    /// nobody).
    pub(crate) fn settle(self: &Arc<Self>, keys: Arc<[String]>, node: usize, mut reply: Round) {
        let notifier = Arc::clone(self);
        self.background.spawn(async move {
            let collected = answers::collect(
                &notifier.nodes,
                &mut reply,
                |_, value| match value {
                    // A woken client's plain `SET` (see `Enqueue::lists`), which lists
                    // nobody: the release that woke us took us off the list already.
                    Value::Okay | Value::Nil => NodeOutcome::Acquired,
                    value => match reply::acquire_reply(value) {
                        Ok(acquired) if acquired.set => NodeOutcome::Acquired,
                        Ok(_) => NodeOutcome::HeldByOther,
                        Err(failed) => failed,
                    },
                },
                |o| *o == NodeOutcome::Acquired,
                Stop::AtEnd,
            )
            .await;
            let set_there = collected
                .outcomes
                .get(node)
                .is_some_and(|(o, _)| *o == NodeOutcome::Acquired);
            if !set_there {
                notifier.leave(keys, &[node]);
            }
        });
    }

    /// This client's id in waiting lists.
    pub(crate) fn client_id(&self) -> &str {
        &self.id
    }

    /// Removes this client from the waiting lists of `keys` on the nodes `which`, in the
    /// background, unless another local task is still interested in one of them.
    fn leave(&self, keys: Arc<[String]>, which: &[usize]) {
        if keys.iter().any(|k| self.lock().contains_key(k)) {
            return;
        }
        metrics::wait_event("left");
        // Release notifications are off with a Cluster member: the names have no slot tag.
        let space = Space::flat(&self.prefix);
        let call = Arc::new(Call::script(&scripts::LEAVE, space, &keys).arg(&self.id));
        let pending = which
            .iter()
            .filter_map(|&i| self.nodes.get(i).map(|node| request::send(i, node, &call)));
        Round::new(pending, self.node_timeout).hand_to(&self.background);
    }

    /// The node whose waiting lists this client joins, and whose lists its releases pop:
    /// the first in configuration order where our subscription stands. Clients configured
    /// alike agree on it, so each release pops exactly one list and wakes exactly one
    /// client; the other nodes get the plain compare-and-delete.
    pub(crate) fn wake_node(&self) -> Option<usize> {
        self.subscribed
            .iter()
            .position(|s| s.load(Ordering::Acquire))
    }

    fn set_subscribed(&self, index: usize, on: bool) {
        let before = self.wake_node();
        let changed = self
            .subscribed
            .get(index)
            .is_some_and(|flag| flag.swap(on, Ordering::AcqRel) != on);
        if changed {
            self.ready.send_modify(|r| {
                *r = if on { *r + 1 } else { r.saturating_sub(1) };
            });
        }
        if before.is_some() && self.wake_node() != before {
            self.moved();
        }
    }

    /// The waiting-list node changed: waiters listed on the old one would not be woken
    /// (releases pop only the releasing client's list node, the same for clients whose
    /// subscriptions stand alike). Tells every waiter that is waiting for a wake-up right
    /// now to try again, which lists it on the new node; one that is not waiting lists there
    /// with its next attempt anyway, so nothing is stored for it.
    fn moved(&self) {
        for interest in self.lock().values() {
            for (_, signal) in &interest.listeners {
                signal.moved.store(true, Ordering::Release);
                signal.notify.notify_waiters();
            }
        }
    }

    /// Waits until every node confirmed its subscription, for at most four node timeouts
    /// and `remaining`. A waiter that just started listening waits for all of them: the
    /// wake node is the first node where it listens, and one that comes up later would move
    /// it to another waiting list than the one clients configured alike use.
    pub(crate) async fn wait_ready(&self, remaining: Duration) {
        let (count, bound) = (self.nodes.len(), self.node_timeout.saturating_mul(4));
        let mut ready = self.ready.subscribe();
        let waiting = ready.wait_for(|n| *n >= count);
        let _ = tokio::time::timeout(bound.min(remaining), waiting).await;
    }

    /// Starts a subscriber task for every node that has none running.
    fn start(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime: stay on polling; a later call may start them.
            return;
        };
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        self.started.store(true, Ordering::Release);
        for (index, running) in self.running.iter().enumerate() {
            if running.swap(true, Ordering::AcqRel) {
                continue;
            }
            let alive = Alive {
                notifier: Arc::downgrade(self),
                index,
            };
            handle.spawn(subscriber(alive, self.shutdown.subscribe()));
        }
    }

    /// Handles a wake-up message `<token>:<key>`.
    fn dispatch(&self, message: &str) {
        let Some((token, key)) = message.split_once(':') else {
            return;
        };
        let mut interests = self.lock();
        let Some(interest) = interests.get_mut(key) else {
            return;
        };
        // Each node announces the same release: wake the waiters once per token.
        if interest.last_token.as_deref() == Some(token) {
            return;
        }
        interest.last_token = Some(token.to_owned());
        for (_, signal) in &interest.listeners {
            signal.notify.notify_one();
        }
    }
}

/// A subscriber task's mark on its notifier, for as long as the task lives: dropped with
/// the task however it ends, it withdraws the node's subscription (so no waiting list entry
/// is made where nobody listens) and lets the next waiter start a new task.
struct Alive {
    notifier: Weak<Notifier>,
    index: usize,
}

impl Drop for Alive {
    fn drop(&mut self) {
        if let Some(n) = self.notifier.upgrade() {
            n.set_subscribed(self.index, false);
            if let Some(running) = n.running.get(self.index) {
                running.store(false, Ordering::Release);
            }
        }
    }
}

/// One node's subscription, reconnecting with backoff until the notifier is dropped.
async fn subscriber(alive: Alive, mut shutdown: watch::Receiver<()>) {
    let notifier = alive.notifier.clone();
    let index = alive.index;
    const MIN_BACKOFF: Duration = Duration::from_millis(50);
    const MAX_BACKOFF: Duration = Duration::from_secs(2);
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some((node, channel, timeout)) = notifier.upgrade().and_then(|n| {
            let node = n.nodes.get(index).cloned()?;
            Some((node, n.channel.clone(), n.connect_timeout))
        }) else {
            return;
        };
        let connected = tokio::time::timeout(timeout, Subscription::open(&node, &channel)).await;
        if let Ok(Ok(mut subscription)) = connected {
            backoff = MIN_BACKOFF;
            if let Some(n) = notifier.upgrade() {
                n.set_subscribed(index, true);
            }
            loop {
                tokio::select! {
                    msg = subscription.next() => {
                        let Some(msg) = msg else { break };
                        let Some(n) = notifier.upgrade() else { return };
                        if let Ok(message) = msg.get_payload::<String>() {
                            n.dispatch(&message);
                        }
                    }
                    _ = shutdown.changed() => return,
                }
            }
            if let Some(n) = notifier.upgrade() {
                n.set_subscribed(index, false);
            }
            tracing::debug!(
                node = node.name(),
                "release subscription ended; reconnecting"
            );
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_wake_per_release_and_clean_up() {
        let notifier = Arc::new(Notifier::new(
            Vec::new(),
            Arc::new(Background::new(Vec::new())),
            Duration::from_millis(10),
            Duration::from_millis(10),
            String::new(),
            "",
        ));
        let keys: Arc<[String]> = vec!["k:1".to_owned()].into();
        let mut registration = notifier.register(&keys);
        // Three nodes announce the same release: one stored wake-up.
        for _ in 0..3 {
            notifier.dispatch("t1:k:1");
        }
        registration.notified().await;
        let again = tokio::time::timeout(Duration::from_millis(20), registration.notified()).await;
        assert!(again.is_err(), "duplicates of one release wake only once");
        // A new release wakes again; other keys and channels do not.
        notifier.dispatch("t2:other");
        notifier.dispatch("garbage");
        notifier.dispatch("t2:k:1");
        registration.notified().await;
        registration.listing_on(0);
        registration.acquired_on(0);
        drop(registration);
        assert!(notifier.lock().is_empty());
    }
}
