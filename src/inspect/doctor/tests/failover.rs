//! Tests of the failover findings.

use super::*;

#[test]
fn a_master_a_failover_can_replace() {
    // replicas, promoted, replica lag in seconds, expected findings on node 1.
    type Case = (Option<u32>, Option<bool>, Option<u64>, Vec<FindingKind>);
    let table: [Case; 7] = [
        (Some(0), Some(false), None, vec![]),
        (None, None, None, vec![]),
        (Some(1), Some(false), Some(0), vec![K::FailoverRisk]),
        (Some(2), None, Some(1), vec![K::FailoverRisk]),
        (Some(0), Some(true), None, vec![K::FailoverRisk]),
        // The lag is judged against the default TTL (30 s): equal is not beyond.
        (Some(1), Some(false), Some(30), vec![K::FailoverRisk]),
        (
            Some(1),
            Some(true),
            Some(31),
            vec![K::FailoverRisk, K::ReplicationLag],
        ),
    ];
    for (replicas, promoted, lag, expected) in table {
        let mut infos = set(3);
        infos[1].replicas = replicas;
        infos[1].promoted = promoted;
        infos[1].replica_lag = lag.map(Duration::from_secs);
        let expected: Vec<_> = expected.into_iter().map(|k| (k, W, node(1))).collect();
        assert_eq!(
            kinds(&infos, &limits()),
            expected,
            "{replicas:?} {promoted:?} {lag:?}"
        );
    }
}

#[test]
fn a_replica_is_not_a_failover_risk_of_its_own() {
    let mut infos = set(3);
    infos[1].role = Some("slave".into());
    infos[1].promoted = Some(true);
    infos[1].master_host = Some("10.9.9.9".into());
    infos[1].master_port = Some(6379);
    let found = kinds(&infos, &limits());
    assert!(
        found.iter().all(|(k, _, _)| *k != K::FailoverRisk),
        "{found:?}"
    );
}

#[test]
fn a_member_under_sentinel_follows_its_failovers_by_design() {
    let mut infos = set(3);
    infos[1].replicas = Some(2);
    infos[1].promoted = Some(true);
    infos[1].sentinel_master = Some("10.0.0.2:6379".into());
    assert_eq!(kinds(&infos, &limits()), vec![]);
    // Its lagging replica still matters: a failover would lose more.
    infos[1].replica_lag = Some(Duration::from_secs(31));
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::ReplicationLag, W, node(1))]
    );
}

#[test]
fn the_message_says_what_and_why() {
    let mut infos = set(3);
    infos[2].replicas = Some(2);
    let report = findings(&infos, 2, &limits());
    let risk = report
        .iter()
        .find(|f| f.kind == K::FailoverRisk)
        .expect("a failover risk");
    assert!(
        risk.message.starts_with("has 2 replicas: "),
        "{}",
        risk.message
    );
    assert!(
        risk.message.contains("as after an empty restart"),
        "{}",
        risk.message
    );
    assert_eq!(K::FailoverRisk.as_str(), "failover_risk");
    assert_eq!(K::ReplicationLag.as_str(), "replication_lag");
}

fn answers(named: &[Option<&str>]) -> Vec<SentinelAnswer> {
    named
        .iter()
        .enumerate()
        .map(|(i, m)| SentinelAnswer {
            sentinel: format!("10.0.1.{i}:26379"),
            listed: true,
            master: m.map(str::to_owned),
        })
        .collect()
}

#[test]
fn a_member_whose_sentinels_do_not_all_name_one_master() {
    const A: Option<&str> = Some("10.0.0.2:6379");
    const B: Option<&str> = Some("10.0.0.3:6379");
    // What each sentinel named, the finding expected on node 1 (none: all agree).
    let table: [(&[Option<&str>], Option<Severity>); 8] = [
        (&[A, A, A], None),
        (&[A], None),
        (&[A, A, None], Some(W)),
        (&[A, A, B], Some(W)),
        (&[A, None, None], Some(E)),
        (&[A, B, None], Some(E)),
        (&[None, None, None], Some(E)),
        (&[A, A, A, None, None], Some(W)),
    ];
    for (named, expected) in table {
        let mut infos = set(3);
        infos[1].sentinels = answers(named);
        infos[1].sentinel_master = A.map(str::to_owned);
        let expected: Vec<_> = expected
            .map(|severity| (K::SentinelQuorum, severity, node(1)))
            .into_iter()
            .collect();
        assert_eq!(kinds(&infos, &limits()), expected, "{named:?}");
    }
    // A plain server has no sentinels to agree.
    assert_eq!(kinds(&set(3), &limits()), vec![]);
}

#[test]
fn an_unreachable_member_still_shows_what_its_sentinels_say() {
    let mut infos = set(3);
    infos[1].reachable = false;
    infos[1].sentinels = answers(&[Some("10.0.0.2:6379"), None, None]);
    let report = findings(&infos, 2, &limits());
    let quorum = report
        .iter()
        .find(|f| f.kind == K::SentinelQuorum)
        .expect("a sentinel finding");
    assert_eq!(quorum.severity, E);
    assert!(
        quorum.message.contains("10.0.1.1:26379: no answer"),
        "{}",
        quorum.message
    );
    // Both messages read as one sentence each, with single spaces.
    infos[1].reachable = true;
    infos[1].sentinels = answers(&[Some("10.0.0.2:6379"), Some("10.0.0.2:6379"), None]);
    let warning = findings(&infos, 2, &limits());
    for f in report.iter().chain(&warning) {
        assert!(!f.message.contains("  "), "{}", f.message);
    }
}

#[test]
fn a_member_whose_url_lists_only_some_of_its_sentinels() {
    const A: Option<&str> = Some("10.0.0.2:6379");
    // Listed flags of the sentinels the client knows (all naming A), the group's size,
    // the findings expected on node 1.
    type Row = (&'static [bool], usize, &'static [(K, Severity)]);
    let table: [Row; 5] = [
        (&[true, true, true], 3, &[]),
        (&[true, false, false], 3, &[(K::SentinelPartialList, W)]),
        (&[true, true, false], 3, &[(K::SentinelPartialList, W)]),
        // Counted, not known by address: no majority of the five names A.
        (
            &[true, true],
            5,
            &[(K::SentinelQuorum, E), (K::SentinelPartialList, W)],
        ),
        (&[true], 1, &[]),
    ];
    for (listed, group, expected) in table {
        let mut infos = set(3);
        infos[1].sentinels = answers(&vec![A; listed.len()]);
        for (answer, &listed) in infos[1].sentinels.iter_mut().zip(listed) {
            answer.listed = listed;
        }
        infos[1].sentinel_group_size = Some(group);
        infos[1].sentinel_master = A.map(str::to_owned);
        let expected: Vec<_> = expected.iter().map(|&(k, s)| (k, s, node(1))).collect();
        assert_eq!(kinds(&infos, &limits()), expected, "{listed:?} of {group}");
    }
    let mut infos = set(3);
    infos[1].sentinels = answers(&[A, A, A]);
    infos[1].sentinels[2].listed = false;
    infos[1].sentinel_group_size = Some(3);
    let found = findings(&infos, 2, &limits());
    let partial = found
        .iter()
        .find(|f| f.kind == K::SentinelPartialList)
        .expect("a partial list finding");
    assert!(
        partial.message.contains("lists 2 of the 3 sentinels")
            && partial.message.contains("learnt from them: 10.0.1.2:26379"),
        "{}",
        partial.message
    );
    assert!(!partial.message.contains("  "), "{}", partial.message);
    assert_eq!(K::SentinelPartialList.as_str(), "sentinel_partial_list");
}
