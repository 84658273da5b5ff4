#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# cli.sh: tests of the redislock command-line tool (tools/redislock.c). Starts a private
# redis-server on a Unix socket in a temporary directory and checks the exit statuses of
# `redislock run` (the command's status, 1 not acquired, 2 Redis error, 3 lease lost,
# 64 usage), where its options end and the command begins, the command's environment,
# lease loss (SIGKILL within the lease margin), mutual exclusion of concurrent runs,
# --fencing (REDIS_LOCK_TOKEN, the counter, the last token in status), several --url (a
# quorum over three servers, two of them enough), several locks with
# --lock (all or none, one line per lock in the environment), --permits (a permit of a
# semaphore, its size checked), shared holds with --read,
# signal forwarding (one SIGINT reaching the command once, on a terminal or sent to the
# process group: Linux, python3), `status` / `list` output (text and JSON), escaped
# holders, passwords kept out of every message, and `demo`. Prints TAP.
# Synchronisation with background commands uses marker files polled in bounded loops.

set -u

RL=${REDISLOCK:-${G_TEST_BUILDDIR:-.}/../tools/redislock}
T=30 # bound, in seconds, on every foreground redislock call

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
diag () { printf '%s\n' "$@" | sed 's/^/# /'; }
# check DESCRIPTION COMMAND…: one TAP line for whether COMMAND succeeds
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
if [ ! -x "$RL" ]; then
  echo "Bail out! $RL has not been built"
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/redislock-cli.XXXXXX") || exit 1
sock=$tmp/s.sock
bg_pids=
cleanup () {
  # redislock forwards TERM to its command; KILL takes the command along (Linux)
  for p in $bg_pids; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.2
  for p in $bg_pids; do kill -KILL "$p" 2>/dev/null; done
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
one_line () { [ "$(wc -l <"$1")" -eq 1 ]; }
# lacks FILE PATTERN…: no line of FILE matches any PATTERN (fixed strings)
lacks () { f=$1; shift; for p in "$@"; do grep -q -F -e "$p" "$f" && return 1; done; return 0; }
# args_are FILE ARG…: FILE holds exactly the lines ARG…
args_are () { f=$1; shift; [ "$(cat "$f")" = "$(printf '%s\n' "$@")" ]; }
# hold.sh STARTED RELEASE: a command that signals it runs, then waits (at most 60 s, so
# nothing outlives the test) until told to end
cat >"$tmp/hold.sh" <<'EOF'
touch "$1"
i=0
while [ ! -e "$2" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
EOF
hold () { echo "sh $tmp/hold.sh $tmp/$1.started $tmp/$1.release"; }
if command -v python3 >/dev/null 2>&1; then have_python=yes; else have_python=no; fi
# json_check FILE PYTHON-EXPRESSION: the expression (on d, the parsed JSON) holds
json_check () {
  if [ $have_python = yes ]; then
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"
  else
    return 0
  fi
}

# --- usage errors: 64 with a usage line -------------------------------------------------
"$RL" >/dev/null 2>"$tmp/err"; expect_rc "no arguments: 64" 64 $?
"$RL" frobnicate 2>"$tmp/err"; expect_rc "unknown command: 64" 64 $?
rl run 2>"$tmp/err"; expect_rc "run without NAME: 64" 64 $?
check "usage line on stderr" grep -q '^Usage: redislock run' "$tmp/err"
rl run lonely 2>"$tmp/err"; expect_rc "run without COMMAND: 64" 64 $?
rl run lonely -- 2>"$tmp/err"; expect_rc "run with nothing after --: 64" 64 $?
rl run --bogus x -- true 2>"$tmp/err"; expect_rc "unknown option: 64" 64 $?
rl run '' -- true 2>"$tmp/err"; expect_rc "empty name: 64" 64 $?
for d in soon 10x -1s 1.2.3 ms '' 5sec; do
  rl run --wait "$d" x -- true 2>"$tmp/err"; expect_rc "--wait '$d' rejected: 64" 64 $?
done
rl run --ttl 0 x -- true 2>"$tmp/err"; expect_rc "--ttl 0 rejected: 64" 64 $?
# below the floor the watchdog can keep: refused, and the message says why
for d in 10ms 99ms 0.05; do
  rl run --ttl $d x -- touch "$tmp/shortttl.ran" 2>"$tmp/err"; expect_rc "--ttl $d refused: 64" 64 $?
done
check "a too short --ttl says the floor and why" grep -q 'at least 100ms.*renew' "$tmp/err"
check "a too short --ttl runs nothing" test ! -e "$tmp/shortttl.ran"
rl run --kill-after 3y x -- true 2>"$tmp/err"; expect_rc "--kill-after 3y rejected: 64" 64 $?
rl run --registry '' x -- true 2>"$tmp/err"; expect_rc "empty registry: 64" 64 $?
rl run --url 'ftp://example.org' x -- true 2>"$tmp/err"; expect_rc "unsupported URL scheme: 64" 64 $?
rl status 2>"$tmp/err"; expect_rc "status without NAME: 64" 64 $?
rl list extra 2>"$tmp/err"; expect_rc "list with an argument: 64" 64 $?
rl demo --processes 0 2>"$tmp/err"; expect_rc "demo --processes 0: 64" 64 $?
"$RL" --help >"$tmp/out" 2>"$tmp/err"; expect_rc "--help: 0" 0 $?
check "--help lists the commands" grep -q 'status' "$tmp/out"
for c in run status list demo; do
  "$RL" $c --help >"$tmp/out" 2>"$tmp/err"; expect_rc "$c --help: 0" 0 $?
done
"$RL" help run >"$tmp/out" 2>"$tmp/err"; expect_rc "help run: 0" 0 $?
check "run --help mentions --wait" grep -q -- '--wait' "$tmp/out"
"$RL" --version >"$tmp/out"; expect_rc "--version: 0" 0 $?
"$RL" help --help >"$tmp/out" 2>"$tmp/err"; expect_rc "help --help: 0" 0 $?
check "help --help says how to use help" grep -q '^Usage: redislock help' "$tmp/out"

# --- every place that lists URL forms lists all of them ---------------------------------
# (the rediss forms only in a build with TLS: $REDISLOCK_TLS says so)
srcdir=${G_TEST_SRCDIR:-$(dirname "$0")}/..
all_forms="redis:// unix:// redis-sentinel:// redis-cluster:// memory:// rediss:// rediss-sentinel://
rediss-cluster://"
forms="redis:// unix:// redis-sentinel:// redis-cluster:// memory://"
[ "${REDISLOCK_TLS:-yes}" = yes ] && forms=$all_forms
for c in run status list demo; do
  "$RL" $c --help >"$tmp/out" 2>&1
  missing=; for f in $forms; do grep -q -- "$f" "$tmp/out" || missing="$missing $f"; done
  check "$c --help lists every URL form${missing:+ (missing:$missing)}" test -z "$missing"
done
rl run --url 'ftp://example.org' x -- true 2>"$tmp/err"
missing=; for f in $forms; do grep -q -- "$f" "$tmp/err" || missing="$missing $f"; done
check "the unknown-scheme error lists every URL form${missing:+ (missing:$missing)}" test -z "$missing"
for doc in tools/redislock.1 include/redislock/redislock-registry.h; do
  [ -f "$srcdir/$doc" ] || { ok "$doc lists every URL form # SKIP not found"; continue; }
  # the man page escapes its dashes
  sed 's/\\-/-/g' "$srcdir/$doc" >"$tmp/doc"
  missing=; for f in $all_forms; do
    grep -q -- "$f" "$tmp/doc" || missing="$missing $f"; done
  check "$doc lists every URL form${missing:+ (missing:$missing)}" test -z "$missing"
  if tr '\n' ' ' <"$tmp/doc" | grep -q -i -e 'TLS) is not supported' -e 'rediss://` is refused' \
       -e 'TLS is not built in'; then
    not_ok "$doc does not say TLS is unsupported"
  else
    ok "$doc does not say TLS is unsupported"
  fi
done

# --- the man page gives every option of every command a paragraph of its own ----------
# (an option heading is the line after .TP; one without it runs into the paragraph above)
if [ -f "$srcdir/tools/redislock.1" ]; then
  awk 'prev == ".TP" { print } { prev = $0 }' "$srcdir/tools/redislock.1" | sed 's/\\-/-/g' \
    | grep -o -- '--[a-z-]*' | sort -u >"$tmp/man-options"
  for c in run status list watch demo; do
    "$RL" $c --help 2>/dev/null | sed -n 's/^ *\(-[a-zA-Z0-9], \)\{0,1\}\(--[a-z-]*\).*/\2/p' \
      | grep -v -x -e --help -e '--help-[a-z]*'
  done | sort -u >"$tmp/help-options"
  missing=$(comm -23 "$tmp/help-options" "$tmp/man-options" | tr '\n' ' ')
  check "every option has a paragraph of its own in the man page${missing:+ (not: $missing)}" \
    test -z "$missing"
else
  ok "every option has a paragraph of its own in the man page # SKIP not found"
fi

# --- a short option's value may be attached: -w5s as -w 5s --------------------------------
rl run -w5s attached -- true 2>"$tmp/err"; expect_rc "run -w5s NAME -- true: 0" 0 $?
rl run -fw5s attached -- sh -c 'test -n "$REDIS_LOCK_TOKEN"' 2>"$tmp/err"
expect_rc "run -fw5s (a flag, then an attached value): 0" 0 $?
rl run -t2s -k100ms attached -- true 2>"$tmp/err"; expect_rc "run -t2s -k100ms: 0" 0 $?
rl run -w5x attached -- true 2>"$tmp/err"; expect_rc "run -w5x: an attached bad duration, 64" 64 $?
check "the bad attached duration is named" grep -q "'5x'" "$tmp/err"
rl run attached -- sh -c 'printf "%s\n" "$@" >"$0"' "$tmp/args-attached" -w5s 2>"$tmp/err"
expect_rc "a command's own -w5s: 0" 0 $?
check "the command got its -w5s untouched" args_are "$tmp/args-attached" -w5s
rl status -r"redislock" attached >"$tmp/out" 2>"$tmp/err"; expect_rc "status -rKEY (free): 1" 1 $?

# --- a value that is clamped is said to be -----------------------------------------------
rl run --kill-after 1h clamp -- true 2>"$tmp/err"; expect_rc "run --kill-after 1h: 0" 0 $?
check "--kill-after 1h warns that it is clamped to the margin (3s)" \
  grep -q 'warning: --kill-after 1h .*using 3s' "$tmp/err"
rl run --kill-after 1s clamp -- true 2>"$tmp/err"; expect_rc "run --kill-after 1s: 0" 0 $?
check "--kill-after within the margin: no warning" test ! -s "$tmp/err"

# --- the command's status passes through ------------------------------------------------
rl run st -- sh -c 'exit 7' 2>"$tmp/err"; expect_rc "command status 7 passed through" 7 $?
rl run st -- true 2>"$tmp/err"; expect_rc "command success: 0" 0 $?
rl run st sh -c 'exit 5' 2>"$tmp/err"; expect_rc "no -- needed: status 5" 5 $?
rl run --wait 500ms --ttl 2.5s --kill-after 1m -r other st -- true 2>"$tmp/err"
expect_rc "durations 500ms, 2.5s, 1m accepted" 0 $?
rl run --wait 2 --ttl 0.5 st -- true 2>"$tmp/err"; expect_rc "plain numbers are seconds" 0 $?
rl run --wait forever st -- true 2>"$tmp/err"; expect_rc "--wait forever accepted" 0 $?
rl run --wait 1s -- -dash sh -c 'printf "%s\n" "$REDIS_LOCK_KEY" >"$0/dash.key"; exit 4' "$tmp" 2>"$tmp/err"
expect_rc "NAME after --: status 4" 4 $?
check "NAME after -- may start with a dash" test "$(cat "$tmp/dash.key")" = redislock:-dash

# --- only the first -- (or NAME) ends redislock's options: the rest is the command's ------
# argv.sh FILE ARG…: writes its ARGs to FILE, one a line
printf '%s\n' 'out=$1; shift; printf "%s\n" "$@" >"$out"' >"$tmp/argv.sh"
rl run st sh "$tmp/argv.sh" "$tmp/args1" log -- f 2>"$tmp/err"
expect_rc "a command with a -- of its own, no -- before it: 0" 0 $?
check "the command got 'log -- f'" args_are "$tmp/args1" log -- f
rl run st -- sh "$tmp/argv.sh" "$tmp/args2" -- f 2>"$tmp/err"; expect_rc "NAME -- COMMAND with a -- of its own: 0" 0 $?
check "the command got '-- f'" args_are "$tmp/args2" -- f
rl run --wait 1s -- st -- sh "$tmp/argv.sh" "$tmp/args3" -- --wait 2s -- 2>"$tmp/err"
expect_rc "-- NAME -- COMMAND with -- and options of its own: 0" 0 $?
check "the command got '-- --wait 2s --'" args_are "$tmp/args3" -- --wait 2s --
rl run -w 1s st sh "$tmp/argv.sh" "$tmp/args4" --ttl=5s -k 1 2>"$tmp/err"
expect_rc "options after NAME are the command's: 0" 0 $?
check "the command got '--ttl=5s -k 1'" args_are "$tmp/args4" --ttl=5s -k 1
rl run x y -- true 2>"$tmp/err"; expect_rc "an argument after NAME starts the command (y not found): 127" 127 $?
rl run st -- sh -c 'kill -KILL $$' 2>"$tmp/err"; expect_rc "command killed by SIGKILL: 137" 137 $?
rl run st -- /nonexistent/command 2>"$tmp/err"; expect_rc "command not found: 127" 127 $?
check "nothing left in Redis after runs" test "$(rcli EXISTS redislock:st)" = 0

# --- environment: REDIS_LOCK_KEY, REDIS_LOCK_OWNER; the key holds the owner ----------
rl run --registry clitest --ttl 10s envlock -- sh -c '
  printf "%s\n" "$REDIS_LOCK_KEY" >"$0/key"
  printf "%s\n" "$REDIS_LOCK_OWNER" >"$0/owner"
  printf "%s\n" "$PPID" >"$0/ppid"
  redis-cli -s "$1" GET "$REDIS_LOCK_KEY" >"$0/value"
  redis-cli -s "$1" PTTL "$REDIS_LOCK_KEY" >"$0/pttl"' "$tmp" "$sock" 2>"$tmp/err"
expect_rc "env run: 0" 0 $?
check "REDIS_LOCK_KEY is registry:name" test "$(cat "$tmp/key")" = clitest:envlock
check "REDIS_LOCK_OWNER is set" test -n "$(cat "$tmp/owner")"
# the value of the hold: the client id, ":" and the number of the acquisition
check "the key holds exactly REDIS_LOCK_OWNER while the command runs" \
  test "$(cat "$tmp/value")" = "$(cat "$tmp/owner")"
check "the owner is host:pid:hex:N of redislock" \
  test "$(cut -d: -f2 "$tmp/owner")" = "$(cat "$tmp/ppid")"
pttl=$(cat "$tmp/pttl")
check "--ttl 10s sets the lease TTL ($pttl ms)" test "$pttl" -gt 0 -a "$pttl" -le 10000
check "the key is gone after the command" test "$(rcli EXISTS clitest:envlock)" = 0

# --- --fencing: REDIS_LOCK_TOKEN rises with each run; status shows the last token --------
rl run --fencing fenced -- sh -c 'printf "%s\n" "$REDIS_LOCK_TOKEN" >"$0/token1"' "$tmp" 2>"$tmp/err"
expect_rc "--fencing run: 0" 0 $?
rl run -f fenced -- sh -c 'printf "%s\n" "$REDIS_LOCK_TOKEN" >"$0/token2"' "$tmp" 2>"$tmp/err"
expect_rc "second --fencing run: 0" 0 $?
token1=$(cat "$tmp/token1"); token2=$(cat "$tmp/token2")
check "REDIS_LOCK_TOKEN is a number, higher on the second run ($token1, $token2)" \
  test "$token1" -gt 0 -a "$token2" -gt "$token1"
check "the counter is fence:{redislock:fenced}, left in place" \
  test "$(rcli GET 'fence:{redislock:fenced}')" = "$token2"
check "the lock key itself is gone" test "$(rcli EXISTS redislock:fenced)" = 0
rl run fenced -- sh -c 'printf "%s\n" "${REDIS_LOCK_TOKEN-unset}" >"$0/token3"' "$tmp" 2>"$tmp/err"
expect_rc "run without --fencing: 0" 0 $?
check "without --fencing REDIS_LOCK_TOKEN is not set, the counter untouched" \
  test "$(cat "$tmp/token3") $(rcli GET 'fence:{redislock:fenced}')" = "unset $token2"
rl status fenced plain >"$tmp/out" 2>"$tmp/err"; expect_rc "status of free locks: 1" 1 $?
check "status shows a TOKEN column" grep -q '^NAME  *STATE  *TTL  *TOKEN  *OWNER$' "$tmp/out"
check "status shows the last token of a fenced name" grep -q "^fenced  *free  *-  *$token2  *-\$" "$tmp/out"
check "status shows - for a name never fenced" grep -q '^plain  *free  *-  *-  *-$' "$tmp/out"
rl status --json fenced plain >"$tmp/out" 2>"$tmp/err"; expect_rc "status --json of fenced: 1" 1 $?
check "status --json: the last token, then null" json_check "$tmp/out" \
  "d[0]['last_token'] == $token2 and d[1]['last_token'] is None"
rl status plain >"$tmp/out" 2>"$tmp/err"
check "no TOKEN column without a counter" grep -q '^NAME  *STATE  *TTL  *OWNER$' "$tmp/out"
rl run --fencing 'odd}name' -- true 2>"$tmp/err"; expect_rc "--fencing of a name with } and no hash tag: 64" 64 $?
check "the message says why" grep -q 'hash tag' "$tmp/err"

# --- several locks: --lock a --lock b, all or none ------------------------------------------
rl run --lock la --lock lb --fencing -- sh -c '
  printf "%s\n" "$REDIS_LOCK_NAME" >"$0/names"
  printf "%s\n" "$REDIS_LOCK_KEY" >"$0/keys"
  printf "%s\n" "$REDIS_LOCK_TOKEN" >"$0/tokens"
  redis-cli -s "$1" EXISTS redislock:la redislock:lb >"$0/both"' "$tmp" "$sock" 2>"$tmp/err"
expect_rc "--lock la --lock lb: 0" 0 $?
check "REDIS_LOCK_NAME has one line per lock" args_are "$tmp/names" la lb
check "REDIS_LOCK_KEY has one line per lock" args_are "$tmp/keys" redislock:la redislock:lb
check "REDIS_LOCK_TOKEN has one token per lock" \
  test "$(grep -c '^[1-9][0-9]*$' "$tmp/tokens") $(wc -l <"$tmp/tokens")" = "2 2"
check "both keys held while the command ran" test "$(cat "$tmp/both")" = 2
check "both keys gone after" test "$(rcli EXISTS redislock:la redislock:lb)" = 0
start_bg "$RL" run lb -- $(hold lb)
lbholder=$bg
check "lb holder started" wait_for "$tmp/lb.started"
rl run --lock la --lock lb --wait 300ms -- touch "$tmp/lab.never" 2>"$tmp/err"
expect_rc "--lock la --lock lb with lb held, --wait 300ms: 1" 1 $?
check "the command did not run" test ! -e "$tmp/lab.never"
check "the message names the held lock" grep -q "waiting for lock 'lb'" "$tmp/err"
check "la was not left taken" test "$(rcli EXISTS redislock:la)" = 0
start_bg "$RL" run --lock lb --lock la -- touch "$tmp/lab.ran"
labwaiter=$bg
touch "$tmp/lb.release"
wait "$lbholder"; expect_rc "lb holder: 0" 0 $?
wait "$labwaiter"; expect_rc "--lock lb --lock la waits and runs: 0" 0 $?
check "the command ran once both were free" test -e "$tmp/lab.ran"
rl run --lock la 2>"$tmp/err"; expect_rc "--lock without COMMAND: 64" 64 $?
rl run --lock '' -- true 2>"$tmp/err"; expect_rc "--lock with an empty NAME: 64" 64 $?

# --- --permits N: one permit of a semaphore of N ---------------------------------------------
start_bg "$RL" run --permits 2 pool -- $(hold p1)
p1=$bg
check "first permit holder started" wait_for "$tmp/p1.started"
start_bg "$RL" run --permits 2 pool -- $(hold p2)
p2=$bg
check "second permit holder started" wait_for "$tmp/p2.started"
check "both permit keys held" \
  test "$(rcli EXISTS 'redislock:{pool}:sem:0' 'redislock:{pool}:sem:1')" = 2
rl run --permits 2 --wait 300ms pool -- touch "$tmp/p3.never" 2>"$tmp/err"
expect_rc "--permits 2 with both held, --wait 300ms: 1" 1 $?
check "the command did not run" test ! -e "$tmp/p3.never"
check "the message names the semaphore" grep -q "semaphore 'pool'" "$tmp/err"
rl run --permits 3 pool -- touch "$tmp/p4.never" 2>"$tmp/err"
expect_rc "--permits 3 of a semaphore of 2: 64" 64 $?
check "the message names both sizes" grep -q "2 permits in Redis, not 3" "$tmp/err"
touch "$tmp/p1.release"
wait "$p1"; expect_rc "first permit holder: 0" 0 $?
rl run --permits 2 pool -- sh -c 'printf "%s\n" "$REDIS_LOCK_KEY" >"$0/pkey"' "$tmp" 2>"$tmp/err"
expect_rc "a freed permit runs the next command: 0" 0 $?
check "REDIS_LOCK_KEY is the permit's key" grep -q '^redislock:{pool}:sem:[01]$' "$tmp/pkey"
touch "$tmp/p2.release"
wait "$p2"; expect_rc "second permit holder: 0" 0 $?
check "no permit left held" \
  test "$(rcli EXISTS 'redislock:{pool}:sem:0' 'redislock:{pool}:sem:1')" = 0
check "the size stays with the semaphore" test "$(rcli GET 'redislock:{pool}:sem')" = 2
rl run --permits 3 pool -- true 2>"$tmp/err"; expect_rc "not resized while its size record stands: 64" 64 $?
rcli DEL 'redislock:{pool}:sem' >/dev/null
rl run --permits 3 pool -- true 2>"$tmp/err"; expect_rc "nor with only its size key deleted: 64" 64 $?
rcli DEL 'redislock:{pool}:sem' 'redislock:{pool}:sem:size' >/dev/null
rl run --permits 3 pool -- true 2>"$tmp/err"; expect_rc "resized once its size key and record are deleted: 0" 0 $?
rcli DEL 'redislock:{pool}:sem' 'redislock:{pool}:sem:size' >/dev/null
rl run --permits 0 pool -- true 2>"$tmp/err"; expect_rc "--permits 0: 64" 64 $?
rl run --permits 2 --lock pa -- true 2>"$tmp/err"; expect_rc "--permits with --lock: 64" 64 $?
# --- --read: shared holds of a read-write lock ------------------------------------------------
start_bg "$RL" run --read doc -- $(hold r1)
r1=$bg
check "first --read holder started" wait_for "$tmp/r1.started"
rl run --read --wait 5s doc -- sh -c '
  printf "%s\n" "$REDIS_LOCK_NAME" >"$0/rname"
  printf "%s\n" "${REDIS_LOCK_KEY-unset}" >"$0/rkey"' "$tmp" 2>"$tmp/err"
expect_rc "a second --read runs while the first holds: 0" 0 $?
check "REDIS_LOCK_NAME is the name" args_are "$tmp/rname" doc
check "REDIS_LOCK_KEY is not set for a read hold" args_are "$tmp/rkey" unset
check "the reader lease is the registry's key under {doc}" \
  test "$(rcli --scan --pattern 'redislock:{doc}:rw:r:*' | wc -l)" = 1
rl run doc -- true 2>"$tmp/err"; expect_rc "a plain lock of the same name is independent: 0" 0 $?
touch "$tmp/r1.release"
wait "$r1"; expect_rc "first --read holder: 0" 0 $?
check "the reader lease is gone after" test "$(rcli --scan --pattern 'redislock:{doc}:rw:r:*' | wc -l)" = 0
rcli SET 'redislock:{doc}:rw:ww' other-writer PX 60000 >/dev/null
rl run --read --wait 300ms doc -- touch "$tmp/read.never" 2>"$tmp/err"
expect_rc "--read behind a waiting writer of another process, --wait 300ms: 1" 1 $?
check "the command did not run" test ! -e "$tmp/read.never"
rcli DEL 'redislock:{doc}:rw:ww' >/dev/null
rl run --read --lock a -- true 2>"$tmp/err"; expect_rc "--read with --lock: 64" 64 $?
rl run --read --fencing doc -- true 2>"$tmp/err"; expect_rc "--read with --fencing: 64" 64 $?

# --- status, list and watch show each kind of hold as what it is -------------------------
# Two readers of a read-write lock, two permits of a semaphore of 3, and a plain lock
# (a leader's, for status --leader); a writer and a waiting writer's mark are set as the
# library sets them (the tool takes no write hold).
start_bg "$RL" run --read catalog -- $(hold c1); c1=$bg
start_bg "$RL" run --read catalog -- $(hold c2); c2=$bg
start_bg "$RL" run --permits 3 downloads -- $(hold d1); d1=$bg
start_bg "$RL" run --permits 3 downloads -- $(hold d2); d2=$bg
start_bg "$RL" run elected -- $(hold e1); e1=$bg
for h in c1 c2 d1 d2 e1; do check "family holder $h started" wait_for "$tmp/$h.started"; done
rl status catalog >"$tmp/out" 2>"$tmp/err"; expect_rc "status of a read-write lock with two readers: 0" 0 $?
check "status says two readers" grep -q '^catalog  *read  *-  *2 readers$' "$tmp/out"
check "status has a line per reader" test "$(grep -c '^  reader [^ ]*:[0-9]* (' "$tmp/out")" = 2
rl status downloads >"$tmp/out" 2>"$tmp/err"; expect_rc "status of a semaphore with two permits held: 0" 0 $?
check "status says the permits used of the size" grep -q '^downloads  *permits  *-  *2 of 3 permits$' "$tmp/out"
check "status has a line per permit" test "$(grep -c '^  permit [0-2] [^ ]*:[0-9]* (' "$tmp/out")" = 2
rl status --json catalog downloads >"$tmp/out" 2>"$tmp/err"; expect_rc "status --json of both: 0" 0 $?
check "status --json: readers" json_check "$tmp/out" \
  "d[0]['kind'] == 'read-write' and d[0]['state'] == 'read' and d[0]['held'] and d[0]['readers'] == 2 and len(d[0]['holders']) == 2 and all(h['role'] == 'reader' and h['pid'] > 0 and 0 < h['ttl_ms'] <= 60000 for h in d[0]['holders']) and d[0]['writer_waiting'] is None"
check "status --json: permits" json_check "$tmp/out" \
  "d[1]['kind'] == 'semaphore' and d[1]['state'] == 'permits' and d[1]['held'] and d[1]['permits_used'] == 2 and d[1]['size'] == 3 and len(set(h['permit'] for h in d[1]['holders'])) == 2 and all(0 <= h['permit'] < 3 for h in d[1]['holders']) and all(h['role'] == 'permit' and h['pid'] > 0 for h in d[1]['holders'])"
rl list --json >"$tmp/out" 2>"$tmp/err"; expect_rc "list --json with the family: 0" 0 $?
check "list --json shows each hold once, by name, no key of the family as a lock" json_check "$tmp/out" \
  "[(x['name'], x['kind']) for x in d if x['name'] in ('catalog', 'downloads', 'elected')] == [('catalog', 'read-write'), ('downloads', 'semaphore'), ('elected', 'lock')] and not any('{' in x['name'] for x in d)"
rl list >"$tmp/out" 2>"$tmp/err"; expect_rc "list with the family: 0" 0 $?
check "list shows no key of the family as a lock" lacks "$tmp/out" '{downloads}' '{catalog}' ':sem' ':rw:'
check "list says the readers and the permits" \
  sh -c "grep -q '^catalog  *read .* 2 readers\$' '$tmp/out' && grep -q '^downloads  *permits .* 2 of 3 permits\$' '$tmp/out'"
rl watch --once >"$tmp/out" 2>"$tmp/err"; expect_rc "watch --once with the family: 0" 0 $?
check "watch names each reader and permit as such" \
  sh -c "test \$(grep -c '^catalog (reader) ' '$tmp/out') = 2 && test \$(grep -c '^downloads (permit [0-2] of 3) ' '$tmp/out') = 2"
check "watch shows no key of the family as a lock" lacks "$tmp/out" '{downloads}' '{catalog}' ':sem'
rl status --leader elected >"$tmp/out" 2>"$tmp/err"; expect_rc "status --leader of a held election: 0" 0 $?
check "status --leader says leader" grep -q '^elected  *leader  *[0-9.]*m*s  *[^ ]*:[0-9]*:' "$tmp/out"
rl status --leader --json elected >"$tmp/out" 2>"$tmp/err"
check "status --leader --json: a leader" json_check "$tmp/out" \
  "d[0]['kind'] == 'leader' and d[0]['state'] == 'leader' and d[0]['holders'][0]['role'] == 'leader' and d[0]['owner'] == d[0]['holders'][0]['owner']"
for h in c1 c2 d1 d2 e1; do touch "$tmp/$h.release"; done
for p in $c1 $c2 $d1 $d2 $e1; do wait "$p"; done
rl status catalog downloads >"$tmp/out" 2>"$tmp/err"; expect_rc "status once all are released: 1" 1 $?
check "a released semaphore is free, its size kept" grep -q '^downloads  *free  *-  *0 of 3 permits$' "$tmp/out"
rcli SET 'redislock:{catalog}:rw:w' writer-client:7 PX 60000 >/dev/null
rcli SET 'redislock:{catalog}:rw:ww' waiting-client PX 60000 >/dev/null
rl status --json catalog >"$tmp/out" 2>"$tmp/err"; expect_rc "status of a written read-write lock: 0" 0 $?
check "status --json: the writer and the waiting writer" json_check "$tmp/out" \
  "len(d) == 1 and d[0]['state'] == 'write' and d[0]['owner'] == 'writer-client:7' and d[0]['holders'][0]['role'] == 'writer' and d[0]['readers'] == 0 and d[0]['writer_waiting'] == 'waiting-client'"
rl status catalog >"$tmp/out" 2>"$tmp/err"
check "status says write and the waiting writer" \
  sh -c "grep -q '^catalog  *write  *[0-9.]*s  *writer-client:7\$' '$tmp/out' && grep -q '^  writer waiting waiting-client\$' '$tmp/out'"
rcli DEL 'redislock:{catalog}:rw:w' 'redislock:{catalog}:rw:ww' 'redislock:{downloads}:sem' \
  'redislock:{downloads}:sem:size' >/dev/null

# --- a held lock: --wait 0 and --wait 300ms give 1; status and list show it -------------
start_bg "$RL" run held -- $(hold held)
holder=$bg
check "holder started" wait_for "$tmp/held.started"
rl run --wait 0 held -- touch "$tmp/held.never" 2>"$tmp/err"; expect_rc "--wait 0 on a held lock: 1" 1 $?
check "one line on stderr" one_line "$tmp/err"
check "the message names the holder" grep -q "$(rcli GET redislock:held)" "$tmp/err"
rl run --wait 300ms held -- touch "$tmp/held.never" 2>"$tmp/err"; expect_rc "--wait 300ms on a held lock: 1" 1 $?
check "the command did not run" test ! -e "$tmp/held.never"
owner=$(rcli GET redislock:held)
rl status held >"$tmp/out" 2>"$tmp/err"; expect_rc "status of a held lock: 0" 0 $?
check "status shows held and the owner" grep -q "^held  *held  *[0-9.]*m*s  *$owner\$" "$tmp/out"
rl status held nobody >"$tmp/out" 2>"$tmp/err"; expect_rc "status with a free lock: 1" 1 $?
check "status shows the free lock" grep -q '^nobody  *free' "$tmp/out"
rl status --json held nobody >"$tmp/out" 2>"$tmp/err"; expect_rc "status --json: 1" 1 $?
check "status --json: held lock with owner and TTL" grep -q "\"name\": \"held\", \"key\": \"redislock:held\", \"held\": true, \"owner\": \"$owner\"" "$tmp/out"
check "status --json: free lock" grep -q '"name": "nobody", "key": "redislock:nobody", "held": false, "owner": null' "$tmp/out"
check "status --json is valid JSON" json_check "$tmp/out" \
  "len(d) == 2 and d[0]['held'] and 0 < d[0]['ttl_ms'] <= 60000 and d[0]['pid'] > 0 and not d[1]['held'] and d[1]['ttl_ms'] is None"
rl list >"$tmp/out" 2>"$tmp/err"; expect_rc "list: 0" 0 $?
check "list shows the held lock" grep -q "^held  *held .*$owner\$" "$tmp/out"
rl list --json >"$tmp/out" 2>"$tmp/err"; expect_rc "list --json: 0" 0 $?
check "list --json is the held lock" json_check "$tmp/out" \
  "[x['name'] for x in d] == ['held'] and d[0]['owner'] == '$owner'"
# a waiter without --wait gets the lock once the holder releases it
start_bg "$RL" run held -- touch "$tmp/held.waiter"
waiter=$bg
touch "$tmp/held.release"
wait "$holder"; expect_rc "holder: 0" 0 $?
wait "$waiter"; expect_rc "waiter acquires after the release: 0" 0 $?
check "the waiter's command ran" test -e "$tmp/held.waiter"
rl status held >"$tmp/out" 2>"$tmp/err"; expect_rc "status after release: 1" 1 $?

# --- break: deletes a held lock; its waiter wakes, its holder is told (exit 3) -------------
start_bg "$RL" run brk -- $(hold brk)
bholder=$bg
check "break: holder started" wait_for "$tmp/brk.started"
start_bg "$RL" run --wait 20s brk -- touch "$tmp/brk.waiter"
bwaiter=$bg
rl break brk >"$tmp/out" 2>"$tmp/err"; expect_rc "break of a held lock: 0" 0 $?
check "break says the lock was broken" grep -q '^brk: broken$' "$tmp/out"
wait "$bwaiter"; expect_rc "break: the waiter gets the lock: 0" 0 $?
check "break: the waiter's command ran" test -e "$tmp/brk.waiter"
wait "$bholder"; expect_rc "break: the holder is told its lease is lost: 3" 3 $?
rl break brk >"$tmp/out" 2>"$tmp/err"; expect_rc "break of a free lock: 1" 1 $?
check "break says the lock was free" grep -q '^brk: free$' "$tmp/out"
rl break 2>"$tmp/err"; expect_rc "break without NAME: 64" 64 $?
rl break '{brk}:rw:readers' >"$tmp/out" 2>"$tmp/err"
expect_rc "break of a read-write lock's readers set: 64" 64 $?
check "break names the readers set it refuses" grep -q 'readers set of read-write lock' "$tmp/err"
rl break a b 2>"$tmp/err"; expect_rc "break with two names: 64" 64 $?

# --- a holder's value reaches the terminal escaped, as in status ---------------------------
esc=$(printf '\033')
rcli SET redislock:escaped "evil${esc}]0;owned${esc}\\${esc}[2J" PX 60000 >/dev/null
rl run --wait 0 escaped -- true 2>"$tmp/err"; expect_rc "busy lock whose holder has escapes: 1" 1 $?
check "run names the holder escaped" grep -q -F 'held by evil\x1b]0;owned\x1b\\\x1b[2J)' "$tmp/err"
check "no raw ESC on stderr" lacks "$tmp/err" "$esc"
rl status escaped >"$tmp/out" 2>"$tmp/err"
check "status shows the holder the same way" grep -q -F 'evil\x1b]0;owned\x1b\\\x1b[2J' "$tmp/out"
rcli DEL redislock:escaped >/dev/null

# --- list matches the registry key literally ---------------------------------------------
start_bg "$RL" run --registry 'g[1]*' a -- $(hold glob)
globber=$bg
check "glob holder started" wait_for "$tmp/glob.started"
rcli SET 'g1:decoy' x >/dev/null
rcli SET 'g11:decoy' x >/dev/null
rcli SET 'g[1]*x:decoy' x >/dev/null
rl list --registry 'g[1]*' >"$tmp/out" 2>"$tmp/err"; expect_rc "list --registry 'g[1]*': 0" 0 $?
check "only the literal registry's lock is listed" test "$(tail -n +2 "$tmp/out" | awk '{print $1}')" = a
rl list --registry nothing-here --json >"$tmp/out" 2>"$tmp/err"; expect_rc "list of an empty registry: 0" 0 $?
check "empty list --json is []" test "$(cat "$tmp/out")" = "[]"
# a waiter on that registry is woken by the unlock notification, not by the 60 s TTL
subscribers () { rcli CLIENT LIST | grep -c 'psub=[1-9]'; }
before=$(subscribers)
start_bg "$RL" run --registry 'g[1]*' a -- true
gwaiter=$bg
i=0
while [ "$(subscribers)" -le "$before" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
t0=$(date +%s)
touch "$tmp/glob.release"
wait "$globber"; expect_rc "glob holder: 0" 0 $?
wait "$gwaiter"; expect_rc "glob waiter: 0" 0 $?
check "the glob waiter was woken promptly ($(($(date +%s) - t0)) s)" test $(($(date +%s) - t0)) -le 10

# --- status and list details: many keys, odd names, no expiry, password and db ---------
for k in $(seq 1 1500); do echo "SET bulk:k$k someone PX 60000"; done | rcli >/dev/null
rl list --registry bulk --json >"$tmp/out" 2>"$tmp/err"; expect_rc "list of 1500 locks: 0" 0 $?
check "list finds all 1500 (SCAN cursor followed)" json_check "$tmp/out" \
  "len(d) == 1500 and len(set(x['name'] for x in d)) == 1500 and all(x['owner'] == 'someone' and x['pid'] is None for x in d)"
rl list --registry bulk >"$tmp/out" 2>"$tmp/err"
check "text list has a header and 1500 lines" test "$(wc -l <"$tmp/out")" -eq 1501
rcli SET 'odd:we"ird ñame\' 'h:12:ab' >/dev/null
rl status --registry odd --json 'we"ird ñame\' >"$tmp/out" 2>"$tmp/err"; expect_rc "status of an odd name: 0" 0 $?
check "odd name and no expiry in JSON" json_check "$tmp/out" \
  "d[0]['name'] == 'we\"ird \u00f1ame\\\\' and d[0]['ttl_ms'] is None and d[0]['host'] == 'h' and d[0]['pid'] == 12"
rl status --registry odd 'we"ird ñame\' >"$tmp/out" 2>"$tmp/err"
check "no expiry shown as none" grep -q ' none  h:12:ab$' "$tmp/out"
rcli SET 'odd:numbered' 'build01:4711:0123456789abcdef0123456789abcdef:42' >/dev/null
rl status --registry odd --json numbered >"$tmp/out" 2>"$tmp/err"; expect_rc "status of a lock held as client_id:N: 0" 0 $?
check "client_id:N: the whole value is the owner, host and pid come from the client id" json_check "$tmp/out" \
  "d[0]['owner'] == 'build01:4711:0123456789abcdef0123456789abcdef:42' and d[0]['host'] == 'build01' and d[0]['pid'] == 4711"
rl status --registry odd numbered >"$tmp/out" 2>"$tmp/err"
check "client_id:N shown whole" grep -q ' build01:4711:0123456789abcdef0123456789abcdef:42$' "$tmp/out"
rcli DEL 'odd:numbered' >/dev/null
rcli RPUSH 'odd:alist' x >/dev/null
rl list --registry odd --json >"$tmp/out" 2>"$tmp/err"; expect_rc "list skips keys that are not strings: 0" 0 $?
check "only the string key is listed" json_check "$tmp/out" "len(d) == 1"
rl status --registry odd alist >"$tmp/out" 2>"$tmp/err"; expect_rc "status of a key that is not a lock: 2" 2 $?
rl status --json -- -dash >"$tmp/out" 2>"$tmp/err"; expect_rc "status -- -dash: 1" 1 $?
check "status after -- takes names starting with a dash" json_check "$tmp/out" "[x['name'] for x in d] == ['-dash']"

psock=$tmp/p.sock
redis-server --port 0 --unixsocket "$psock" --unixsocketperm 700 --save '' --appendonly no \
  --daemonize no --dir "$tmp" --requirepass 'p@ss w' >"$tmp/redis2.log" 2>&1 &
server2=$!
bg_pids="$bg_pids $server2"
i=0
until [ "$(redis-cli -s "$psock" -a 'p@ss w' --no-auth-warning PING 2>/dev/null)" = PONG ] || [ $i -gt 200 ]; do
  sleep 0.05; i=$((i + 1))
done
purl="unix://$psock?db=3&password=p%40ss%20w"
rl run --url "$purl" pw -- sh -c 'redis-cli -s "$0" -a "p@ss w" --no-auth-warning -n 3 GET "$REDIS_LOCK_KEY" >"$1"' "$psock" "$tmp/pw.value" 2>"$tmp/err"
expect_rc "run with a password and db in a unix:// URL: 0" 0 $?
check "the lock key is in db 3" test -n "$(cat "$tmp/pw.value")"
start_bg "$RL" run --url "$purl" pw -- $(hold pw)
pwholder=$bg
check "password holder started" wait_for "$tmp/pw.started"
rl status --url "$purl" --json pw >"$tmp/out" 2>"$tmp/err"; expect_rc "status with password and db: 0" 0 $?
rl list --url "$purl" >"$tmp/out" 2>"$tmp/err"; expect_rc "list with password and db: 0" 0 $?
check "list sees the lock in db 3" grep -q '^pw  *held' "$tmp/out"
rl list --url "unix://$psock?password=p%40ss%20w" >"$tmp/out" 2>"$tmp/err"
check "db 0 has no lock" test "$(wc -l <"$tmp/out")" -eq 1
touch "$tmp/pw.release"
wait "$pwholder"; expect_rc "password holder: 0" 0 $?
rl run --url "unix://$psock?password=wrong" pw -- true 2>"$tmp/err"; expect_rc "run with a wrong password: 2" 2 $?
rl status --url "unix://$psock?password=wrong" pw 2>"$tmp/err"; expect_rc "status with a wrong password: 2" 2 $?
rl status --url "unix://$psock" pw 2>"$tmp/err"; expect_rc "status without the password: 2" 2 $?
rl status --url "unix://$psock?colour=blue" pw 2>"$tmp/err"; expect_rc "unknown URL parameter: 64" 64 $?
rl status --url "rediss://localhost?ca=$tmp/no-such-ca.pem" pw 2>"$tmp/err"; expect_rc "rediss:// with an unreadable CA refused: 64" 64 $?

# --- passwords never reach the output: redacted in every URL and message ----------------
# Each URL holds the password S3cr3t<c>Tail9 (or S3cr3tTail9), against a dead socket, a
# closed port or the password server; neither half may show on stdout or stderr of run
# (the library's messages) and status (the tool's) given --url, or of list and demo
# given REDIS_URL.
dead=$tmp/nothing.sock
while IFS='|' read -r what url; do
  [ -n "$what" ] || continue
  leaked=
  for c in run status list demo; do
    case $c in
      run) timeout -k 5 $T "$RL" run --url "$url" x true ;;
      status) timeout -k 5 $T "$RL" status --url "$url" x ;;
      *) REDIS_URL=$url timeout -k 5 $T "$RL" $c ;;
    esac >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if ! lacks "$tmp/out" S3cr3t Tail9 || ! lacks "$tmp/err" S3cr3t Tail9; then leaked="$leaked $c"; fi
    [ $rc -ne 0 ] || leaked="$leaked $c:exit-0"
  done
  check "no password shown: $what${leaked:+ (leaked by$leaked)}" test -z "$leaked"
  [ -z "$leaked" ] || diag "last stderr: $(cat "$tmp/err")"
