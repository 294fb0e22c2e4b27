#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests against real redis-server
# processes (started and stopped by the tests), doctests; then the compatibility matrix
# (scripts/matrix.sh: the integration targets on Redis 6.2 and 7.4, Valkey 9.1 and a mixed
# ensemble, builds fetched once into a cache). QUORUM_LOCK_MATRIX=0 skips the matrix; so
# do arguments (e.g. a test filter), which go to `cargo test` as they are.
#
# Without arguments the suite is `cargo test --all-features`, run in parts: everything is
# built once, then the unit tests and doctests, the other workspace members' tests, and
# each integration target of tests/ in turn, with the arguments scripts/test-binaries.sh
# gives some of them (more test threads for those that mostly wait). The Docker tier
# (tests/faults_docker.rs), which mostly waits on its containers, runs beside the rest;
# its output follows at the end. A failing target does not stop the others; the matrix
# runs only when the whole suite passed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-build.sh
bash scripts/ensure-redis.sh
if [[ $# -gt 0 ]]; then
    cargo test --all-features "$@"
    echo "matrix: skipped (arguments given to cargo test)"
    exit 0
fi

cargo test --all-features --no-run
source scripts/test-binaries.sh
find_test_binaries
mkdir -p target/test-logs
beside=faults_docker
beside_log=target/test-logs/$beside.log
"${EXE[$beside]}" >"$beside_log" 2>&1 &
beside_pid=$!
trap 'kill "$beside_pid" 2>/dev/null || true' EXIT

failed=()
other_args=()
for t in "${OTHER_TESTS[@]}"; do other_args+=(--test "$t"); done
cargo test --all-features --lib --bins "${other_args[@]}" || failed+=("unit tests and ${OTHER_TESTS[*]}")
cargo test --all-features --doc || failed+=(doctests)
for t in "${TEST_TARGETS[@]}"; do
    [[ "$t" == "$beside" ]] && continue
    echo "     Running tests/$t.rs (${EXE[$t]})"
    "${EXE[$t]}" ${THREADS_ARGS[$t]:-} || failed+=("$t")
done
echo "     Waiting for tests/$beside.rs, run beside the rest (output from $beside_log):"
rc=0
wait "$beside_pid" || rc=$?
trap - EXIT
cat "$beside_log"
[[ "$rc" == 0 ]] || failed+=("$beside")

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "suite: FAILED: ${failed[*]}"
    exit 1
fi
echo "suite: passed (unit tests, doctests, ${#OTHER_TESTS[@]} + ${#TEST_TARGETS[@]} test targets)"
if [[ "${QUORUM_LOCK_MATRIX:-1}" == 0 ]]; then
    echo "matrix: skipped (QUORUM_LOCK_MATRIX=0)"
    exit 0
fi
# The suite above already ran every target on Debian's Redis 7.0.
exec bash scripts/matrix.sh --skip redis-7.0
