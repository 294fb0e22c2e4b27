//! No panics on extreme values: every public function and option that
//! takes a duration or a count accepts its whole range. "Forever" means forever; a value
//! that cannot work is an [`Error::Config`] saying why. Driven against real nodes, with a
//! panic hook that catches panics in background tasks too (the auto-extender's, say),
//! which tokio would otherwise swallow.

mod common;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::Duration;

use common::{Cluster, unique};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use quorum_lock::{AutoExtend, Error, Redlock, RedlockBuilder};

/// Panics seen in any thread since the hook was installed, with their messages.
static PANICS: AtomicUsize = AtomicUsize::new(0);
static PANIC_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut messages) = PANIC_MESSAGES.lock() {
                messages.push(info.to_string());
            }
            default(info);
        }));
    });
}

fn panics() -> (usize, Vec<String>) {
    let messages = PANIC_MESSAGES.lock().map(|m| m.clone()).unwrap_or_default();
    (PANICS.load(Ordering::SeqCst), messages)
}

/// One cluster for every case of this file.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        Cluster::stop_at_exit(&CLUSTER);
        Cluster::start(3)
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Durations at and around the edges, and anywhere in between.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => Just(Duration::ZERO),
        1 => Just(Duration::from_nanos(1)),
        1 => Just(Duration::from_micros(999)),
        1 => Just(Duration::from_millis(1)),
        1 => Just(Duration::from_millis(300)),
        1 => Just(Duration::from_secs(30)),
        1 => Just(Duration::from_secs(10 * 365 * 24 * 3600)),
        1 => Just(Duration::from_millis(u64::MAX)),
        1 => Just(Duration::from_secs(u64::MAX)),
        1 => Just(Duration::MAX),
        1 => any::<u64>().prop_map(Duration::from_nanos),
        1 => any::<u64>().prop_map(Duration::from_millis),
        // Ordinary values, so most cases get past `build` and the lock.
        6 => (1u64..5_000).prop_map(Duration::from_millis),
    ]
}

/// An option left at its default two times in three.
fn maybe<T: std::fmt::Debug + Clone + 'static>(
    value: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Option<T>> {
    prop_oneof![2 => Just(None), 1 => value.prop_map(Some)]
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(1), Just(2), Just(u32::MAX), any::<u32>()]
}

fn factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(0.0),
        Just(f64::MIN_POSITIVE),
        Just(0.01),
        Just(0.5),
        Just(1.0 - f64::EPSILON),
        Just(1.0),
        Just(f64::MAX),
        any::<f64>(),
    ]
}

/// Every builder option that takes a duration, a count or a factor.
#[derive(Debug, Clone)]
struct Options {
    default_ttl: Option<Duration>,
    wait: Option<Duration>,
    node_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    retry_delay: Option<Duration>,
    max_retry_delay: Option<Duration>,
    drift_factor: Option<f64>,
    max_attempts: Option<u32>,
}

fn options() -> impl Strategy<Value = Options> {
    (
        (
            maybe(duration()),
            maybe(duration()),
            maybe(duration()),
            maybe(duration()),
        ),
        (
            maybe(duration()),
            maybe(duration()),
            maybe(factor()),
            maybe(count()),
        ),
    )
        .prop_map(
            |(
                (default_ttl, wait, node_timeout, connect_timeout),
                (retry_delay, max_retry_delay, drift_factor, max_attempts),
            )| Options {
                default_ttl,
                wait,
                node_timeout,
                connect_timeout,
                retry_delay,
                max_retry_delay,
                drift_factor,
                max_attempts,
            },
        )
}

/// The arguments of one case's calls.
#[derive(Debug, Clone)]
struct Calls {
    lock_ttl: Duration,
    lock_wait: Option<Duration>,
    lock_attempts: Option<u32>,
    extend_ttl: Duration,
    max_extensions: Option<u32>,
    max_hold: Option<Duration>,
}