done <<EOF
redis:// with a password|redis://:S3cr3tTail9@127.0.0.1:1
redis:// with a user and a password|redis://user:S3cr3tTail9@127.0.0.1:1
redis:// with a lone user part|redis://S3cr3tTail9@127.0.0.1:1
redis:// password with /|redis://:S3cr3t/Tail9@127.0.0.1:1
redis:// password with ?|redis://:S3cr3t?Tail9@127.0.0.1:1
redis:// password with #|redis://u:S3cr3t#Tail9@127.0.0.1:1
redis:// password with @|redis://u:S3cr3t@Tail9@127.0.0.1:1
redis:// password with percent-encoded /|redis://:S3cr3t%2FTail9@127.0.0.1:1
redis:// password, a bad database|redis://:S3cr3tTail9@127.0.0.1:1/x
redis:// password, a port out of range|redis://:S3cr3tTail9@127.0.0.1:99999
redis:// password, a broken IPv6 host|redis://:S3cr3tTail9@[::1
redis:// password in the query too|redis://:S3cr3tTail9@127.0.0.1:1?password=S3cr3tTail9
no scheme, user and password|user:S3cr3tTail9@127.0.0.1:1
no scheme, password only|:S3cr3tTail9@127.0.0.1:1
no scheme, //user:password|//user:S3cr3tTail9@127.0.0.1:1
rediss:// with a password|rediss://:S3cr3tTail9@127.0.0.1:1
unknown scheme with a password|ftp://:S3cr3tTail9@127.0.0.1:1
unix:// ?password=|unix://$dead?password=S3cr3tTail9
unix:// ?PASSWORD= (unknown parameter)|unix://$dead?PASSWORD=S3cr3tTail9
unix:// ?Password= with an encoded &|unix://$dead?Password=S3cr3t%26Tail9
unix:// ?pass%77ord= (encoded name)|unix://$dead?pass%77ord=S3cr3tTail9
unix:// ?Pass%57ord= with a raw &|unix://$dead?Pass%57ord=S3cr3t&Tail9
unix:// password with #|unix://$dead?db=1&password=S3cr3t#Tail9
unix:// password with / ? @|unix://$dead?username=u&password=S3cr3t/?@Tail9
unix:// wrong password, live server|unix://$psock?password=S3cr3t/Tail9
unix:// wrong user and password, live server|unix://$psock?username=nobody&password=S3cr3tTail9
EOF

