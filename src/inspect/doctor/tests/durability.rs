//! Tests of the durability findings.

use super::*;

#[test]
fn persistence() {
    // appendonly, appendfsync, expected finding.
    type Case = (
        Option<bool>,
        Option<&'static str>,
        Option<(FindingKind, Severity)>,
    );
    let table: [Case; 7] = [
        (Some(true), Some("always"), None),
        (Some(true), Some("everysec"), Some((K::WeakFsync, I))),
        (Some(true), Some("no"), Some((K::WeakFsync, W))),
        (Some(true), Some("sometimes"), Some((K::FsyncUnknown, I))),
        (Some(true), None, Some((K::FsyncUnknown, I))),
        (Some(false), Some("always"), Some((K::NoPersistence, W))),
        (None, None, None),
    ];
    for (appendonly, fsync, expected) in table {
        let mut infos = set(3);
        infos[1].appendonly = appendonly;
        infos[1].appendfsync = fsync.map(str::to_owned);
        let mut expected: Vec<_> = expected.into_iter().map(|(k, s)| (k, s, node(1))).collect();
        // Off on one node and on on the others is also a mismatch across the set.
        if appendonly == Some(false) {
            expected.push((K::PersistenceMismatch, W, None));
        }
        assert_eq!(
            kinds(&infos, &limits()),
            expected,
            "{appendonly:?} {fsync:?}"
        );
    }
}

#[test]
fn known_issues_by_version_and_persistence() {
    // kind, version, appendonly, appendfsync, expected severity.
    type Case = (
        ServerKind,
        &'static str,
        Option<bool>,
        Option<&'static str>,
        Option<Severity>,
    );
    let table: [Case; 11] = [
        (
            ServerKind::Redis,
            "6.2.14",
            Some(true),
            Some("always"),
            Some(I),
        ),
        (
            ServerKind::Redis,
            "6.0.20",
            Some(true),
            Some("always"),
            Some(I),
        ),
        // Only `always` promises a write is on disk when acknowledged.
        (
            ServerKind::Redis,
            "6.2.14",
            Some(true),
            Some("everysec"),
            None,
        ),
        (
            ServerKind::Redis,
            "6.2.14",
            Some(false),
            Some("always"),
            None,
        ),
        (
            ServerKind::Redis,
            "7.0.0",
            Some(true),
            Some("always"),
            Some(W),
        ),
        (
            ServerKind::Redis,
            "7.0.4",
            Some(true),
            Some("everysec"),
            Some(W),
        ),
        (ServerKind::Redis, "7.0.4", None, None, None),
        (ServerKind::Redis, "7.0.5", Some(true), Some("always"), None),
        (
            ServerKind::Redis,
            "7.0.15",
            Some(true),
            Some("always"),
            None,
        ),
        (
            ServerKind::Valkey,
            "7.2.4",
            Some(true),
            Some("always"),
            None,
        ),
        (
            ServerKind::Redis,
            "unknown",
            Some(true),
            Some("always"),
            None,
        ),
    ];
    for (kind, version, appendonly, fsync, expected) in table {
        let mut infos = set(3);
        infos[2].server_kind = Some(kind);
        infos[2].server_version = Some(version.into());
        infos[2].appendonly = appendonly;
        infos[2].appendfsync = fsync.map(str::to_owned);
        let got: Vec<_> = kinds(&infos, &limits())
            .into_iter()
            .filter(|(k, _, _)| *k == K::KnownIssue)
            .collect();
        let want: Vec<_> = expected
            .map(|s| (K::KnownIssue, s, node(2)))
            .into_iter()
            .collect();
        assert_eq!(got, want, "{kind} {version} {appendonly:?} {fsync:?}");
    }
    let mut infos = set(3);
    infos[0].server_kind = Some(ServerKind::Redis);
    infos[0].server_version = Some("7.0.2".into());
    let f = findings(&infos, 2, &limits());
    assert_eq!(f[0].kind, K::KnownIssue);
    assert!(
        f[0].message.starts_with("Redis 7.0.2: the directory"),
        "{}",
        f[0].message
    );
    assert!(
        f[0].message.contains("redis/redis#10737"),
        "{}",
        f[0].message
    );
    assert!(
        f[0].message.contains("redis/redis#11004"),
        "{}",
        f[0].message
    );
    infos[0].server_version = Some("7.0.3".into());
    let f = findings(&infos, 2, &limits());
    assert!(
        !f[0].message.contains("#10737"),
        "fixed in 7.0.3: {}",
        f[0].message
    );
}

