#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# availability.sh: the availability and deprecation macros of redislock-version.h, as a
# program built against the headers meets them. GLib's gversionmacros.h works the same
# way, and so must ours: a call to a function newer than REDIS_LOCK_VERSION_MAX_ALLOWED
# warns (G_UNAVAILABLE), a call to one deprecated in or before
# REDIS_LOCK_VERSION_MIN_REQUIRED warns (G_DEPRECATED) unless
# REDIS_LOCK_DISABLE_DEPRECATION_WARNINGS is defined, and neither warns by default.
# Each case compiles a small program with -Werror=deprecated-declarations against the
# headers of the source and build trees. Run by `make check` with CC, CFLAGS,
# PKG_CONFIG and RL_TOP_BUILDDIR from tests/Makefile.am. Prints TAP.

set -u

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
diag () { printf '%s\n' "$@" | sed 's/^/# /'; }

PKG_CONFIG=${PKG_CONFIG:-pkg-config}
CC=${CC:-cc}
if [ -z "${RL_TOP_BUILDDIR:-}" ] || [ -z "${G_TEST_SRCDIR:-}" ]; then
  echo "1..0 # SKIP run through make check (needs RL_TOP_BUILDDIR and G_TEST_SRCDIR)"
  exit 0
fi
glib_cflags=$($PKG_CONFIG --cflags gio-2.0) || { echo "Bail out! no gio-2.0 for $PKG_CONFIG"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/redislock-availability.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP

# compiles DEFINES…: compiles $tmp/prog.c to an object with the given -D options; the
# compiler's output is left in $tmp/cc.log
compiles () {
  # shellcheck disable=SC2086 # the flags are word lists
  $CC ${CFLAGS:-} $glib_cflags -I"$G_TEST_SRCDIR/../include" -I"$RL_TOP_BUILDDIR/include" \
    -Werror=deprecated-declarations "$@" -c "$tmp/prog.c" -o "$tmp/prog.o" >"$tmp/cc.log" 2>&1
}
# expect_build DESCRIPTION DEFINES…; expect_refusal DESCRIPTION PATTERN DEFINES…
expect_build () {
  d=$1; shift
  if compiles "$@"; then ok "$d"; else not_ok "$d"; diag "$(cat "$tmp/cc.log")"; fi
}
expect_refusal () {
  d=$1; pattern=$2; shift 2
  if compiles "$@"; then
    not_ok "$d (it compiled)"
  elif grep -q -- "$pattern" "$tmp/cc.log"; then
    ok "$d"
  else
    not_ok "$d (not for the expected reason: $pattern)"
    diag "$(cat "$tmp/cc.log")"
  fi
}

# A function of 0.1, called by a program that may need an earlier version.
cat >"$tmp/prog.c" <<'PROG'
#include <redislock/redislock.h>
int
main (void)
{
  return redis_lock_check_version (REDIS_LOCK_MAJOR_VERSION, REDIS_LOCK_MINOR_VERSION,
                                   REDIS_LOCK_MICRO_VERSION) != NULL;
}
PROG
expect_build "a function of 0.1 compiles by default"
expect_build "a function of 0.1 compiles with REDIS_LOCK_VERSION_MAX_ALLOWED 0.1" \
  -DREDIS_LOCK_VERSION_MIN_REQUIRED=REDIS_LOCK_VERSION_0_1 \
  -DREDIS_LOCK_VERSION_MAX_ALLOWED=REDIS_LOCK_VERSION_0_1
expect_refusal "a function of 0.1 warns with REDIS_LOCK_VERSION_MAX_ALLOWED 0.0" \
  "Not available before 0.1" \
  "-DREDIS_LOCK_VERSION_MIN_REQUIRED=G_ENCODE_VERSION(0,0)" \
  "-DREDIS_LOCK_VERSION_MAX_ALLOWED=G_ENCODE_VERSION(0,0)"
expect_refusal "REDIS_LOCK_VERSION_MIN_REQUIRED above REDIS_LOCK_VERSION_MAX_ALLOWED is an error" \
  "must be >=" \
  "-DREDIS_LOCK_VERSION_MIN_REQUIRED=REDIS_LOCK_VERSION_0_1" \
  "-DREDIS_LOCK_VERSION_MAX_ALLOWED=G_ENCODE_VERSION(0,0)"

# A function deprecated in 0.1 (declared by the program: the library has none yet).
cat >"$tmp/prog.c" <<'PROG'
#include <redislock/redislock.h>
REDIS_LOCK_DEPRECATED_IN_0_1_FOR (redis_lock_check_version) int old_check (void);
int old_check (void) { return 0; }
int
main (void)
{
  return old_check ();
}
PROG
expect_refusal "a function deprecated in 0.1 warns by default, naming its replacement" \
  "Use 'redis_lock_check_version' instead"
expect_build "a function deprecated in 0.1 compiles with REDIS_LOCK_VERSION_MIN_REQUIRED 0.0" \
  "-DREDIS_LOCK_VERSION_MIN_REQUIRED=G_ENCODE_VERSION(0,0)"
expect_build "a function deprecated in 0.1 compiles with REDIS_LOCK_DISABLE_DEPRECATION_WARNINGS" \
  -DREDIS_LOCK_DISABLE_DEPRECATION_WARNINGS

# The try_ calls' results must be used.
cat >"$tmp/prog.c" <<'PROG'
#include <redislock/redislock.h>
void try_once (RedisLock *lock);
void try_once (RedisLock *lock) { redis_lock_try_lock (lock, NULL); }
PROG
expect_refusal "ignoring the result of redis_lock_try_lock warns" "unused-result" \
  -Werror=unused-result

echo "1..$n"
[ "$failures" -eq 0 ]