# The advice on writing a character in a password names the character: the redaction
# hides the password, not the "@" in "write “@” as %40".
rl status --url 'redis://u:S3cr3t@Tail9@127.0.0.1:1' x 2>"$tmp/err"
expect_rc "a raw @ in a URL's password: 64" 64 $?
check "the advice for a raw @ names the @" grep -q 'write [^ ]*@[^ ]* as %40' "$tmp/err"
rl status --url 'redis://u:S3cr3t#Tail9@127.0.0.1:1' x 2>"$tmp/err"
check "the advice for a raw # names the #" grep -q '[^ ]*#[^ ]* and [^ ]*@[^ ]* as' "$tmp/err"
if grep -q -e S3cr3t -e Tail9 "$tmp/err"; then
  not_ok "the advice shows no piece of the password"; show_err
else
  ok "the advice shows no piece of the password"
fi

# A TLS file name is no secret: a message about the CA file names it, and the words of
# the message that the path shares are not blotted out.
if [ "${REDISLOCK_TLS:-yes}" = yes ]; then
  cadir=$tmp/certificates-verification
  mkdir -p "$cadir" && : >"$cadir/ca-certificates.crt"
  rl status --url "rediss://127.0.0.1:1?ca=$cadir/ca-certificates.crt" x 2>"$tmp/err"
  expect_rc "an empty CA file: 64" 64 $?
  check "the CA file is named in full" grep -q -F "$cadir/ca-certificates.crt" "$tmp/err"
  check "the message around it is whole" grep -q 'TLS CA certificates from .*: no certificate in it' \
    "$tmp/err"
  if grep -q -F '***' "$tmp/err"; then not_ok "nothing of a URL without a secret is hidden"; show_err
  else ok "nothing of a URL without a secret is hidden"; fi
  # with a password beside it, the password alone is hidden
  rl status --url "rediss://:S3cr3tTail9@127.0.0.1:1?ca=$cadir/ca-certificates.crt" x 2>"$tmp/err"
  check "the CA file is named beside a password" grep -q -F "$cadir/ca-certificates.crt" "$tmp/err"
  check "the password beside it is hidden" lacks "$tmp/err" S3cr3t Tail9
