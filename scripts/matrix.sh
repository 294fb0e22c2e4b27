#!/usr/bin/env bash
# Compatibility matrix: runs the integration test targets once per server build and once
# on a mixed ensemble, then prints a table server x target: passed / FAILED / skipped.
#
#   scripts/matrix.sh                       # every server scripts/servers.sh provides
#   scripts/matrix.sh --skip redis-7.0      # leave one out (scripts/test.sh does this:
#                                           # its full suite already ran on Debian's 7.0)
#
# The test binaries are built once (`cargo test --no-run`) and each is run per server with
# QUORUM_LOCK_SERVERS set (see tests/common/mod.rs): no rebuild per server. Logs go to
# target/matrix/<server>/<target>.log. Exit status 1 when any run failed; a server that
# cannot be fetched or started is one "skipped: ..." line and a "skipped" row, not a pass.
#
# Environment:
#   QUORUM_LOCK_MATRIX_TARGETS  test targets to run (default below)
#   QUORUM_LOCK_SERVER_CACHE    where scripts/servers.sh keeps the builds
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(${QUORUM_LOCK_MATRIX_TARGETS:-core waiting safety semaphore rwlock election metrics faults cli doctor harness_selftest sentinel cluster})
source scripts/test-binaries.sh
# Per target, arguments for its test binary. The lock kinds' fault rows run once, in the
# main suite: the matrix checks their scripts on every build through the semaphore and
# rwlock targets (the election's through the election target), and the mutex's fault rows
# on every build here. So does the majority
# row: with a majority down nothing is granted whatever the build, and its control run
# tests the checker, not the server. So do the Sentinel and Cluster failover rows: the
# sentinel and cluster targets fail members over on every build.
declare -A TARGET_ARGS=(
    [faults]="--skip nemesis_semaphore_holds_at_most_k --skip nemesis_rwlock_writers_exclude_everyone --skip nemesis_election_one_leader_at_a_time --skip nemesis_majority_faults_block_and_stay_safe --skip nemesis_sentinel_members_fail_over --skip nemesis_cluster_members_fail_over"
)
for t in "${!THREADS_ARGS[@]}"; do TARGET_ARGS[$t]="${THREADS_ARGS[$t]}"; done
# Targets that run on the mixed row only: their tests reach every build there (node i runs
# build i mod 5), and what they add to the per-build targets is process and fault
# handling (faults, cli: a minute or more a row), the metrics the client emits, or the
# test harness itself, none of which depends on the build.
MIXED_ONLY=(faults cli metrics harness_selftest)
# Targets that skip the mixed row: a Sentinel group or a Cluster whose servers run different
# builds is no deployment anyone runs, and each build has a row of its own for them.
PER_BUILD_ONLY=(sentinel cluster)
# The mixed ensemble, by server name: node i of a test runs entry i mod 5.
MIXED=(redis-6.2 redis-7.0 redis-7.4 valkey-9.1 valkey-9.1)
ALL=(redis-6.2 redis-7.0 valkey-9.1 redis-7.4)
SKIP=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --skip) SKIP+=("$2"); shift 2 ;;
    *) echo "matrix.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

declare -A BIN=()
while read -r name path; do
    [[ -n "$name" ]] && BIN[$name]="$path"
done < <(bash scripts/servers.sh)

echo "matrix: building the test binaries once" >&2
find_test_binaries
for t in "${TARGETS[@]}"; do
    [[ -n "${EXE[$t]:-}" ]] || { echo "matrix.sh: no test binary for target $t" >&2; exit 2; }
done

mixed_only() { local m; for m in "${MIXED_ONLY[@]}"; do [[ "$m" == "$1" ]] && return 0; done; return 1; }
per_build_only() { local m; for m in "${PER_BUILD_ONLY[@]}"; do [[ "$m" == "$1" ]] && return 0; done; return 1; }
skipped() { local s; for s in "${SKIP[@]}"; do [[ "$s" == "$1" ]] && return 0; done; return 1; }

