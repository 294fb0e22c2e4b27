#!/usr/bin/env bash
# Layering rules anyone can check with grep (run by .ci/run):
# 1. key and channel names and Lua live only in src/protocol/;
# 2. only src/net/ names the driver's async connection types (the client's connections,
#    the pub/sub subscriptions, the deployment check's probes, and the caller's own
#    connection that `fencing::fenced_set` writes on);
# 3. the pure rules (src/rules/) import nothing async and no Redis type (an instant type
#    is no I/O: callers read the clock and pass the instant in), and the safety rules,
#    which the model checker calls, depend on nothing else in the crate;
# 4. no import cycles between the files of src/ (the library; the binaries are leaves), nor
#    between its top-level modules (a folder taken whole);
# 5. no function longer than 80 lines, no file longer than 800, tests apart;
# 6. the public API is the one listed in docs/public-api.txt (scripts/public-api.py over
#    the rustdoc HTML): an API change is committed together with its listing;
# 7. the lock kinds differ in one table (src/protocol/access.rs): no other file names a
#    kind but the kinds' own homes (src/rwlock/, src/semaphore/), which choose theirs;
# 8. the semaphore waits only through the acquisition core: src/semaphore/ imports
#    nothing from src/wait/;
# 9. src/blocking/ is the top layer, above src/client/: it may import anything, and no
#    other module imports it.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
check() {
    local what=$1 found=$2
    if [ -n "$found" ]; then
        echo "layering: $what:" >&2
        echo "$found" >&2
        fail=1
    fi
}
check "key names or Lua outside src/protocol" \
    "$(grep -rnE "redis\.call|\"quorum-lock:[a-z]|'quorum-lock:" src --include=*.rs | grep -v '^src/protocol/' || true)"
check "redis::aio outside src/net/" \
    "$(grep -rn "redis::aio\|MultiplexedConnection" src --include=*.rs \
        | grep -v '^src/net/' || true)"
check "async or Redis in the pure rules (src/rules/)" \
    "$(grep -rnE "tokio|futures|redis|async " src/rules --include=*.rs \
        | grep -v ':use tokio::time::Instant;$' || true)"
check "the safety rules depend on the rest of the crate (src/rules/safety.rs)" \
    "$(grep -nE "crate::|super::" src/rules/safety.rs | grep -v ':    use super::\*;$' || true)"
check "a lock kind named outside src/protocol/access.rs and the kinds' homes" \
    "$(grep -rnE "Access::(Mutex|Read|Write|Permit)" src --include=*.rs \
        | grep -vE '^src/(protocol/access\.rs|rwlock/|semaphore/)' || true)"
check "a lock kind reaching the waiting protocol around the acquisition core" \
    "$(grep -rnE "crate::wait\b|wait::" src/semaphore --include=*.rs || true)"
check "the blocking layer imported from below (src/blocking/ is the top layer)" \
    "$(grep -rnE "crate::blocking\b|blocking::" src --include=*.rs \
        | grep -vE '^src/(blocking/|bin/)' | grep -v '^src/lib.rs:.*pub mod blocking;' || true)"
check "import cycles between modules of src/" "$(python3 scripts/import-cycles.py src)"
check "functions over 80 lines or files over 800, tests apart" \
    "$(python3 scripts/import-cycles.py --long 80 src || true)"

# The public API, from the documentation (.ci/run has just built it with the same
# RUSTDOCFLAGS, so this is a no-op there).
cargo doc --no-deps --all-features --quiet
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
listing=docs/public-api.txt
if ! api_diff=$(diff -u --label "$listing (committed)" --label "the public API now" \
    "$listing" <(python3 scripts/public-api.py "$target_dir/doc/quorum_lock")); then
    echo "public API: it differs from $listing:" >&2
    echo "$api_diff" >&2
    echo "If the change is meant, update the listing and commit it with the change:" >&2
    echo "    cargo doc --no-deps --all-features && python3 scripts/public-api.py > $listing" >&2
    fail=1
fi
exit $fail
