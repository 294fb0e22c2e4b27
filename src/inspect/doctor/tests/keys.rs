//! Tests of the findings on the crate's keys and of each node's census.

use super::*;
use crate::inspect::doctor::keys::{
    FollowUp, KeyScan, ScannedKey, census, follow_up, key_findings,
};
use crate::inspect::doctor::render::census_line;
use crate::protocol::keys::{self, Global, Kind};

const PREFIX: &str = "app:";

/// The lock key of read-write lock `name`: its writer's, the mutex's of that name.
fn writer(name: &str) -> String {
    keys::lock(keys::Space::flat(PREFIX), name)
}

/// The key of `kind` derived from read-write lock `name`.
fn rw_key(kind: Kind, name: &str) -> String {
    keys::derived_name(kind, PREFIX, &writer(name), "").joined()
}

/// Slot `slot` of semaphore `name`.
fn slot(name: &str, slot: u32) -> String {
    keys::lock(
        keys::Space::flat(PREFIX),
        &keys::permit_resource(name, slot),
    )
}

/// The key of `kind` derived from slot 0 of semaphore `name`.
fn semaphore_key(kind: Kind, name: &str) -> String {
    keys::derived_name(kind, PREFIX, &slot(name, 0), "").joined()
}

fn key(name: &str, value_type: &str, pttl_ms: i64) -> ScannedKey {
    ScannedKey {
        name: name.to_owned(),
        pttl_ms,
        value_type: value_type.to_owned(),
        count: None,
        entries: None,
        marker: None,
    }
}

fn count_record(semaphore: &str, count: &str) -> ScannedKey {
    ScannedKey {
        count: Some(count.to_owned()),
        ..key(
            &semaphore_key(Kind::PermitCount, semaphore),
            "string",
            9_000,
        )
    }
}

fn scan(keys: Vec<ScannedKey>) -> KeyScan {
    KeyScan {
        keys,
        partial: false,
    }
}

/// (kind, severity, node) of the key findings over one scan per node of `set(n)`.
fn judged(scans: &[Option<KeyScan>]) -> Vec<(FindingKind, Severity, Option<String>)> {
    (key_findings(&set(scans.len()), scans, PREFIX).into_iter())
        .map(|f| (f.kind, f.severity, f.node))
        .collect()
}

#[test]
fn the_census_counts_each_kind_of_key() {
    let mut readers = key(&rw_key(Kind::Readers, "docs"), "zset", 9_000);
    readers.entries = Some(2);
    let keys = vec![
        readers,
        key(&slot("jobs", 0), "string", 9_000),
        key(&slot("jobs", 3), "string", 9_000),
        key(&slot("jobs", 4), "none", -2), // expired since the scan
        count_record("jobs", "4"),
        key(&semaphore_key(Kind::Waiters, "jobs"), "list", 9_000),
        key(&rw_key(Kind::Waiters, "a"), "list", 9_000),
        key(&rw_key(Kind::Fence, "a"), "string", -1),
        key(&keys::global(PREFIX, Global::Marker, ""), "string", -1),
    ];
    let got = census(
        &KeyScan {
            keys,
            partial: true,
        },
        PREFIX,
    );
    let want = KeyCensus {
        readers: 2,
        permits: 2,
        count_records: 1,
        waiting_lists: 2,
        // The key gone since the scan is not counted.
        scanned: 8,
        partial: true,
    };
    assert_eq!(got, want);
    assert_eq!(census(&scan(vec![]), PREFIX), KeyCensus::default());
}