fn calls() -> impl Strategy<Value = Calls> {
    (
        duration(),
        maybe(duration()),
        maybe(count()),
        duration(),
        maybe(count()),
        maybe(duration()),
    )
        .prop_map(
            |(lock_ttl, lock_wait, lock_attempts, extend_ttl, max_extensions, max_hold)| Calls {
                lock_ttl,
                lock_wait,
                lock_attempts,
                extend_ttl,
                max_extensions,
                max_hold,
            },
        )
}

fn build(options: &Options) -> quorum_lock::Result<Redlock> {
    let mut b: RedlockBuilder = Redlock::builder()
        .nodes(cluster().urls())
        .restart_quarantine(false);
    if let Some(d) = options.default_ttl {
        b = b.default_ttl(d);
    }
    if let Some(d) = options.wait {
        b = b.wait(d);
    }
    if let Some(d) = options.node_timeout {
        b = b.node_timeout(d);
    }
    if let Some(d) = options.connect_timeout {
        b = b.connect_timeout(d);
    }
    if let Some(d) = options.retry_delay {
        b = b.retry_delay(d);
    }
    if let Some(d) = options.max_retry_delay {
        b = b.max_retry_delay(d);
    }
    if let Some(f) = options.drift_factor {
        b = b.drift_factor(f);
    }
    if let Some(n) = options.max_attempts {
        b = b.max_attempts(n);
    }
    b.build()
}

/// An outcome the caller can act on: success, or an error of a documented kind with a
/// message. Anything else (a panic) fails the case through the hook.
fn acceptable(result: &quorum_lock::Result<impl Sized>) -> Result<(), TestCaseError> {
    match result {
        Ok(_) => Ok(()),
        Err(Error::Config(msg)) => {
            prop_assert!(!msg.is_empty());
            Ok(())
        }
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            Ok(())
        }
    }
}

/// How long one call of a case may run: a wait of "forever" on a node that never answers
/// in time (a 1 ns node timeout, say) is correct and is cut here; the cut drops the call,
/// which must leave nothing behind either.
const CALL_BOUND: Duration = Duration::from_millis(1_500);

async fn bounded<T>(call: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(CALL_BOUND, call).await.ok()
}

