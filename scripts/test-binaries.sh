# Sourced by scripts/test.sh and scripts/matrix.sh: the integration test binaries, built
# once, and the arguments some of them run with.

# The Sentinel, Cluster and CLI tests mostly wait (for failovers, gossip, processes):
# four at a time halve their time (37 s to 19 s for cluster, 40 s to 19 s for sentinel,
# 59 s to 32 s for cli, on 2 cores).
declare -A THREADS_ARGS=(
    [sentinel]="--test-threads 4"
    [cluster]="--test-threads 4"
    [cli]="--test-threads 4"
)

# find_test_binaries: fills EXE[target] with the executable of each integration test
# target of this package, `tests/*.rs`, and TEST_TARGETS with their names, sorted (the
# order `cargo test` runs them in); OTHER_TESTS with the names of the other workspace
# members' integration test targets. Builds what is stale first; build errors are not
# shown: build with `cargo test --no-run` before.
find_test_binaries() {
    declare -gA EXE=()
    TEST_TARGETS=()
    OTHER_TESTS=()
    local line name exe
    while IFS= read -r line; do
        name="$(sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*/\1/p' <<<"$line")"
        exe="$(sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' <<<"$line")"
        [[ -n "$name" && -n "$exe" ]] || continue
        if grep -qF "\"src_path\":\"$PWD/tests/" <<<"$line"; then
            EXE[$name]="$exe"
        else
            OTHER_TESTS+=("$name")
        fi
    # The same selection as `cargo test --all-features` (the workspace members' features
    # unify: selecting fewer packages would build the dependencies again).
    done < <(nice cargo test --all-features --no-run --message-format=json 2>/dev/null |
        grep '"reason":"compiler-artifact"' | grep '"kind":\["test"\]')
    mapfile -t TEST_TARGETS < <(printf "%s\n" "${!EXE[@]}" | LC_ALL=C sort)
}
