#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests against real redis-server
# processes (started and stopped by the tests), doctests; then the compatibility matrix
# (scripts/matrix.sh: the integration targets on Redis 6.2 and 7.4, Valkey 9.1 and a mixed
# ensemble, builds fetched once into a cache). QUORUM_LOCK_MATRIX=0 skips the matrix; so
# do arguments (e.g. a test filter), which go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-build.sh
bash scripts/ensure-redis.sh
cargo test --all-features "$@"
if [[ "${QUORUM_LOCK_MATRIX:-1}" == 0 ]]; then
    echo "matrix: skipped (QUORUM_LOCK_MATRIX=0)"
    exit 0
fi
if [[ $# -gt 0 ]]; then
    echo "matrix: skipped (arguments given to cargo test)"
    exit 0
fi
# The suite above already ran every target on Debian's Redis 7.0.
exec bash scripts/matrix.sh --skip redis-7.0
