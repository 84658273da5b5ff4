#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# docs.sh: the reference manual that docs/Makefile.am renders with gi-docgen from the GIR
# (configure --enable-docs). Checks that it was built, that it has a page for each
# public type and for redis_lock_registry_new(), and that that page lists every URL form
# the library takes, as its doc comment does. Skipped in a build without the manual.
# Run by `make check` with REDISLOCK_DOCS (yes or no) and RL_TOP_BUILDDIR from
# tests/Makefile.am. Prints TAP.

set -u

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
# check DESCRIPTION COMMAND…: one TAP line for whether COMMAND succeeds
check () { d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }

if [ "${REDISLOCK_DOCS:-no}" != yes ] || [ -z "${RL_TOP_BUILDDIR:-}" ]; then
  echo "1..0 # SKIP the reference manual is not built (configure --enable-docs)"
  exit 0
fi
ref=$RL_TOP_BUILDDIR/docs/reference

check "the manual has an index" test -s "$ref/index.html"
for page in struct.LockRegistry.html struct.Lock.html enum.LockWaitMode.html \
  ctor.LockRegistry.new.html method.Lock.try_lock_for.html; do
  check "the manual has $page" test -s "$ref/$page"
done
page=$ref/ctor.LockRegistry.new.html
missing=
for f in redis:// rediss:// unix:// redis-sentinel:// rediss-sentinel:// redis-cluster:// \
  rediss-cluster:// memory://; do
  grep -q -- "$f" "$page" 2>/dev/null || missing="$missing $f"
done
check "the page of redis_lock_registry_new lists every URL form${missing:+ (missing:$missing)}" \
  test -z "$missing"

echo "1..$n"
[ "$failures" -eq 0 ]