fi

kill "$server2"; wait "$server2" 2>/dev/null

# --- Redis errors: 2 ---------------------------------------------------------------------
rl run --url "unix://$tmp/nothing.sock" x -- touch "$tmp/dead.ran" 2>"$tmp/err"
expect_rc "run against a dead socket: 2" 2 $?
check "error message on stderr" test -s "$tmp/err"
check "the command did not run" test ! -e "$tmp/dead.ran"
rl run --url redis://127.0.0.1:1 x -- true 2>"$tmp/err"; expect_rc "run against a closed port: 2" 2 $?
# A server without replicas cannot acknowledge: the lease is given back, the command
# does not run, and no key is left.
rl run --min-replicas 1 unrepl -- touch "$tmp/unrepl.ran" 2>"$tmp/err"
expect_rc "--min-replicas 1 without replicas: 2" 2 $?
check "the unreplicated run's command did not run" test ! -e "$tmp/unrepl.ran"
check "the unreplicated run names the cause" grep -q "replicas" "$tmp/err"
check "the unreplicated run says the server has 0 connected replicas" \
  grep -q "has 0 connected replicas" "$tmp/err"
rl run --min-replicas 1 --lock unrepl1 --lock unrepl2 -- true 2>"$tmp/err"
expect_rc "--min-replicas 1 without replicas, two locks: 2" 2 $?
check "the unreplicated run of two locks says the server has 0 connected replicas" \
  grep -q "has 0 connected replicas" "$tmp/err"