# failure_report <row> <target> <log>: the failed tests' names and their panic messages,
# so that a CI log that keeps only stdout still says what failed and why.
failure_report() {
    local row="$1" t="$2" log="$3"
    echo "matrix: $row $t: failed tests:"
    grep -E '^test .* FAILED$' "$log" | sed 's/^/    /' || true
    echo "matrix: $row $t: panics (from $log):"
    grep -E -A 12 "^---- .* stdout ----$|panicked at" "$log" | head -n 80 | sed 's/^/    /' || true
}

declare -A CELL=()
ROWS=()
FAILED=0
# run_row <row name> <comma-separated binaries>
run_row() {
    local row="$1" list="$2" t log start rc summary
    mkdir -p "target/matrix/$row"
    for t in "${TARGETS[@]}"; do
        if [[ "$row" != mixed ]] && mixed_only "$t"; then
            CELL[$row,$t]="skipped (mixed row)"
            continue
        fi
        if [[ "$row" == mixed ]] && per_build_only "$t"; then
            CELL[$row,$t]="skipped (per build)"
            continue
        fi
        log="target/matrix/$row/$t.log"
        start=$SECONDS
        rc=0
        QUORUM_LOCK_SERVERS="$list" nice "${EXE[$t]}" ${TARGET_ARGS[$t]:-} >"$log" 2>&1 || rc=$?
        summary="$(grep -o '[0-9]* passed; [0-9]* failed' "$log" | tail -n 1)"
        if [[ "$rc" == 0 ]]; then
            CELL[$row,$t]="passed (${summary%% *}, $((SECONDS - start))s)"
        else
            CELL[$row,$t]="FAILED (${summary:-exit $rc}, $((SECONDS - start))s)"
            FAILED=1
            failure_report "$row" "$t" "$log"
        fi
        echo "matrix: $row $t: ${CELL[$row,$t]}" >&2
    done
}

for s in "${ALL[@]}"; do
    ROWS+=("$s")
    if skipped "$s"; then
        for t in "${TARGETS[@]}"; do CELL[$s,$t]="skipped (--skip)"; done
    elif [[ -z "${BIN[$s]:-}" ]]; then
        for t in "${TARGETS[@]}"; do CELL[$s,$t]="skipped (no build)"; done
    else
        run_row "$s" "${BIN[$s]}"
    fi
done

mixed_list=""
missing=""
for s in "${MIXED[@]}"; do
    if [[ -n "${BIN[$s]:-}" ]]; then
        mixed_list="${mixed_list:+$mixed_list,}${BIN[$s]}"
    else
        missing="$s"
    fi
done
row="mixed"
echo "matrix: mixed = ${MIXED[*]} (node i of a test runs entry i mod ${#MIXED[@]})" >&2
ROWS+=("$row")
if [[ -n "$missing" ]]; then
    echo "skipped: $row: $missing is not available" >&2
    for t in "${TARGETS[@]}"; do CELL[$row,$t]="skipped (no $missing)"; done
else
    run_row "$row" "$mixed_list"
fi

echo
printf '%-11s' "server"
for t in "${TARGETS[@]}"; do printf ' | %-24s' "$t"; done
echo
for r in "${ROWS[@]}"; do
    printf '%-11s' "$r"
    for t in "${TARGETS[@]}"; do printf ' | %-24s' "${CELL[$r,$t]}"; done
    echo
done
echo "logs: target/matrix/<server>/<target>.log"
passed=0 failed=0 skips=0
for r in "${ROWS[@]}"; do
    for t in "${TARGETS[@]}"; do
        case "${CELL[$r,$t]}" in
        passed*) passed=$((passed + 1)) ;;
        FAILED*) failed=$((failed + 1)) ;;
        *) skips=$((skips + 1)) ;;
        esac
    done
done
# One closing line counting target runs (server x target); none when nothing ran.
if ((passed + failed > 0)); then
    echo "matrix: $passed passed, $failed failed, $skips skipped"
fi
exit "$FAILED"
