#!/usr/bin/env bash
# The deployment of deploy/compose.yaml on this machine's loopback, from Debian's haproxy and redis-server:
#
#   deploy/local.sh --replicas N --port P [--pids FILE] [--redis-url URL] [--logs DIR]
#
# starts Redis (its own: append-only, in a temporary folder, on a free port; or the one given by --redis-url),
# N `streamlit run serve.py` replicas (the app with its class news route) with ${PYTHON:-python3} (the environment this is started from) on free
# loopback ports, all with one server.cookieSecret and VIZ_CLASS_STORE set to the Redis URL, and HAProxy on
# 127.0.0.1:P (its configuration generated from deploy/haproxy.cfg: sticky cookie VIZ_REPLICA, whose value for
# replica i is r<i>). Prints `redis URL`, then `ready http://127.0.0.1:P` once Redis, every replica and HAProxy
# answer; writes the replicas' PIDs to FILE, one a line, replica 1 first. Runs until SIGINT or SIGTERM, then
# stops every process it started. Logs go to DIR (kept) or to a temporary folder (removed at the end).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
USAGE="usage: deploy/local.sh --replicas N --port P [--pids FILE] [--redis-url redis://HOST:PORT/DB] [--logs DIR]"
START_TIMEOUT=${LOCAL_START_TIMEOUT:-180}  # seconds for every part to answer (replicas import torch)

die() { echo "error: $*" >&2; exit 2; }

REPLICAS="" PORT="" PIDS_FILE="" REDIS_URL="" LOGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) echo "$USAGE"; exit 0 ;;
    --replicas|--port|--pids|--redis-url|--logs)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value ($USAGE)"
      case "$1" in
        --replicas) REPLICAS=$2 ;; --port) PORT=$2 ;; --pids) PIDS_FILE=$2 ;;
        --redis-url) REDIS_URL=$2 ;; --logs) LOGS=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown argument '$1' ($USAGE)" ;;
  esac
done
[ -n "$REPLICAS" ] && [ -n "$PORT" ] || die "--replicas and --port are required ($USAGE)"
[[ $REPLICAS =~ ^[0-9]+$ ]] && [ "$REPLICAS" -ge 1 ] && [ "$REPLICAS" -le 32 ] \
  || die "--replicas must be a whole number from 1 to 32, not '$REPLICAS'"