check "the unreplicated lease was released" test "$(redis-cli -s "$sock" EXISTS redislock:unrepl)" = 0
rl run --min-replicas 0 repl0 -- true 2>"$tmp/err"; expect_rc "--min-replicas 0 is off: 0" 0 $?
rl run --min-replicas x y -- true 2>"$tmp/err"; expect_rc "--min-replicas x rejected: 64" 64 $?
rl status --url "unix://$tmp/nothing.sock" x 2>"$tmp/err"; expect_rc "status against a dead server: 2" 2 $?
rl list --url "unix://$tmp/nothing.sock" 2>"$tmp/err"; expect_rc "list against a dead server: 2" 2 $?

# --- lease loss: the command is terminated, exit 3 --------------------------------------
start_bg "$RL" run --ttl 1s lease -- sh -c 'touch "$0/lease.started"; exec sleep 30' "$tmp"
pid=$bg
check "lease holder started" wait_for "$tmp/lease.started"
t0=$(date +%s)
rcli DEL redislock:lease >/dev/null
wait "$pid"; rc=$?; cp "$tmp/bg.err" "$tmp/err"
expect_rc "key deleted behind its back: 3" 3 $rc
check "exit 3 came promptly ($(($(date +%s) - t0)) s)" test $(($(date +%s) - t0)) -le 6
check "stderr says the lease was lost" grep -q 'lost' "$tmp/err"

