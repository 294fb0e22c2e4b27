#!/usr/bin/env bash
# The main demo: a local 5-node ensemble, workers contending for one lock, nodes dying.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-build.sh
bash scripts/ensure-redis.sh
exec cargo run --release -p quorum-lock-demo