[[ $PORT =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] \
  || die "--port must be a port number from 1 to 65535, not '$PORT'"
if [ -n "$REDIS_URL" ] && ! [[ $REDIS_URL =~ ^rediss?://([^@/]*@)?[A-Za-z0-9.-]+:[0-9]+(/[0-9]+)?$ ]]; then
  die "--redis-url must look like redis://HOST:PORT/DB, not '$REDIS_URL'"
fi
if [ -n "$PIDS_FILE" ]; then
  [ -d "$(dirname "$PIDS_FILE")" ] || die "--pids: no folder $(dirname "$PIDS_FILE")"
fi
command -v "$PY" >/dev/null || die "no Python '$PY' (set PYTHON to the app's environment, e.g. PYTHON=.venv/bin/python)"
# a relative path (.venv/bin/python) made absolute, not resolved: a virtual environment's python is a symlink
case "$PY" in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;; esac
"$PY" -c "import streamlit, redis" 2>/dev/null \
  || die "$PY lacks streamlit or redis (install the app's requirements: pip install -r requirements.txt)"

# Debian's haproxy and redis-server, installed when missing (as .ci/run does for Chromium).
PATH=$PATH:/usr/sbin:/sbin
missing=()
command -v haproxy >/dev/null || missing+=(haproxy)
[ -n "$REDIS_URL" ] || command -v redis-server >/dev/null || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing ${missing[*]} with apt-get" >&2
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "could not install ${missing[*]} (apt-get install ${missing[*]})"
fi

# The port asked for must be free; the others are free loopback ports chosen now (N replicas and Redis).
PROBE=("$PY" "$ROOT/deploy/probe.py")
"${PROBE[@]}" busy "$PORT" || die "port $PORT is busy on 127.0.0.1 (choose another with --port)"
read -r -a FREE <<<"$("${PROBE[@]}" free $((REPLICAS + 1)))"

if [ -n "$LOGS" ]; then
  mkdir -p "$LOGS" || die "--logs: cannot create $LOGS"
  RUN=$(cd "$LOGS" && pwd); KEEP=1
else
  RUN=$(mktemp -d "${TMPDIR:-/tmp}/viz-local.XXXXXX"); KEEP=0
fi

STARTED=()      # every PID this script started
REPLICA_PIDS=()
HAPROXY_PID="" REDIS_PID="" WAITING=""  # WAITING: the helper being waited for

cleanup() {
  trap - INT TERM EXIT HUP
  [ -z "$WAITING" ] || kill "$WAITING" 2>/dev/null || true
  local pid alive
  for pid in "${STARTED[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do  # up to 10 s to stop cleanly, then SIGKILL
    alive=0
    for pid in "${STARTED[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${STARTED[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  [ "$KEEP" -eq 1 ] || rm -rf "$RUN"
}
stop() { cleanup; exit 0; }
# Runs a command in the background and waits for it: a signal then stops this script at once (bash runs a trap
# only after a foreground command ends).
waiting() { "$@" & WAITING=$!; local rc=0; wait "$WAITING" || rc=$?; WAITING=""; return "$rc"; }
fail() { echo "error: $*" >&2; cleanup; exit 1; }
trap stop INT TERM HUP
trap cleanup EXIT

# Redis: its own, append-only (appendonly.aof in the run folder), or the one given.
if [ -z "$REDIS_URL" ]; then
  mkdir -p "$RUN/redis"
  redis-server --bind 127.0.0.1 --port "${FREE[$REPLICAS]}" --dir "$RUN/redis" --appendonly yes --save "" \
    --daemonize no >"$RUN/redis.log" 2>&1 &
  REDIS_PID=$!; STARTED+=("$REDIS_PID"); disown "$REDIS_PID"
  REDIS_URL="redis://127.0.0.1:${FREE[$REPLICAS]}/0"
  waiting "${PROBE[@]}" redis "$REDIS_URL" 30 2>"$RUN/wait.log" \
    || fail "$(cat "$RUN/wait.log") (log: $RUN/redis.log)"
else
  waiting "${PROBE[@]}" redis "$REDIS_URL" 5 2>"$RUN/wait.log" || fail "$(cat "$RUN/wait.log")"
fi
echo "redis $REDIS_URL"

# The replicas: one cookie secret (Streamlit signs its XSRF cookie with it: uploads keep working on another replica).
SECRET=$("$PY" -c "import secrets; print(secrets.token_urlsafe(32))")
cd "$ROOT"
for i in $(seq 1 "$REPLICAS"); do
  STREAMLIT_SERVER_COOKIE_SECRET=$SECRET VIZ_CLASS_STORE=$REDIS_URL "$PY" -m streamlit run serve.py \
    --server.address 127.0.0.1 --server.port "${FREE[$((i - 1))]}" --server.headless true \
    >"$RUN/replica$i.log" 2>&1 &
  REPLICA_PIDS+=("$!"); STARTED+=("$!"); disown "$!"  # disowned: bash reports no "Killed" when one dies
done
if [ -n "$PIDS_FILE" ]; then
  printf '%s\n' "${REPLICA_PIDS[@]}" >"$PIDS_FILE.tmp" && mv "$PIDS_FILE.tmp" "$PIDS_FILE"
fi

# HAProxy's configuration: deploy/haproxy.cfg with this bind address and these servers.
SERVERS=""
for i in $(seq 1 "$REPLICAS"); do
  SERVERS+="    server r$i 127.0.0.1:${FREE[$((i - 1))]} cookie r$i check\n"
done
awk -v bind="    bind 127.0.0.1:$PORT" -v servers="$SERVERS" '
  /^# resolvers: begin/ { skip = 1 }
  /^    # servers: begin/ {
    skip = 1; print "    cookie VIZ_REPLICA insert indirect nocache httponly"; printf "%s", servers
  }
  !skip && /^    bind / { print bind; next }
  !skip { print }
  /^# resolvers: end/ || /^    # servers: end/ { skip = 0 }
' "$ROOT/deploy/haproxy.cfg" >"$RUN/haproxy.cfg"
haproxy -c -q -f "$RUN/haproxy.cfg" >"$RUN/haproxy-check.log" 2>&1 \
  || fail "the generated HAProxy configuration is invalid: $(tail -n 3 "$RUN/haproxy-check.log" | tr '\n' ' ')"

# Every replica answers on its own port, then HAProxy starts and answers on P.
URLS=()
for i in $(seq 1 "$REPLICAS"); do URLS+=("http://127.0.0.1:${FREE[$((i - 1))]}/_stcore/health"); done
waiting "${PROBE[@]}" http "$START_TIMEOUT" "${REPLICA_PIDS[*]}" "${URLS[*]}" 2>"$RUN/wait.log" \
  || fail "a replica did not start ($(cat "$RUN/wait.log")); its log: $(tail -n 5 "$RUN"/replica*.log | tr '\n' ' ')"

haproxy -db -f "$RUN/haproxy.cfg" >"$RUN/haproxy.log" 2>&1 &
HAPROXY_PID=$!; STARTED+=("$HAPROXY_PID"); disown "$HAPROXY_PID"
waiting "${PROBE[@]}" http "$START_TIMEOUT" "$HAPROXY_PID" "http://127.0.0.1:$PORT/_stcore/health" 2>"$RUN/wait.log" \
  || fail "HAProxy did not start on 127.0.0.1:$PORT: $(tail -n 3 "$RUN/haproxy.log" | tr '\n' ' ')"
echo "ready http://127.0.0.1:$PORT"

# Until SIGINT/SIGTERM: say when a replica or Redis exits (HAProxy sends its browsers to the others); HAProxy's
# own exit ends everything.
declare -A REPORTED=()
while :; do
  kill -0 "$HAPROXY_PID" 2>/dev/null || fail "HAProxy exited: $(tail -n 3 "$RUN/haproxy.log" | tr '\n' ' ')"
  for i in $(seq 1 "$REPLICAS"); do
    pid=${REPLICA_PIDS[$((i - 1))]}
    if [ -z "${REPORTED[$pid]:-}" ] && ! kill -0 "$pid" 2>/dev/null; then
      REPORTED[$pid]=1; echo "replica r$i (pid $pid) exited; HAProxy sends its browsers to the others" >&2
    fi
  done
  if [ -n "$REDIS_PID" ] && [ -z "${REPORTED[$REDIS_PID]:-}" ] && ! kill -0 "$REDIS_PID" 2>/dev/null; then
    REPORTED[$REDIS_PID]=1; echo "Redis (pid $REDIS_PID) exited: classes cannot be read or changed" >&2
  fi
  waiting sleep 1 || true
done
