#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# leftovers.sh: test programs leave nothing in the temporary directory. Each case below
# runs with TMPDIR set to a fresh directory, which must be empty afterwards: the
# throwaway redis-servers' directories (redislock-test-*) are removed by their
# fixtures' teardown, which a test's subprocess aborted on purpose (g_test_trap_subprocess)
# never runs, so such a case must start no server. Prints TAP.

set -u
B=${G_TEST_BUILDDIR:-.}
n=0
failures=0

if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/sbin/redis-server ]; then
  echo "1..0 # SKIP redis-server is not installed"
  exit 0
fi
top=$(mktemp -d "${TMPDIR:-/tmp}/redislock-leftovers.XXXXXX") || exit 1
trap 'rm -rf "$top"' EXIT

# case PROGRAM TESTPATH: runs one test case of PROGRAM in a fresh TMPDIR
case_leaves_nothing () {
  n=$((n + 1))
  dir=$top/$n
  mkdir "$dir"
  if [ ! -x "$B/$1" ]; then
    echo "not ok $n - $1 $2 # $B/$1 has not been built"; failures=$((failures + 1)); return
  fi
  TMPDIR=$dir "$B/$1" -p "$2" >"$top/$n.log" 2>&1
  rc=$?
  left=$(ls -A "$dir")
  if [ $rc -eq 0 ] && [ -z "$left" ]; then
    echo "ok $n - $1 $2 leaves no temporary directory"
  else
    echo "not ok $n - $1 $2 leaves no temporary directory"
    failures=$((failures + 1))
    [ $rc -eq 0 ] || { echo "# exit status $rc"; sed 's/^/# /' "$top/$n.log" | tail -20; }
    if [ -n "$left" ]; then echo "# left:" $left; fi
  fi
}

# a case with a fixture of three servers, and the quorum's one trapped subprocess
case_leaves_nothing quorum /quorum/all-nodes
case_leaves_nothing quorum /quorum/fencing-refused

echo "1..$n"
[ $failures -eq 0 ]
