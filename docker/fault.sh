#!/usr/bin/env bash
# Fault-injection helper for the five-node Redis ensemble in
# docker/docker-compose.yml. See docker/README.md.
#
#   docker/fault.sh up [persist] [clock]
#                                  start n1..n5, wait for PONG (persist: AOF + named volumes;
#                                  clock: under the clockshift shim, see `clock`)
#   docker/fault.sh down           remove containers, network and volumes of the project
#   docker/fault.sh pause N        freeze node N (cgroup freezer): TCP connects, no replies
#   docker/fault.sh unpause N
#   docker/fault.sh kill N [SIG]   docker kill (default SIGKILL); the container stays stopped
#   docker/fault.sh start N        start a killed/stopped node again, wait for PONG
#   docker/fault.sh disconnect N   detach node N from the ensemble network
#   docker/fault.sh connect N      re-attach it with the SAME address (--ip)
#   docker/fault.sh drop N         iptables DROP of port 6379 inside node N's network
#                                  namespace: a silent partition (root, iptables, nsenter)
#   docker/fault.sh reject N       the same with REJECT (tcp-reset): clients fail at once
#   docker/fault.sh undrop N       remove both rules again
#   docker/fault.sh clock N MS     shift node N's wall clock by MS milliseconds (signed)
#                                  from real time; needs `up ... clock`
#   docker/fault.sh ip N           print node N's address (e.g. 172.29.53.11)
#   docker/fault.sh wait [N]       wait until node N (default: all) answers PING
#   docker/fault.sh ps             list the project's containers
#   docker/fault.sh cli N [ARGS]   run redis-cli inside node N
#
# Environment:
#   COMPOSE_PROJECT_NAME  compose project (default quorumlock): containers quorumlock_nN_1
#   REDIS_IMAGE           image for the nodes (default quorum-lock/redis:local)
#   QL_NET_PREFIX         first three octets of the /24 (default 172.29.53)
#   QL_WAIT_SECS          readiness timeout for up/start/wait (default 30)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BASE_FILE="$SCRIPT_DIR/docker-compose.yml"
PERSIST_FILE="$SCRIPT_DIR/docker-compose.persist.yml"
CLOCK_FILE="$SCRIPT_DIR/docker-compose.clock.yml"
LOCAL_IMAGE="quorum-lock/redis:local"
NODES=(1 2 3 4 5)
NET_KEY="redlock"   # network name inside docker-compose.yml

# docker-compose normalises the project name the same way.
PROJECT="$(printf '%s' "${COMPOSE_PROJECT_NAME:-quorumlock}" | tr '[:upper:]' '[:lower:]' | tr -cd 'a-z0-9_-')"
[[ -n "$PROJECT" ]] || { echo "fault.sh: empty project name" >&2; exit 2; }
export COMPOSE_PROJECT_NAME="$PROJECT"

WAIT_SECS="${QL_WAIT_SECS:-30}"

die() { echo "fault.sh: $*" >&2; exit 1; }

# usage [EXIT_CODE]: the header comment above; to stderr unless EXIT_CODE is 0.
usage() {
  local code="${1:-2}"
  if [[ "$code" -eq 0 ]]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  else
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  fi
  exit "$code"
}

compose() {
  if command -v docker-compose >/dev/null 2>&1; then
    docker-compose -p "$PROJECT" "$@"
  elif docker compose version >/dev/null 2>&1; then
    docker compose -p "$PROJECT" "$@"
  else
    die "neither docker-compose nor 'docker compose' is available"
  fi
}

check_n() {
  [[ "${1:-}" =~ ^[1-5]$ ]] || die "node number must be 1..5, got '${1:-}'"
}

# Container ID of node N (found by compose labels, so it works for both
# docker-compose v1 names `<project>_nN_1` and v2 names `<project>-nN-1`).
cid() {
  local id
  id="$(docker ps -aq \
        --filter "label=com.docker.compose.project=$PROJECT" \
        --filter "label=com.docker.compose.service=n$1")"
  [[ -n "$id" ]] || die "node n$1 of project '$PROJECT' does not exist (run: $0 up)"
  [[ "$(wc -l <<<"$id")" -eq 1 ]] || die "several containers for n$1 in project '$PROJECT'"
  printf '%s\n' "$id"
}

net_id() {
  docker network ls -q \
    --filter "label=com.docker.compose.project=$PROJECT" \
    --filter "label=com.docker.compose.network=$NET_KEY"
}

net_name() {
  local id
  id="$(net_id)"
  [[ -n "$id" ]] || die "network '$NET_KEY' of project '$PROJECT' does not exist (run: $0 up)"
  docker network inspect -f '{{.Name}}' "$id"
}

# Address of node N: from the live network's subnet when it exists (so it
# matches what `up` used), else from QL_NET_PREFIX.
node_ip() {
  local prefix="${QL_NET_PREFIX:-172.29.53}" id subnet
  id="$(net_id)"
  if [[ -n "$id" ]]; then
    subnet="$(docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' "$id")"
    [[ "$subnet" == */24 ]] && prefix="${subnet%.*}"
  fi
  printf '%s.%d\n' "$prefix" "$((10 + $1))"
}

ping_node() {
  local out
  out="$(docker exec "$1" redis-cli -p 6379 ping 2>/dev/null)" || return 1
  [[ "$out" == "PONG" ]]
}