#[test]
fn keys_that_must_expire_and_do_not() {
    // (key, its type, PTTL, whether it is flagged)
    let table = [
        (slot("jobs", 1), "string", -1, true),
        (rw_key(Kind::Readers, "a"), "zset", -1, true),
        (rw_key(Kind::Intent, "a"), "string", -1, true),
        (rw_key(Kind::Turn, "a"), "string", -1, true),
        (rw_key(Kind::Waiters, "a"), "list", -1, true),
        (semaphore_key(Kind::Waiters, "jobs"), "list", -1, true),
        (semaphore_key(Kind::PermitCount, "jobs"), "string", -1, true),
        // Never expire by design.
        (rw_key(Kind::Fence, "a"), "string", -1, false),
        (
            keys::global(PREFIX, Global::MaxTtl, ""),
            "string",
            -1,
            false,
        ),
        // A mutex's lock key is its user's name; another prefix's keys are not ours.
        (
            keys::lock(keys::Space::flat(PREFIX), "plain"),
            "string",
            -1,
            false,
        ),
        (
            keys::lock(keys::Space::flat("other:"), &keys::permit_resource("a", 0)),
            "string",
            -1,
            false,
        ),
        // The wrong type is foreign data, not a missing expiry.
        (slot("jobs", 1), "hash", -1, false),
    ];
    for (name, value_type, pttl, flagged) in table {
        let scans = [Some(scan(vec![key(&name, value_type, pttl)]))];
        let found = judged(&scans)
            .into_iter()
            .filter(|f| f.0 == K::NoExpiry)
            .collect::<Vec<_>>();
        let want: Vec<_> = flagged
            .then_some((K::NoExpiry, W, node(0)))
            .into_iter()
            .collect();
        assert_eq!(found, want, "{name} {value_type} {pttl}");
    }
}

#[test]
fn keys_of_another_type_are_foreign_data() {
    // (key, its type, whether it is flagged)
    let table = [
        (slot("jobs", 0), "zset", true),
        (rw_key(Kind::Readers, "a"), "zset", false),
        (rw_key(Kind::Readers, "a"), "string", true),
        (rw_key(Kind::Waiters, "a"), "list", false),
        (rw_key(Kind::Waiters, "a"), "string", true),
        (rw_key(Kind::Fence, "a"), "hash", true),
        (semaphore_key(Kind::PermitCount, "jobs"), "set", true),
        (keys::global(PREFIX, Global::Marker, ""), "stream", true),
        // Gone since the scan, a name of no kind, or a mutex's own key: not judged.
        (keys::internal(PREFIX, "future", "x"), "hash", false),
        (
            keys::lock(keys::Space::flat(PREFIX), "plain"),
            "hash",
            false,
        ),
    ];
    for (name, value_type, flagged) in table {
        let scans = [Some(scan(vec![key(&name, value_type, 5_000)]))];
        let want: Vec<_> = flagged
            .then_some((K::ForeignData, E, node(0)))
            .into_iter()
            .collect();
        assert_eq!(judged(&scans), want, "{name} {value_type}");
    }
}

#[test]
fn key_findings_name_the_keys_and_what_they_are() {
    let names: Vec<String> = (0..7).map(|i| slot("jobs", i)).collect();
    let mut keys: Vec<ScannedKey> = names.iter().map(|n| key(n, "string", -1)).collect();
    keys.push(key(&rw_key(Kind::Readers, "docs"), "list", 5_000));
    let found = key_findings(&set(1), &[Some(scan(keys))], PREFIX);
    let messages: Vec<(FindingKind, &str)> =
        found.iter().map(|f| (f.kind, f.message.as_str())).collect();
    let listed = (0..5)
        .map(|i| format!("{} (permit {i} of semaphore jobs)", names[i]))
        .collect::<Vec<_>>()
        .join(", ");
    let readers = rw_key(Kind::Readers, "docs");
    assert_eq!(
        messages,
        [
            (
                K::ForeignData,
                format!(
                    "foreign data in the crate's namespace, which its scripts refuse or \
                     misread: {readers} (list, where the readers of read-write lock docs is \
                     a zset)"
                )
                .as_str()
            ),
            (
                K::NoExpiry,
                format!(
                    "keys that must expire have no expiry, so they hold a lock or its \
                     bookkeeping for ever: {listed} and 2 more"
                )
                .as_str()
            ),
        ]
    );
    assert!(
        found[1].fix.contains("quorum-lock status RESOURCE"),
        "{}",
        found[1].fix
    );
}

