#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# exports.sh: the production library exports production symbols only. The test
# utilities of redislock-test.h (test servers, Clusters, Sentinels, the memory store's
# hooks) live in libredislock-testing; this reads the dynamic symbol tables of both
# shared libraries of the build tree with nm and fails when a redis_lock_test_* or
# redis_lock_memory_store_* function is exported by libredislock again, when a private
# rl_* function is exported by either, or when libredislock-testing exports anything
# but test API. When the introspection data is built, the Redislock GIR must name no
# test symbol or type either (they belong to RedislockTesting). Prints TAP; skipped in
# a build without shared libraries (configure --disable-shared).

set -u

src=${G_TEST_BUILDDIR:-.}/../src
nm_cmd=${NM:-nm}
prod=$src/.libs/libredislock.so
testing=${G_TEST_BUILDDIR:-.}/../testing/.libs/libredislock-testing.so

if [ ! -e "$prod" ] || [ ! -e "$testing" ]; then
  echo "1..0 # SKIP no shared libraries in the build tree (a static-only build)"
  exit 0
fi

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
diag () { printf '%s\n' "$@" | sed 's/^/# /'; }

# exported LIBRARY: the names of the functions and data the library defines and exports
exported () {
  $nm_cmd -D --defined-only "$1" | awk 'NF >= 3 && $2 ~ /^[TDBRVW]$/ { print $3 }' | sort
}

prod_syms=$(exported "$prod") || { echo "Bail out! $nm_cmd failed on $prod"; exit 1; }
testing_syms=$(exported "$testing") || { echo "Bail out! $nm_cmd failed on $testing"; exit 1; }

if [ -n "$prod_syms" ]; then
  ok "libredislock exports symbols ($(echo "$prod_syms" | wc -l))"
else
  not_ok "libredislock exports symbols"
fi

bad=$(echo "$prod_syms" | grep -E '^(redis_lock_test_|redis_lock_memory_store_)')
if [ -z "$bad" ]; then
  ok "libredislock exports no test utility"
else
  not_ok "libredislock exports no test utility"
  diag "exported by libredislock, declared in redislock-test.h (they belong to libredislock-testing):" $bad
fi

# The public API: redis_lock_*, and the semaphore's redis_semaphore_* and redis_permit_*, the leader's
# redis_leader_*, the read-write
# lock's redis_rw_lock_*.
bad=$(echo "$prod_syms" |
  grep -v -E '^(redis_lock_|redis_rw_lock_|redis_semaphore_|redis_permit_|redis_leader_|_init$|_fini$|_edata$|_end$|__bss_start$)')
if [ -z "$bad" ]; then
  ok "libredislock exports only public API functions"
else
  not_ok "libredislock exports only public API functions"
  diag "exported by libredislock without being public API:" $bad
fi

bad=$(echo "$testing_syms" |
  grep -v -E '^(redis_lock_test_|redis_lock_memory_store_|_init$|_fini$|_edata$|_end$|__bss_start$)')
if [ -z "$bad" ]; then
  ok "libredislock-testing exports only test utilities"
else
  not_ok "libredislock-testing exports only test utilities"
  diag "exported by libredislock-testing without being test API:" $bad
fi

missing=
for sym in redis_lock_check_version redis_lock_get_major_version redis_lock_get_minor_version \
  redis_lock_get_micro_version; do
  echo "$prod_syms" | grep -q "^$sym\$" || missing="$missing $sym"
done
if [ -z "$missing" ]; then
  ok "libredislock exports the run-time version (redis_lock_check_version and the numbers)"
else
  not_ok "libredislock exports the run-time version (missing:$missing)"
fi

if echo "$testing_syms" | grep -q '^redis_lock_test_server_new$' &&
   echo "$testing_syms" | grep -q '^redis_lock_memory_store_expire$'; then
  ok "libredislock-testing exports the test server and the memory store hooks"
else
  not_ok "libredislock-testing exports the test server and the memory store hooks"
fi

gir=$(ls "$src"/Redislock-*.gir 2>/dev/null | head -n 1)
if [ -n "$gir" ]; then
  bad=$(grep -E 'c:identifier="redis_lock_(test|memory_store)_|c:type="RedisLockTest' "$gir")
  if [ -z "$bad" ]; then
    ok "$(basename "$gir") names no test symbol or type"
  else
    not_ok "$(basename "$gir") names no test symbol or type"
    diag "$bad"
  fi
else
  ok "# SKIP no Redislock GIR in this build"
fi

echo "1..$n"
[ "$failures" -eq 0 ]
