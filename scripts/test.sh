#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests against real redis-server
# processes (started and stopped by the tests), doctests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-build.sh
bash scripts/ensure-redis.sh
exec cargo test --all-features "$@"