#[test]
fn persistence_mismatch_across_the_set() {
    let mismatch = |infos: &[NodeInfo]| {
        findings(infos, 2, &limits())
            .into_iter()
            .filter(|f| f.kind == K::PersistenceMismatch)
            .collect::<Vec<_>>()
    };
    let mut infos = set(3);
    assert_eq!(mismatch(&infos), vec![], "all on");
    for info in &mut infos {
        info.appendonly = Some(false);
    }
    assert_eq!(mismatch(&infos), vec![], "all off");
    infos[1].appendonly = Some(true);
    let found = mismatch(&infos);
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].severity, found[0].node.as_deref()), (W, None));
    assert!(
        found[0]
            .message
            .contains("on at 10.0.0.1:6379 but off at 10.0.0.0:6379, 10.0.0.2:6379"),
        "{}",
        found[0].message
    );
    // Unknown and unreachable nodes are not compared.
    infos[0].appendonly = None;
    infos[2].reachable = false;
    assert_eq!(mismatch(&infos), vec![]);
}

#[test]
fn a_majority_that_can_lose_its_data_together() {
    let found = |infos: &[NodeInfo]| {
        findings(infos, safety::majority(infos.len()), &limits())
            .into_iter()
            .filter(|f| f.kind == K::MajorityMemoryLoss)
            .collect::<Vec<_>>()
    };
    // appendonly, appendfsync, save: whether the node can lose its data.
    let volatile = |info: &mut NodeInfo, how: u8| match how {
        0 => (info.appendonly, info.save) = (Some(false), Some(String::new())),
        1 => (info.appendonly, info.save) = (Some(false), Some("3600 1".into())),
        2 => (info.appendonly, info.save) = (Some(false), None),
        _ => (info.appendonly, info.appendfsync) = (Some(true), Some("no".into())),
    };
    let mut infos = set(5);
    assert_eq!(found(&infos), vec![], "all durable");
    volatile(&mut infos[0], 0);
    volatile(&mut infos[3], 3);
    assert_eq!(found(&infos), vec![], "a minority");
    // everysec loses at most a second: not counted.
    infos[4].appendfsync = Some("everysec".into());
    assert_eq!(found(&infos), vec![], "everysec");
    volatile(&mut infos[2], 1);
    let f = found(&infos);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].severity, f[0].node.as_deref()), (W, None));
    assert_eq!(
        f[0].message,
        "3 of 5 nodes, a majority, can lose their data together: 10.0.0.0:6379 (no \
         persistence at all), 10.0.0.2:6379 (RDB snapshots only), 10.0.0.3:6379 \
         (appendfsync no); a restart of all of them at once (a power cut, a crash) forgets \
         the locks in force, and restart quarantine cannot tell (the nodes look new): a lock \
         may be granted twice until the TTLs of the lost locks have run out (fencing tokens \
         keep their order: they carry the clock)"
    );
    assert!(
        f[0].fix
            .starts_with("give at least 3 of the 5 nodes appendonly yes with appendfsync always"),
        "{}",
        f[0].fix
    );
    // Unreachable nodes and unread settings are not counted.
    infos[2].reachable = false;
    assert_eq!(found(&infos), vec![], "one of three unreachable");
    infos[2].reachable = true;
    infos[2].appendonly = None;
    assert_eq!(found(&infos), vec![], "one of three unknown");
    // appendonly no with snapshot settings unknown (CONFIG refused) counts.
    volatile(&mut infos[2], 2);
    assert!(
        found(&infos)[0]
            .message
            .contains("10.0.0.2:6379 (appendonly no)")
    );
    // One node: it alone is the majority.
    let mut one = set(1);
    volatile(&mut one[0], 0);
    assert!(
        found(&one)[0]
            .fix
            .starts_with("give at least 1 of the 1 nodes")
    );
}