start_bg "$RL" run --ttl 1s lease -- sh -c 'touch "$0/lease2.started"; exec sleep 30' "$tmp"
pid=$bg
check "second lease holder started" wait_for "$tmp/lease2.started"
rcli SET redislock:lease intruder PX 30000 >/dev/null
wait "$pid"; rc=$?; cp "$tmp/bg.err" "$tmp/err"
expect_rc "key taken by another owner: 3" 3 $rc
check "the other owner's key is untouched" test "$(rcli GET redislock:lease)" = intruder
rcli DEL redislock:lease >/dev/null

start_bg "$RL" run --ttl 1s --kill-after 300ms lease -- sh -c 'trap "" TERM; exec sh "$0/hold.sh" "$0/lease3.started" "$0/lease3.release"' "$tmp"
pid=$bg
check "stubborn lease holder started" wait_for "$tmp/lease3.started"
rcli DEL redislock:lease >/dev/null
wait "$pid"; rc=$?; cp "$tmp/bg.err" "$tmp/err"
expect_rc "command ignoring SIGTERM is killed: 3" 3 $rc
check "stderr mentions SIGKILL" grep -q 'SIGKILL' "$tmp/err"

# A command that outlives SIGTERM is SIGKILLed before the key could expire: at most the
# lease margin after the loss report (5% of the TTL: 100ms at --ttl 2s), even with the
# default --kill-after (5s). It stamps the time at SIGTERM and while it lives; the last
# stamp follows SIGTERM by the time to SIGKILL, less one turn of its loop (10 ms), plus
# scheduling delays, hence the slack on the bound.
cat >"$tmp/stubborn.sh" <<'EOF'
trap 'date +%s%N >"$0.term"' TERM
touch "$0.started"
i=0
while [ $i -lt 3000 ]; do date +%s%N >>"$0.alive"; sleep 0.01; i=$((i + 1)); done
EOF
start_bg "$RL" run --ttl 2s stubborn -- sh "$tmp/stubborn.sh"
pid=$bg
check "command ignoring SIGTERM, --ttl 2s, started" wait_for "$tmp/stubborn.sh.started"
rcli SET redislock:stubborn intruder PX 30000 >/dev/null
wait "$pid"; rc=$?; cp "$tmp/bg.err" "$tmp/err"
expect_rc "its lease taken by another owner: 3" 3 $rc
check "the loss report bounds SIGKILL by the margin, 100ms" grep -q 'lost the lease.*SIGKILL in 100ms' "$tmp/err"
if [ -s "$tmp/stubborn.sh.term" ] && [ -s "$tmp/stubborn.sh.alive" ]; then
  lived=$((($(tail -n 1 "$tmp/stubborn.sh.alive") - $(cat "$tmp/stubborn.sh.term")) / 1000000))