wait_ready() {
  local n id deadline=$((SECONDS + WAIT_SECS))
  for n in "$@"; do
    id="$(cid "$n")"
    until ping_node "$id"; do
      if (( SECONDS >= deadline )); then
        docker logs --tail 20 "$id" >&2 || true
        die "n$n did not answer PING within ${WAIT_SECS}s"
      fi
      sleep 0.1
    done
  done
}

# iptables ARGS inside node N's network namespace (the container has no iptables of its
# own; the host's binary runs in the node's namespace through nsenter).
netns_iptables() {
  local n="$1" pid
  shift
  [[ "$(id -u)" -eq 0 ]] || die "packet drops need root (nsenter into the node's network namespace)"
  command -v nsenter >/dev/null 2>&1 || die "nsenter not found (package util-linux)"
  command -v iptables >/dev/null 2>&1 || die "iptables not found: apt-get install -y iptables"
  pid="$(docker inspect -f '{{.State.Pid}}' "$(cid "$n")")"
  [[ "$pid" =~ ^[0-9]+$ && "$pid" -gt 0 ]] || die "n$n is not running"
  nsenter -t "$pid" -n iptables -w "$@"
}

DROP_RULE=(INPUT -p tcp --dport 6379 -j DROP)
REJECT_RULE=(INPUT -p tcp --dport 6379 -j REJECT --reject-with tcp-reset)

ensure_image() {
  local image="${REDIS_IMAGE:-$LOCAL_IMAGE}"
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    if [[ "$image" == "$LOCAL_IMAGE" ]]; then
      echo "fault.sh: image $image missing, building it" >&2
      "$SCRIPT_DIR/build-image.sh"
    else
      echo "fault.sh: image $image not present locally; docker-compose will try to pull it" >&2
    fi
  fi
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  up)
    files=(-f "$BASE_FILE")
    for mode in "$@"; do
      case "$mode" in
        persist) files+=(-f "$PERSIST_FILE") ;;
        clock) files+=(-f "$CLOCK_FILE") ;;
        *) die "usage: $0 up [persist] [clock]" ;;
      esac
    done
    ensure_image
    compose "${files[@]}" up -d --remove-orphans
    wait_ready "${NODES[@]}"
    for n in "${NODES[@]}"; do echo "n$n $(node_ip "$n")"; done
    ;;
  down)
    # A paused container cannot be stopped: thaw first.
    while IFS= read -r id; do
      [[ -n "$id" ]] && docker unpause "$id" >/dev/null
    done < <(docker ps -q --filter "label=com.docker.compose.project=$PROJECT" --filter status=paused)
    # Add the persist file when the project owns volumes, so `down -v` removes
    # them whichever mode was brought up last.
    files=(-f "$BASE_FILE")
    if [[ -n "$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")" ]]; then
      files+=(-f "$PERSIST_FILE")
    fi
    compose "${files[@]}" down -v --remove-orphans --timeout 3
    ;;
  pause|unpause)
    check_n "${1:-}"; docker "$cmd" "$(cid "$1")" >/dev/null ;;
  kill)
    check_n "${1:-}"; docker kill --signal "${2:-KILL}" "$(cid "$1")" >/dev/null ;;
  start)
    check_n "${1:-}"; docker start "$(cid "$1")" >/dev/null; wait_ready "$1" ;;
  disconnect)
    check_n "${1:-}"; docker network disconnect "$(net_name)" "$(cid "$1")" ;;
  connect)
    check_n "${1:-}"
    docker network connect --ip "$(node_ip "$1")" --alias "n$1" "$(net_name)" "$(cid "$1")" ;;
  drop)
    check_n "${1:-}"; netns_iptables "$1" -I "${DROP_RULE[@]}" ;;
  reject)
    check_n "${1:-}"; netns_iptables "$1" -I "${REJECT_RULE[@]}" ;;
  undrop)
    check_n "${1:-}"
    netns_iptables "$1" -L INPUT -n >/dev/null
    while netns_iptables "$1" -D "${DROP_RULE[@]}" 2>/dev/null; do :; done
    while netns_iptables "$1" -D "${REJECT_RULE[@]}" 2>/dev/null; do :; done
    ;;
  clock)
    check_n "${1:-}"
    [[ "${2:-}" =~ ^[+-]?[0-9]+$ ]] || die "usage: $0 clock N MILLISECONDS"
    tmp="$(mktemp)"
    printf '%s\n' "$2" >"$tmp"
    chmod 0644 "$tmp"
    if ! docker cp "$tmp" "$(cid "$1"):/tmp/clockshift-offset" >/dev/null; then
      rm -f "$tmp"; die "cannot copy the offset into n$1"
    fi
    rm -f "$tmp"
    ;;
  ip)
    check_n "${1:-}"; node_ip "$1" ;;
  wait)
    if [[ $# -gt 0 ]]; then check_n "$1"; wait_ready "$1"; else wait_ready "${NODES[@]}"; fi ;;
  ps)
    docker ps -a --filter "label=com.docker.compose.project=$PROJECT" \
      --format 'table {{.Names}}\t{{.Status}}\t{{.Image}}' ;;
  cli)
    check_n "${1:-}"; id="$(cid "$1")"; shift; docker exec -i "$id" redis-cli "$@" ;;
  -h|--help|help)
    usage 0 ;;
  "")
    usage 2 ;;
  *)
    echo "fault.sh: unknown command '$cmd'" >&2; usage 2 ;;
esac
