#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# watch.sh: `redislock watch` in a real terminal, a pane of a private tmux server, and
# its --once and --json outputs. A private redis-server on a Unix socket; one
# `redislock run` holds a lock, another waits for it (its waits-for record appears once
# it has waited a few hundred milliseconds). The pane must show the lock, its holder
# (host:pid of the holding process), its waiter (host:pid of the waiting one) and the
# one process in its wait queue; a
# resize must redraw it at once; q, and in a second pane Ctrl-C, must end the command
# (its exit is recorded by the pane's shell) with the terminal put back. `status` must
# list the waiter under the lock too. Prints TAP. Without tmux (or Redis) it is skipped: a
# TAP skip under make check, exit status 77 when run by hand. Synchronisation uses
# marker files and the pane's contents, polled in bounded loops.

set -u

RL=${REDISLOCK:-${G_TEST_BUILDDIR:-.}/../tools/redislock}

skip () {
  echo "1..0 # SKIP $1"
  [ -n "${G_TEST_BUILDDIR:-}" ] && exit 0
  exit 77
}

if ! command -v redis-server >/dev/null 2>&1 && [ -x /usr/sbin/redis-server ]; then
  PATH=$PATH:/usr/sbin
fi
command -v tmux >/dev/null 2>&1 || skip "tmux is not installed"
command -v redis-server >/dev/null 2>&1 || skip "redis-server is not installed"
command -v redis-cli >/dev/null 2>&1 || skip "redis-cli is not installed"
if [ ! -x "$RL" ]; then
  echo "Bail out! $RL has not been built"
  exit 1
fi

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
diag () { printf '%s\n' "$@" | sed 's/^/# /'; }
check () { d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/redislock-watch.XXXXXX") || exit 1
sock=$tmp/s.sock
tmux_sock=rlwatch$$
holder= waiter= server=
cleanup () {
  tmux -L "rlwatch$$" kill-server 2>/dev/null
  tmux -L "rlwatch$$b" kill-server 2>/dev/null
  touch "$tmp/release"
  for p in $waiter $holder; do kill -TERM "$p" 2>/dev/null; done
  for p in $waiter $holder; do wait "$p" 2>/dev/null; done
  [ -n "$server" ] && kill -KILL "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

. "$(dirname "$0")/redis-server.sh"
start_redis_server
host=$(hostname)

# poll COMMAND…: retries COMMAND for at most 20 s
poll () {
  i=0
  until "$@"; do
    i=$((i + 1))
    [ $i -gt 400 ] && return 1
    sleep 0.05
  done
}

echo "1..13"

"$RL" run -r wt shared -- sh -c "touch '$tmp/holding'; while [ ! -e '$tmp/release' ]; do sleep 0.05; done" \
  >/dev/null 2>"$tmp/holder.err" &
holder=$!
poll test -e "$tmp/holding" || { echo "Bail out! the holder did not get the lock"; exit 1; }
"$RL" run -r wt --wait-queue --wait 60s shared -- true >/dev/null 2>"$tmp/waiter.err" &
waiter=$!
# The waiter's record: in the registry key's hash once it has waited long enough.
recorded () { test "$(redis-cli -s "$sock" HLEN 'waits:{wt}')" = 1; }
poll recorded
check "the waiter's record is in the store" recorded

"$RL" status -r wt shared >"$tmp/status" 2>&1
check "status lists the waiter (host:pid) under the lock" grep -q "^  waiter $host:$waiter since " "$tmp/status"

"$RL" watch -r wt --once >"$tmp/once" 2>&1
check "watch --once shows the lock, its holder and its waiter" \
  grep -q "^shared  *$host:$holder .*$host:$waiter (" "$tmp/once"
check "watch --once shows the waiting process in the lock's line" \
  grep -q "^shared  *$host:$holder .* 1  *$host:$waiter (" "$tmp/once"

"$RL" watch -r wt --json >"$tmp/json" 2>&1
check "watch --json is one document with the holder's pid and the waiter's" \
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
[l] = [l for l in d['locks'] if l['name'] == 'shared']
assert l['held'] and l['pid'] == int(sys.argv[2]) and l['host'] == sys.argv[4]
assert [w['pid'] for w in l['waiters']] == [int(sys.argv[3])]
assert l['in_line'] == 1
" "$tmp/json" "$holder" "$waiter" "$host"

tmux -L "$tmux_sock" -f /dev/null new-session -d -x 150 -y 20 \
  "REDIS_URL='$REDIS_URL' '$RL' watch -r wt --interval 30s; echo \$? >'$tmp/watch-exit'; sleep 60"
pane () { tmux -L "$tmux_sock" capture-pane -p -t 0 2>/dev/null; }
shows () { pane | grep -q "$1"; }
poll shows "^shared "
check "the pane shows the lock" shows "^shared "
check "the pane shows its holder" shows "^shared  *$host:$holder "
check "the pane shows its waiter" shows "^shared .*$host:$waiter ("
check "the pane shows the header" shows "^NAME  *HOLDER  *TTL  *HAND/S  *LINE  *WAITERS"
pane | sed 's/^/# /'

# A frame comes every 30 s: only SIGWINCH can have it drawn again for 40 columns now,
# the header cut to fit.
tmux -L "$tmux_sock" resize-window -t 0 -x 40 -y 10
poll shows "^redislock watch .*…\$"
check "a resize draws the frame again at once, fitting the new width" shows "^redislock watch .*…\$"
pane | sed 's/^/# /'
tmux -L "$tmux_sock" send-keys -t 0 q
poll test -e "$tmp/watch-exit"
check "q ends watch with status 0" test "$(cat "$tmp/watch-exit" 2>/dev/null)" = 0
check "the terminal is put back (cursor shown, main screen)" \
  sh -c "tmux -L '$tmux_sock' display -p -t 0 '#{alternate_on} #{cursor_flag}' | grep -q '^0 1\$'"

# Ctrl-C ends it too, the terminal put back (the pane's shell ignores SIGINT, so that
# only watch hears it).
tmux -L "$tmux_sock" kill-server 2>/dev/null
tmux_sock=${tmux_sock}b
tmux -L "$tmux_sock" -f /dev/null new-session -d -x 100 -y 20 \
  "trap '' INT; REDIS_URL='$REDIS_URL' '$RL' watch -r wt; echo \$? >'$tmp/watch-exit2'; sleep 60"
poll shows "^shared "
tmux -L "$tmux_sock" send-keys -t 0 C-c
poll test -e "$tmp/watch-exit2"
check "Ctrl-C ends watch with status 0, the terminal put back" \
  sh -c "test \"\$(cat '$tmp/watch-exit2')\" = 0 && tmux -L '$tmux_sock' display -p -t 0 '#{alternate_on} #{cursor_flag}' | grep -q '^0 1\$'"

touch "$tmp/release"
wait "$holder" 2>/dev/null
wait "$waiter" 2>/dev/null
holder= waiter=
[ $failures -eq 0 ]