else
  lived=unknown
fi
check "SIGKILLed within the 100ms margin (+ 400ms slack) of the loss report: lived ${lived}ms after SIGTERM" \
  test "$lived" != unknown -a "$lived" -le 500
rcli DEL redislock:stubborn >/dev/null

# --- two runs on one name never overlap --------------------------------------------------
: >"$tmp/stamps"
pids=
for k in 1 2 3 4; do
  timeout -k 5 60 "$RL" run overlap -- sh -c '
    echo "start $1 $(date +%s%N)" >>"$0/stamps"; sleep 0.2
    echo "end $1 $(date +%s%N)" >>"$0/stamps"' "$tmp" $k 2>>"$tmp/err" &
  pids="$pids $!"
done
all=0
for p in $pids; do wait "$p" || all=$?; done
expect_rc "four concurrent runs: 0" 0 $all
check "eight stamps" test "$(wc -l <"$tmp/stamps")" -eq 8
check "the holds do not intersect" awk '
  NR % 2 == 1 { if ($1 != "start" || $3 < last) bad = 1; who = $2 }
  NR % 2 == 0 { if ($1 != "end" || $2 != who) bad = 1; last = $3 }
  END { exit bad }' "$tmp/stamps"
[ $failures -gt 0 ] && diag "stamps:" "$(cat "$tmp/stamps")"

# --- signals: forwarded to the command, lock released afterwards -------------------------
start_bg "$RL" run sig -- sh -c 'trap "echo TERM >\"$0/sig.got\"; exit 42" TERM; touch "$0/sig.started"; i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done' "$tmp"
pid=$bg
check "signal test command started" wait_for "$tmp/sig.started"
kill -TERM "$pid"
wait "$pid"; expect_rc "SIGTERM forwarded, the command's status 42 passed through" 42 $?
check "the command got SIGTERM" test "$(cat "$tmp/sig.got" 2>/dev/null)" = TERM
check "the lock was released" test "$(rcli EXISTS redislock:sig)" = 0

start_bg "$RL" run sig -- sh -c 'touch "$0/sig2.started"; exec sleep 30' "$tmp"
pid=$bg
check "second signal test command started" wait_for "$tmp/sig2.started"
kill -TERM "$pid"
wait "$pid"; expect_rc "command killed by the forwarded SIGTERM: 143" 143 $?
check "the lock was released" test "$(rcli EXISTS redislock:sig)" = 0

start_bg "$RL" run sig -- $(hold sig3)
holder=$bg
check "lock holder for the waiting test started" wait_for "$tmp/sig3.started"
# A signal sent before the background shell has exec'd redislock could be taken by the
# shell's own trap: wait until the waiter has subscribed to unlock notifications.
before=$(subscribers)
start_bg "$RL" run sig -- touch "$tmp/sig3.never"
pid=$bg
i=0
while [ "$(subscribers)" -le "$before" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
check "the waiter waits" test $i -lt 400
kill -TERM "$pid"
wait "$pid"; expect_rc "SIGTERM while waiting for the lock: 143" 143 $?
check "the waiting run's command never ran" test ! -e "$tmp/sig3.never"
check "the holder still holds the lock" test "$(rcli EXISTS redislock:sig)" = 1
touch "$tmp/sig3.release"
wait "$holder"; expect_rc "holder: 0" 0 $?

# --- one SIGINT meant for the job reaches the command once (Linux, python3) ---------------
# The command runs in a process group of its own, given the terminal: Ctrl-C reaches it
# from the terminal only, and a SIGINT sent to redislock's group reaches it forwarded
# only. sigcount.py (below) counts the deliveries, keeping redislock stopped while the
# signal is sent, so that a forwarded copy cannot merge with a direct one.
if [ "$(uname -s)" = Linux ] && [ $have_python = yes ]; then
  cat >"$tmp/sigcount.py" <<'EOF'
# sigcount.py MODE REDISLOCK DIR: how many times one SIGINT meant for a job reaches its
# command. Runs `REDISLOCK run` of a command that counts the SIGINTs delivered to it (one
# byte per delivery, written by the signal handler itself) into DIR/int.count, as the
# foreground job of a new terminal (MODE pty: Ctrl-C typed on it) or as a process group
# without a terminal (MODE pgrp: SIGINT sent to redislock's process group). redislock is
# stopped while the SIGINT is sent; it is continued once the command has counted what it
# got directly (when its group got the signal), then sent SIGUSR1 once it has taken the
# pending SIGINT: it forwards SIGUSR1 after any SIGINT, and SIGUSR1 ends the command.
# Prints the count. Every wait is bounded.
import os, select, signal, sys, time
mode, rl, d = sys.argv[1:4]
counter = r'''
import os, select, signal, sys, time
d = sys.argv[1]
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGINT, lambda *a: None)
signal.signal(signal.SIGUSR1, lambda *a: None)
n = 0
def save():
    with open(d + "/int.count.tmp", "w") as f:
        f.write("%d %d\n" % (n, os.getpid()))
    os.rename(d + "/int.count.tmp", d + "/int.count")
save()
end = time.monotonic() + 60
while time.monotonic() < end:
    if not select.select([r], [], [], 0.5)[0]:
        continue
    for sig in os.read(r, 64):
        if sig == signal.SIGINT:
            n += 1
            save()
        elif sig == signal.SIGUSR1:
            sys.exit(0)
sys.exit(1)
'''
argv = [rl, "run", "sigcount-" + mode, "--", sys.executable, "-c", counter, d]
fd = -1
if mode == "pty":
    import pty
    pid, fd = pty.fork()
else:
    pid = os.fork()
    if pid == 0:
        os.setsid()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execv(rl, argv)

def state():
    try:
        n, cpid = open(d + "/int.count").read().split()
        return int(n), int(cpid)
    except (OSError, ValueError):
        return -1, 0
def int_pending(p):
    for line in open("/proc/%d/status" % p):
        if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)):
            return True
    return False
