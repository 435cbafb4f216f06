#!/usr/bin/env bash
# replicas.sh: N `specula serve` replicas behind nginx on loopback, as the
# current user (no root): the replicas on free ports, nginx on --port (default
# 8080) with a config written to the state directory.
#
#   scripts/replicas.sh N [--port P] [--state DIR] [--bin SPECULA] -- SERVE_ARGS...
#   e.g. scripts/replicas.sh 3 --port 8080 -- -m model.gguf --parallel 2
#
# nginx routes by conversation: requests with the same X-Conversation-Id
# header go to the same replica (consistent hashing), so that replica's
# prompt cache holds the conversation; requests without the header are
# spread at random. Health checks are passive: a replica that refuses a
# connection or times out is skipped for 10 s (max_fails=1 fail_timeout=10s)
# and a request not yet sent to it goes to the next one; a request already
# sent (POST is not idempotent) is not replayed: it fails with 502 and the
# client retries. Streams pass through unbuffered. Each response names the
# replica that answered in X-Specula-Upstream.
#
# Prints "replicas: nginx on http://127.0.0.1:P ..." once everything
# answers /health, then runs until SIGINT or SIGTERM, which stop nginx and
# drain the replicas (SIGTERM: running requests finish, see --shutdown-grace).
# The state directory (a new temporary one, removed at the end, unless
# --state) holds nginx.conf, the logs, and replica-I.pid / replica-I.port
# for I = 1..N.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
n=$1; shift
case $n in ''|*[!0-9]*) echo "replicas: N must be a positive integer, got '$n'" >&2; exit 2 ;; esac
[ "$n" -ge 1 ] && [ "$n" -le 64 ] || { echo "replicas: N must be in [1, 64], got $n" >&2; exit 2; }
port=8080 state="" bin="${SPECULA_BIN:-$here/build/specula}"
while [ $# -gt 0 ]; do
  case $1 in
    --port) port=$2; shift 2 ;;
    --state) state=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "replicas: unknown option '$1' (options before --, serve's after)" >&2; exit 2 ;;
  esac
done
case $port in ''|*[!0-9]*) echo "replicas: --port must be a port number, got '$port'" >&2; exit 2 ;; esac
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || {
  echo "replicas: nginx is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
[ -x "$bin" ] || { echo "replicas: no specula binary at $bin (make, or --bin)" >&2; exit 1; }
made_state=0
if [ -z "$state" ]; then state=$(mktemp -d "${TMPDIR:-/tmp}/specula-replicas-XXXXXX"); made_state=1; fi
mkdir -p "$state/tmp"

pids=()
stop_all() {
  trap - EXIT INT TERM
  [ -f "$state/nginx.pid" ] && kill -QUIT "$(cat "$state/nginx.pid")" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "$made_state" = 1 ] && rm -rf "$state"
  return 0
}
trap stop_all EXIT
trap 'exit 0' INT TERM

servers=""
for i in $(seq 1 "$n"); do
  "$bin" serve "$@" --port 0 2>"$state/replica-$i.log" >/dev/null &
  pids+=($!)
  echo $! >"$state/replica-$i.pid"
  p=""
  for _ in $(seq 1 600); do
    p=$(grep -o 'http://127.0.0.1:[0-9]*' "$state/replica-$i.log" 2>/dev/null | head -1 | sed 's/.*://') || true
    [ -n "$p" ] && break
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$p" ]; then
    echo "replicas: replica $i did not start:" >&2; cat "$state/replica-$i.log" >&2; exit 1
  fi
  echo "$p" >"$state/replica-$i.port"
  servers="$servers        server 127.0.0.1:$p max_fails=1 fail_timeout=10s;
"
done

cat >"$state/nginx.conf" <<EOF
# written by scripts/replicas.sh: $n specula replicas behind one listener
worker_processes 1;
pid $state/nginx.pid;
error_log $state/error.log warn;
events { worker_connections 4096; }
http {
    access_log $state/access.log;
    client_body_temp_path $state/tmp/body;
    proxy_temp_path $state/tmp/proxy;
    fastcgi_temp_path $state/tmp/fastcgi;
    uwsgi_temp_path $state/tmp/uwsgi;
    scgi_temp_path $state/tmp/scgi;
    # affinity key: the conversation, or a random one (spread) without it
    map \$http_x_conversation_id \$specula_affinity {
        "" \$request_id;
        default \$http_x_conversation_id;
    }
    upstream specula {
        hash \$specula_affinity consistent;
$servers        keepalive 32;
    }
    server {
        listen 127.0.0.1:$port;
        client_max_body_size 2m;
        location / {
            proxy_pass http://specula;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
            proxy_next_upstream error timeout;
            proxy_next_upstream_tries 3;
            add_header X-Specula-Upstream \$upstream_addr always;
        }
    }
}
EOF
"$NGINX" -p "$state" -c "$state/nginx.conf" -e "$state/error.log" -g 'daemon off;' &
nginx_pid=$!
pids+=("$nginx_pid")
for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    echo "replicas: nginx on http://127.0.0.1:$port, $n replicas (ports $(cat "$state"/replica-*.port | tr '\n' ' ' | sed 's/ $//')), state in $state"
    wait "$nginx_pid" || true
    exit 0
  fi
  kill -0 "$nginx_pid" 2>/dev/null || break
  sleep 0.1
done
echo "replicas: nginx did not start on port $port:" >&2
cat "$state/error.log" >&2 || true
exit 1
