# SPDX-License-Identifier: LGPL-2.1-or-later
# redis-server.sh: sourced by the shell tests (cli.sh, cli-queue.sh, watch.sh) to start their private
# redis-server, so that they start it one way: on the Unix socket $sock, persistence
# off, its log in $tmp/redis.log, its pid in $server (the caller kills it), its URL in
# REDIS_URL (exported). Waits up to 10 s for PING; prints a TAP "Bail out!" with the
# log and exits 1 when it does not come up.
start_redis_server () {
  redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --save '' --appendonly no \
    --daemonize no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
  server=$!
  i=0
  until [ "$(redis-cli -s "$sock" PING 2>/dev/null)" = PONG ]; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 "$server" 2>/dev/null; then
      echo "Bail out! redis-server did not start"
      sed 's/^/# /' "$tmp/redis.log"
      exit 1
    fi
    sleep 0.05
  done
  REDIS_URL=unix://$sock
  export REDIS_URL
}