def stopped(p):
    return open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0] == "T"
status = []
def ended():
    if not status:
        p, st = os.waitpid(pid, os.WNOHANG)
        if p == pid:
            status.append(st)
    return bool(status)
def wait_until(cond, limit=20.0):
    end = time.monotonic() + limit
    while not ended() and not cond():
        if time.monotonic() > end:
            return False
        if fd >= 0 and select.select([fd], [], [], 0.01)[0]:
            try:
                os.read(fd, 4096)  # the terminal's output, drained
            except OSError:
                pass
        else:
            time.sleep(0.01)
    return not ended()

ok = wait_until(lambda: state()[0] == 0)
if ok:
    cpid = state()[1]
    os.kill(pid, signal.SIGSTOP)
    ok = wait_until(lambda: stopped(pid))
if ok:
    if mode == "pty":
        os.write(fd, b"\x03")
        direct = os.getpgid(cpid) == os.tcgetpgrp(fd)
    else:
        os.killpg(pid, signal.SIGINT)
        direct = os.getpgid(cpid) == pid
    if direct:
        ok = wait_until(lambda: state()[0] >= 1)
    os.kill(pid, signal.SIGCONT)
if ok:
    ok = wait_until(lambda: not int_pending(pid))
if ok and not direct:
    # The command is told only by redislock's forwarding: the final SIGUSR1 (forwarded
    # too, maybe first) must not end the count before the SIGINT arrives.
    ok = wait_until(lambda: state()[0] >= 1)
if ok:
    os.kill(pid, signal.SIGUSR1)
if not wait_until(lambda: False) and not ended():
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(state()[0] if ok else "error")
EOF
  for mode in pty pgrp; do
    case $mode in
      pty) what="Ctrl-C on the terminal of a foreground run" ;;
      pgrp) what="SIGINT to the process group of a run without a terminal" ;;
    esac
    if [ $mode = pty ] && ! python3 -c 'import os; os.openpty()' 2>/dev/null; then
      echo "ok $((n = n + 1)) # SKIP $what: no pseudo-terminal"
      continue
    fi
    rm -f "$tmp/int.count"
    got=$(timeout -k 5 90 python3 "$tmp/sigcount.py" $mode "$RL" "$tmp" 2>"$tmp/err")
    check "$what: the command got SIGINT once (got $got)" test "$got" = 1
    [ "$got" = 1 ] || show_err
  done
fi

# --- redislock killed: its command dies with it (Linux) ------------------------------------
if [ "$(uname -s)" = Linux ]; then
  start_bg "$RL" run --ttl 1s orphan -- sh -c 'echo $$ >"$0/orphan.pid.tmp"; mv "$0/orphan.pid.tmp" "$0/orphan.pid"; exec sleep 30' "$tmp"
  pid=$bg
  check "orphan test command started" wait_for "$tmp/orphan.pid"
  cpid=$(cat "$tmp/orphan.pid")
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  i=0
  while kill -0 "$cpid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
  check "the command was killed when redislock was" test $i -lt 100
  rcli DEL redislock:orphan >/dev/null
fi

# --- several --url: a quorum ------------------------------------------------------------
for q in 2 3; do
  redis-server --port 0 --unixsocket "$tmp/q$q.sock" --unixsocketperm 700 --save '' \
    --appendonly no --daemonize no --dir "$tmp" >"$tmp/redis-q$q.log" 2>&1 &
  bg_pids="$bg_pids $!"
done
i=0
until [ "$(redis-cli -s "$tmp/q2.sock" PING 2>/dev/null)" = PONG ] \
  && [ "$(redis-cli -s "$tmp/q3.sock" PING 2>/dev/null)" = PONG ]; do
  i=$((i + 1)); [ $i -gt 200 ] && break; sleep 0.05
done
qurls="--url unix://$sock --url unix://$tmp/q2.sock --url unix://$tmp/q3.sock"
# shellcheck disable=SC2086
rl run $qurls qjob -- sh -c "for s in $sock $tmp/q2.sock $tmp/q3.sock; do redis-cli -s \$s EXISTS redislock:qjob; done" \
  >"$tmp/out" 2>"$tmp/err"
expect_rc "run with three --url: 0" 0 $?
check "three --url: the key is on all three servers while the command runs" args_are "$tmp/out" 1 1 1
check "three --url: the key is gone from all three afterwards" \
  test "$(rcli EXISTS redislock:qjob)$(redis-cli -s "$tmp/q2.sock" EXISTS redislock:qjob)$(redis-cli -s "$tmp/q3.sock" EXISTS redislock:qjob)" = 000
# shellcheck disable=SC2086
rl run --url "unix://$sock" --url "unix://$tmp/q2.sock" --url "unix://$tmp/none.sock" qjob -- true 2>"$tmp/err"
expect_rc "run with 2 of 3 servers reachable: 0" 0 $?
rl run --url "unix://$sock" --url "unix://$tmp/none2.sock" --url "unix://$tmp/none.sock" qjob -- true 2>"$tmp/err"
expect_rc "run with 1 of 3 servers reachable: 2" 2 $?

# --- demo ----------------------------------------------------------------------------------
rl demo --processes 2 --threads 2 --stock 300 >"$tmp/out" 2>"$tmp/err"; expect_rc "demo: 0" 0 $?
diag "$(cat "$tmp/out")"
check "demo sold the whole stock" grep -q '^ *sold: *300$' "$tmp/out"
check "demo oversold 0" grep -q '^ *oversold: *0$' "$tmp/out"
check "demo reports hand-off latency" grep -q '^ *hand-off p99: *[0-9.]* ms$' "$tmp/out"
check "demo reports Redis commands" grep -q '^ *redis commands: *[1-9]' "$tmp/out"
check "demo removed its keys" test -z "$(rcli --scan --pattern 'redislock-demo*')"
mkdir -p "$tmp/demo-tmp"
env -u REDIS_URL TMPDIR="$tmp/demo-tmp" timeout -k 5 60 "$RL" demo --processes 2 --threads 2 \
  --stock 100 >"$tmp/out" 2>"$tmp/err"
expect_rc "demo on a private redis-server: 0" 0 $?
check "demo on a private redis-server oversold 0" grep -q '^ *oversold: *0$' "$tmp/out"
check "demo removed its private server's directory" test -z "$(ls -A "$tmp/demo-tmp")"
# The command needs libredislock only: the demo starts its server without the testing
# library (the build tree's binary is libtool's .libs/redislock).
bin=$RL
[ -x "$(dirname "$RL")/.libs/redislock" ] && bin=$(dirname "$RL")/.libs/redislock
if command -v objdump >/dev/null 2>&1; then
  objdump -p "$bin" >"$tmp/needed" 2>&1
  check "redislock links libredislock" grep -q 'NEEDED *libredislock\.so' "$tmp/needed"
  check "redislock does not link the testing library" lacks "$tmp/needed" libredislock-testing
else
  ok "redislock does not link the testing library # SKIP objdump not installed"
fi

echo "1..$n"
[ $failures -eq 0 ]