#[test]
fn permit_counts_that_differ_between_nodes() {
    let records = |counts: [Option<&str>; 3]| -> Vec<Option<KeyScan>> {
        (counts.iter())
            .map(|c| Some(scan(c.iter().map(|c| count_record("jobs", c)).collect())))
            .collect()
    };
    let cases = [
        ([Some("4"), Some("4"), Some("4")], false),
        ([Some("4"), None, Some("4")], false),
        ([Some("4"), Some("4"), Some("3")], true),
        ([None, Some("2"), Some("3")], true),
    ];
    for (counts, flagged) in cases {
        let want: Vec<_> = flagged
            .then_some((K::PermitCountMismatch, W, None))
            .into_iter()
            .collect();
        assert_eq!(judged(&records(counts)), want, "{counts:?}");
    }
    let found = key_findings(&set(3), &records([Some("4"), Some("4"), Some("3")]), PREFIX);
    assert_eq!(
        found[0].message,
        "semaphore jobs has different permit counts recorded: 3 on 10.0.0.2:6379; 4 on \
         10.0.0.0:6379, 10.0.0.1:6379; its clients use different counts for one name, and \
         each is refused on the nodes that record another"
    );
    // A node not read (None) is left out, and a record of another semaphore is its own.
    let mut scans = records([Some("4"), Some("4"), Some("4")]);
    scans[1] = None;
    if let Some(Some(third)) = scans.get_mut(2) {
        third.keys.push(count_record("other", "2"));
    }
    assert_eq!(judged(&scans), vec![]);
}

#[test]
fn second_reads_only_for_count_records_and_readers_of_their_type() {
    let table = [
        (
            semaphore_key(Kind::PermitCount, "jobs"),
            "string",
            Some(FollowUp::Count),
        ),
        (semaphore_key(Kind::PermitCount, "jobs"), "list", None),
        (rw_key(Kind::Readers, "a"), "zset", Some(FollowUp::Entries)),
        (rw_key(Kind::Readers, "a"), "string", None),
        (
            keys::lock(keys::Space::flat(PREFIX), "plain"),
            "string",
            None,
        ),
    ];
    for (name, value_type, want) in table {
        assert_eq!(
            follow_up(PREFIX, &name, value_type),
            want,
            "{name} {value_type}"
        );
    }
}

#[test]
fn the_census_renders_as_a_line_and_a_json_field() {
    let mut infos = set(2);
    infos[0].keys = Some(KeyCensus {
        readers: 2,
        permits: 1,
        count_records: 1,
        waiting_lists: 0,
        scanned: 9,
        partial: false,
    });
    let report = DeploymentReport {
        quorum: 2,
        findings: vec![],
        nodes: infos,
    };
    let text = report.to_string();
    assert!(
        text.contains(
            "  10.0.0.0:6379  keys: 2 readers, 1 permit held, 1 count record, \
             0 waiting lists\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  10.0.0.1:6379  keys: not counted (SCAN, TYPE or PTTL refused"),
        "{text}"
    );
    let json = report.to_json();
    assert!(
        json.contains(
            r#""keys":{"readers":2,"permits":1,"count_records":1,"waiting_lists":0,"scanned":9,"partial":false}}"#
        ),
        "{json}"
    );
    assert!(json.contains(r#""keys":null}"#), "{json}");
    let partial = KeyCensus {
        scanned: 20_000,
        partial: true,
        ..KeyCensus::default()
    };
    assert_eq!(
        census_line(Some(partial)),
        "0 readers, 0 permits held, 0 count records, 0 waiting lists \
         (partial: stopped after 20000 keys)"
    );
}
