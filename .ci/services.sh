# PostgreSQL and Redis on loopback for the tests that need real servers. Sourced by ./dev test.
free_port() {
  # A port nothing listens on now, so two runs on one machine do not collide.
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
PG_PORT=${AGENTSITE_TEST_PG_PORT:-$(free_port)}
REDIS_PORT=${AGENTSITE_TEST_REDIS_PORT:-$(free_port)}
SERVICES_DIR=""

services_start() {
  SERVICES_DIR=$(mktemp -d /tmp/agentsite-services.XXXXXX)
  chmod 755 "$SERVICES_DIR"
  local pg_bin
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  local run_as=()
  [ "$(id -u)" = 0 ] && run_as=(runuser -u postgres --)
  mkdir -p "$SERVICES_DIR/pg"
  [ "$(id -u)" = 0 ] && chown postgres "$SERVICES_DIR" "$SERVICES_DIR/pg"
  "${run_as[@]}" "$pg_bin/initdb" -D "$SERVICES_DIR/pg" -U postgres -A trust --no-sync >/dev/null
  "${run_as[@]}" "$pg_bin/pg_ctl" -D "$SERVICES_DIR/pg" -l "$SERVICES_DIR/pg.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $SERVICES_DIR/pg -c fsync=off -c max_connections=300" start >/dev/null
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
    --daemonize yes --pidfile "$SERVICES_DIR/redis.pid" --logfile "$SERVICES_DIR/redis.log"
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export AGENTSITE_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
  # For the tests that restart the server (pg_ctl -D "$AGENTSITE_TEST_PG_DATA" restart).
  export AGENTSITE_TEST_PG_DATA="$SERVICES_DIR/pg" AGENTSITE_TEST_PG_BIN="$pg_bin"
  export AGENTSITE_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
  echo "services: PostgreSQL on 127.0.0.1:$PG_PORT, Redis on 127.0.0.1:$REDIS_PORT" >&2
}

services_stop() {
  [ -n "$SERVICES_DIR" ] || return 0
  local pg_bin
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$pg_bin/pg_ctl" -D "$SERVICES_DIR/pg" -m immediate stop >/dev/null 2>&1 || true
  else
    "$pg_bin/pg_ctl" -D "$SERVICES_DIR/pg" -m immediate stop >/dev/null 2>&1 || true
  fi
  [ -f "$SERVICES_DIR/redis.pid" ] && kill "$(cat "$SERVICES_DIR/redis.pid")" 2>/dev/null || true
  rm -rf "$SERVICES_DIR"
}