/// One case: build with `options`, then lock, extend, auto-extend (on a short lock) and
/// release with `calls`.
async fn run_case(options: Options, calls: Calls, resource: &str) -> Result<(), TestCaseError> {
    let client = match build(&options) {
        Ok(client) => {
            BUILT.fetch_add(1, Ordering::Relaxed);
            client
        }
        Err(e) => {
            prop_assert!(matches!(e, Error::Config(_)), "build: {e:?}");
            return Ok(());
        }
    };
    let mut request = client.lock(resource, calls.lock_ttl);
    if let Some(wait) = calls.lock_wait {
        request = request.wait(wait);
    }
    if let Some(attempts) = calls.lock_attempts {
        request = request.max_attempts(attempts);
    }
    if let Some(locked) = bounded(request.into_future()).await {
        acceptable(&locked)?;
        if let Ok(guard) = locked {
            LOCKED.fetch_add(1, Ordering::Relaxed);
            if let Some(extended) = bounded(guard.extend(calls.extend_ttl)).await {
                acceptable(&extended)?;
            }
            if let Some(released) = bounded(guard.release()).await {
                acceptable(&released)?;
            }
        }
    }
    if let Some(tried) = bounded(client.try_lock(resource, calls.extend_ttl)).await {
        acceptable(&tried)?;
        if let Ok(Some(guard)) = tried {
            drop(guard);
        }
    }
    let mut many = client
        .lock_many(
            [resource.to_owned(), format!("{resource}:b")],
            calls.lock_ttl,
        )
        .fencing();
    if let Some(wait) = calls.lock_wait {
        many = many.wait(wait);
    }
    if let Some(locked) = bounded(many.into_future()).await {
        acceptable(&locked)?;
        if let Ok(guard) = locked {
            let _ = bounded(guard.release()).await;
        }
    }
    if let Some(ran) = bounded(client.run(resource, calls.extend_ttl, |_| async {})).await {
        acceptable(&ran)?;
    }

    // Auto-extension with the case's budget, on a lock short enough to need extending.
    let mut policy = AutoExtend::new();
    if let Some(n) = calls.max_extensions {
        policy = policy.max_extensions(n);
    }
    if let Some(hold) = calls.max_hold {
        policy = policy.max_hold(hold);
    }
    let short = client
        .lock(resource, Duration::from_millis(300))
        .wait(Duration::from_millis(300))
        .auto_extend(policy);
    if let Some(Ok(guard)) = bounded(short.into_future()).await {
        AUTO_EXTENDED.fetch_add(1, Ordering::Relaxed);
        // Until the extender extended once, or the lock ran out (budget spent).
        let first = guard.deadline();
        let signal = guard.lost_signal();
        let _ = bounded(async {
            while guard.deadline() == first && !signal.is_lost() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let _ = bounded(guard.release()).await;
    }
    let _ = bounded(client.connect()).await;
    let _ = bounded(client.status(resource)).await;
    Ok(())
}

/// Keys of `resource` still on the nodes, waiting (bounded) for releases in flight.
async fn keys_left(resource: &str) -> Vec<(usize, String)> {
    let pattern = format!("*{resource}*");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        // Fencing counters outlive locks by design.
        let mut left = cluster().keys_everywhere(&pattern);
        left.retain(|(_, key)| !key.contains("fence"));
        if left.is_empty() || tokio::time::Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How far the cases got, for the summary line.
static BUILT: AtomicUsize = AtomicUsize::new(0);
static LOCKED: AtomicUsize = AtomicUsize::new(0);
static AUTO_EXTENDED: AtomicUsize = AtomicUsize::new(0);

/// Every option and argument, extreme values included: no panic, success or a clear
/// error, and no key left behind.
#[test]
fn extreme_options_and_arguments_never_panic() {
    count_panics();
    let config = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&(options(), calls()), |(options, calls)| {
        let (before, _) = panics();
        let resource = unique("extremes");
        runtime().block_on(async {
            run_case(options, calls, &resource).await?;
            let left = keys_left(&resource).await;
            prop_assert!(left.is_empty(), "keys left: {left:?}");
            Ok(())
        })?;
        let (after, messages) = panics();
        prop_assert_eq!(after, before, "panics: {:?}", messages);
        Ok(())
    });
    eprintln!(
        "256 cases: {} built a client, {} locked, {} auto-extended",
        BUILT.load(Ordering::Relaxed),
        LOCKED.load(Ordering::Relaxed),
        AUTO_EXTENDED.load(Ordering::Relaxed)
    );
    result.unwrap();
}

/// `wait(Duration::MAX)` right after this client handed the lock to a waiting client: the
/// courtesy wait computed `started + wait` and panicked.
#[test]
fn waiting_forever_right_after_a_hand_off() {
    count_panics();
    let (before, _) = panics();
    let resource = unique("extremes-handoff");
    runtime().block_on(async {
        let urls = cluster().urls();
        let build = || {
            Redlock::builder()
                .nodes(&urls)
                .restart_quarantine(false)
                .node_timeout(Duration::from_millis(200))
                .build()
                .unwrap()
        };
        let (first, second) = (build(), build());
        let held = first
            .lock(&resource, Duration::from_secs(30))
            .await
            .unwrap();
        let waiter = {
            let second = second.clone();
            let resource = resource.clone();
            tokio::spawn(async move {
                second
                    .lock(&resource, Duration::from_secs(30))
                    .wait(Duration::from_secs(20))
                    .await
            })
        };
        let listed = || {
            cluster()
                .nodes
                .iter()
                .any(|n| !n.keys(&format!("*waiters*{resource}*")).is_empty())
        };
        common::eventually(Duration::from_secs(10), "the waiter is listed", listed).await;
        // The release wakes the waiter: this client then holds back on its next lock, for
        // a few milliseconds, so that lock is polled first, at once. Which of the two gets
        // the lock first is a race (the hold-back is a courtesy, not a promise); each
        // releases at once, so both must get it, in either order.
        held.release().await.unwrap();
        let again = async {
            let guard = (first.lock(&resource, Duration::from_secs(30)))
                .wait(Duration::MAX)
                .await
                .expect("acquired again");
            guard.release().await.unwrap();
        };
        let other = async {
            let handed = waiter.await.unwrap().expect("the woken waiter acquired");
            handed.release().await.unwrap();
        };
        tokio::time::timeout(Duration::from_secs(20), async {
            tokio::join!(again, other)
        })
        .await
        .expect("both acquired, one after the other");
    });
    let (after, messages) = panics();
    assert_eq!(after, before, "panics: {messages:?}");
}

/// `AutoExtend::max_hold(Duration::MAX)`: "hold for ever" keeps extending; the extender
/// task computed `acquired + max_hold` and died, and the lock silently ran out.
#[test]
fn auto_extend_for_ever() {
    count_panics();
    let (before, _) = panics();
    let resource = unique("extremes-hold");
    runtime().block_on(async {
        let client = Redlock::builder()
            .nodes(cluster().urls())
            .restart_quarantine(false)
            .build()
            .unwrap();
        let ttl = Duration::from_millis(400);
        let guard = client
            .lock(&resource, ttl)
            .auto_extend(AutoExtend::new().max_hold(Duration::MAX))
            .await
            .unwrap();
        // Three extensions: the lock outlives its TTL several times over.
        let mut deadline = guard.deadline();
        for _ in 0..3 {
            let extended = tokio::time::timeout(Duration::from_secs(5), async {
                while guard.deadline() == deadline && guard.is_valid() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            assert!(
                extended.is_ok() && guard.is_valid(),
                "extended, still valid"
            );
            deadline = guard.deadline();
        }
        guard.release().await.unwrap();
    });
    let (after, messages) = panics();
    assert_eq!(after, before, "panics: {messages:?}");
}

/// The builder's duration options at `Duration::MAX`: either a client that works ("for
/// ever") or a configuration error naming the problem, never a panic.
#[test]
fn builder_durations_at_their_maximum() {
    count_panics();
    let (before, _) = panics();
    let urls = cluster().urls();
    let base = || Redlock::builder().nodes(&urls).restart_quarantine(false);
    let err = base().node_timeout(Duration::MAX).build().unwrap_err();
    assert!(err.to_string().contains("node timeout"), "{err}");
    runtime().block_on(async {
        let client = base().connect_timeout(Duration::MAX).build().unwrap();
        client.connect().await.expect("connected");
        let client = base()
            .wait(Duration::MAX)
            .retry_delay(Duration::MAX)
            .max_retry_delay(Duration::MAX)
            .build()
            .unwrap();
        let guard = client
            .lock(unique("extremes-builder"), Duration::from_secs(5))
            .await
            .unwrap();
        guard.release().await.unwrap();
    });
    let (after, messages) = panics();
    assert_eq!(after, before, "panics: {messages:?}");
}

/// The node timeout is at most `MAX_NODE_TIMEOUT` (500 ms): restart quarantine relies on
/// two clients' rounds together lasting less than a second.
#[test]
fn node_timeout_above_half_a_second_is_a_config_error() {
    let urls = cluster().urls();
    let base = || {
        Redlock::builder()
            .nodes(&urls)
            .default_ttl(Duration::from_secs(5))
    };
    assert_eq!(RedlockBuilder::MAX_NODE_TIMEOUT, Duration::from_millis(500));
    base()
        .node_timeout(RedlockBuilder::MAX_NODE_TIMEOUT)
        .build()
        .expect("500 ms is accepted");
    let err = base()
        .node_timeout(Duration::from_millis(501))
        .build()
        .unwrap_err();
    assert!(matches!(err, quorum_lock::Error::Config(_)), "{err:?}");
    assert!(err.to_string().contains("above 500ms"), "{err}");
}
