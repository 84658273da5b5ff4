#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# cli-queue.sh: the wait queue in `redislock status` and `list` (text and JSON). A
# private redis-server on a Unix socket; one `redislock run` holds a lock, two more wait
# for it, one after the other: status must show them in line in their order of arrival
# (position, host:pid, since when), the JSON outputs must carry them as a "queue"
# array, and the line must be empty once all three have run. Prints TAP. Synchronisation
# uses marker files and the queue's size in Redis, polled in bounded loops.

set -u

RL=${REDISLOCK:-${G_TEST_BUILDDIR:-.}/../tools/redislock}
T=30 # bound, in seconds, on every foreground redislock call

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
diag () { printf '%s\n' "$@" | sed 's/^/# /'; }
check () { d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }
# expect_rc DESCRIPTION WANT GOT
expect_rc () {
  if [ "$3" -eq "$2" ]; then ok "$1"; else not_ok "$1"; diag "exit status $3, expected $2"; show_err; fi
}
show_err () { [ -s "$tmp/err" ] && diag "stderr:" "$(cat "$tmp/err")"; return 0; }

if ! command -v redis-server >/dev/null 2>&1 && [ -x /usr/sbin/redis-server ]; then
  PATH=$PATH:/usr/sbin
fi
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "1..0 # SKIP redis-server or redis-cli is not installed"
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "1..0 # SKIP python3 is not installed (it reads the JSON)"
  exit 0
fi
if [ ! -x "$RL" ]; then
  echo "Bail out! $RL has not been built"
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/redislock-cli-queue.XXXXXX") || exit 1
sock=$tmp/s.sock
bg_pids=
cleanup () {
  touch "$tmp/line.release"
  for p in $bg_pids; do kill -TERM "$p" 2>/dev/null; done
  for p in $bg_pids; do wait "$p" 2>/dev/null; done
  [ -n "${server:-}" ] && kill -KILL "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

. "$(dirname "$0")/redis-server.sh"
start_redis_server
rcli () { redis-cli -s "$sock" "$@"; }
rl () { timeout -k 5 $T "$RL" "$@"; }
# wait_for FILE: polls for FILE for at most 20 s
wait_for () {
  i=0
  while [ ! -e "$1" ]; do
    i=$((i + 1))
    [ $i -gt 400 ] && return 1
    sleep 0.05
  done
  return 0
}
# start_bg COMMAND…: runs COMMAND in the background; its pid is in $bg
start_bg () { "$@" 2>"$tmp/bg.err" & bg=$!; bg_pids="$bg_pids $bg"; }
# hold.sh STARTED RELEASE: a command that signals it runs, then waits (at most 60 s, so
# nothing outlives the test) until told to end
cat >"$tmp/hold.sh" <<'EOF'
touch "$1"
i=0
while [ ! -e "$2" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
EOF
hold () { echo "sh $tmp/hold.sh $tmp/$1.started $tmp/$1.release"; }
# json_check FILE PYTHON-EXPRESSION: the expression (on d, the parsed JSON) holds
json_check () {
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"
}

# inline N: polls until the lock "line" has N places in its wait queue (at most 20 s)
inline () {
  i=0
  while [ "$(rcli ZCARD 'queue:{redislock:line}')" != "$1" ]; do
    i=$((i + 1))
    [ $i -gt 400 ] && return 1
    sleep 0.05
  done
  return 0
}
start_bg "$RL" run line -- $(hold line)
lholder=$bg
check "queue: the holder runs" wait_for "$tmp/line.started"
start_bg "$RL" run --wait-queue --wait 20s line -- true
lfirst=$bg
check "queue: the first waiter stands in line" inline 1
start_bg "$RL" run --wait-queue --wait 20s line -- true
lsecond=$bg
check "queue: the second waiter stands in line" inline 2
rl status line >"$tmp/out" 2>"$tmp/err"; expect_rc "status of a lock with a line: 0" 0 $?
check "status shows the first in line" grep -q "^  in line: 1\. .*:$lfirst (since [0-9:.]*, [0-9.]*s)\$" "$tmp/out"
check "status shows the second in line" grep -q "^  in line: 2\. .*:$lsecond (since " "$tmp/out"
rl status --json line >"$tmp/out" 2>"$tmp/err"; expect_rc "status --json of a lock with a line: 0" 0 $?
check "status --json: the queue in order" json_check "$tmp/out" \
  "[(q['position'], q['pid']) for q in d[0]['queue']] == [(1, $lfirst), (2, $lsecond)] and d[0]['queue'][0]['since_us'] <= d[0]['queue'][1]['since_us'] and d[0]['queue'][0]['client_id'].startswith(d[0]['queue'][0]['host'] + ':$lfirst:')"
rl list --json >"$tmp/out" 2>"$tmp/err"; expect_rc "list --json with a line: 0" 0 $?
check "list --json: the queue" json_check "$tmp/out" \
  "[[q['pid'] for q in x['queue']] for x in d if x['name'] == 'line'] == [[$lfirst, $lsecond]]"
touch "$tmp/line.release"
wait "$lholder"; expect_rc "queue: the holder: 0" 0 $?
wait "$lfirst"; expect_rc "queue: the first waiter: 0" 0 $?
wait "$lsecond"; expect_rc "queue: the second waiter: 0" 0 $?
rl status --json line >"$tmp/out" 2>"$tmp/err"; expect_rc "status --json once the line is served: 1" 1 $?
check "status --json: nobody in line" json_check "$tmp/out" "d[0]['queue'] == []"

echo "1..$n"
[ $failures -eq 0 ]
