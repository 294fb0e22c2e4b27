//! Tests of the report as text and as JSON.

use super::*;

#[test]
fn json_rendering() {
    let report = sample_report();
    let json = report.to_json();
    assert!(json.starts_with(r#"{"quorum":2,"worst":"error","nodes":[{"name":"10.0.0.0:6379","reachable":true,"error":null,"redis_version":"7.2.4""#), "{json}");
    assert!(
        json.contains(
            r#""clock":{"offset_us":200,"uncertainty_us":1000,"rtt_us":2000},"keys":null}"#
        ),
        "{json}"
    );
    assert!(
        json.contains(r#"{"name":"10.0.0.1:6379","reachable":false,"error":"refused \"quoted\"","#),
        "{json}"
    );
    assert!(
        json.contains(r#""uptime_secs":null,"clock":null,"keys":null}"#),
        "{json}"
    );
    assert!(json.contains(r#"{"kind":"unreachable","severity":"error","node":"10.0.0.1:6379","message":"unreachable (refused \"quoted\"); only 1 of 2"#), "{json}");
    assert!(
        json.contains(r#"{"kind":"too_few_nodes","severity":"warning","node":null,"#),
        "{json}"
    );
    assert!(json.ends_with("\"}]}"), "{json}");
    // Balanced outside strings, and no raw control characters.
    let (mut depth, mut in_str, mut escaped) = (0i32, false, false);
    for c in json.chars() {
        assert!(u32::from(c) >= 0x20, "raw control character in {json}");
        match (in_str, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') | (false, _, '"') => in_str = !in_str,
            (false, _, '{' | '[') => depth += 1,
            (false, _, '}' | ']') => depth -= 1,
            _ => {}
        }
        assert!(depth >= 0);
    }
    assert_eq!((depth, in_str), (0, false));
    let empty = DeploymentReport {
        quorum: 1,
        nodes: vec![],
        findings: vec![],
    };
    assert_eq!(
        empty.to_json(),
        r#"{"quorum":1,"worst":null,"nodes":[],"findings":[]}"#
    );
}

#[test]
fn display_rendering() {
    let report = sample_report();
    assert_eq!(report.worst(), Some(Severity::Error));
    let text = report.to_string();
    assert!(
        text.starts_with("2 nodes, quorum 2: 1 error(s), 1 warning(s), 0 note(s)\n"),
        "{text}"
    );
    assert!(
        text.contains("  node           state  version  role    aof     cluster  uptime  clock\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  10.0.0.0:6379  up     7.2.4    master  always  no       60m     +0.2 ms ±1.0 ms\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  10.0.0.1:6379  down   -        -       -       -        -       -\n"),
        "{text}"
    );
    assert!(
        text.contains("ERROR    10.0.0.1:6379: unreachable (refused"),
        "{text}"
    );
    assert!(text.contains("\n         fix: start the node"), "{text}");
    let finding = &report.findings[1];
    assert_eq!(
        finding.to_string(),
        format!("warning: {} (fix: {})", finding.message, finding.fix)
    );
    assert_eq!(short_duration(Duration::from_secs(119)), "119s");
    assert_eq!(short_duration(Duration::from_secs(7199)), "119m");
    assert_eq!(short_duration(Duration::from_secs(172_799)), "47h");
    assert_eq!(short_duration(Duration::from_secs(172_800)), "2d");
    assert_eq!(signed_ms(-1_260), "-1.3");
    assert_eq!(signed_ms(-1_249), "-1.2");
    assert_eq!(signed_ms(5_000_050), "+5000.1");
    assert_eq!(signed_ms(-49), "0.0");
    assert_eq!(signed_ms(49), "0.0");
    assert_eq!(signed_ms(-50), "-0.1");
    assert_eq!(signed_ms(i64::MIN), "-9223372036854775.8");
}

#[test]
fn same_findings_on_several_nodes_render_as_one_line() {
    let mut infos = set(5);
    for info in &mut infos {
        info.appendonly = Some(false);
    }
    infos[3].server_kind = Some(ServerKind::Valkey);
    infos[3].server_version = Some("9.1.2".into());
    infos[4].server_kind = Some(ServerKind::Redis);
    infos[4].server_version = Some("7.2.4".into());
    infos[2].maxmemory = Some(1 << 20);
    infos[2].maxmemory_policy = Some("allkeys-lru".into());
    let report = DeploymentReport {
        quorum: 3,
        findings: findings(&infos, 3, &limits()),
        nodes: infos,
    };
    // Five per node, one for the set (a majority can lose its data), one for maxmemory.
    assert_eq!(report.findings.len(), 7, "still one finding per node");
    let text = report.to_string();
    assert!(
        text.starts_with("5 nodes, quorum 3: 0 error(s), 7 warning(s), 0 note(s)\n"),
        "{text}"
    );
    let names = (0..5)
        .map(|i| format!("10.0.0.{i}:6379"))
        .collect::<Vec<_>>();
    let line = format!("WARNING  {}: appendonly is off: ", names.join(", "));
    assert_eq!(text.matches(&line).count(), 1, "{text}");
    assert_eq!(text.matches("appendonly is off").count(), 1, "{text}");
    assert!(
        text.contains("WARNING  10.0.0.2:6379: maxmemory 1048576 with"),
        "{text}"
    );
    assert!(
        text.contains("WARNING  5 of 5 nodes, a majority, can lose"),
        "{text}"
    );
    assert_eq!(text.matches("fix: ").count(), 3, "{text}");
    // The version column names the server when its kind is known.
    assert!(
        text.contains("  10.0.0.3:6379  up     valkey 9.1.2  master"),
        "{text}"
    );
    assert!(
        text.contains("  10.0.0.4:6379  up     redis 7.2.4   master"),
        "{text}"
    );
    assert!(
        text.contains("  10.0.0.0:6379  up     7.2.4         master"),
        "{text}"
    );
    let json = report.to_json();
    assert_eq!(json.matches(r#""kind":"no_persistence""#).count(), 5);
    assert!(
        json.contains(
            r#""redis_version":"7.2.4","server_kind":"valkey","server_version":"9.1.2","#
        ),
        "{json}"
    );
}
