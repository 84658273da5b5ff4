#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# pkgconfig.sh: the installed redislock.pc, as a program outside the tree uses it.
# Installs the library, its headers and redislock.pc into a scratch DESTDIR, then builds
# a small program with `pkg-config --cflags --libs redislock` (shared library) and with
# `pkg-config --static` against libredislock.a, and runs both. Checks that no hiredis
# flag reaches a user's compiler and that Requires carries version floors.
# The installed .pc is relocated into the DESTDIR by rewriting its absolute directory
# variables: PKG_CONFIG_SYSROOT_DIR would move GLib's directories as well.
# Run by `make check` with MAKE, CC, CFLAGS, LDFLAGS, PKG_CONFIG, RL_TOP_BUILDDIR,
# RL_PKGCONFIGDIR, RL_LIBDIR and RL_VERSION from tests/Makefile.am. Prints TAP.

set -u

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
diag () { printf '%s\n' "$@" | sed 's/^/# /'; }

PKG_CONFIG=${PKG_CONFIG:-pkg-config}
CC=${CC:-cc}
if ! command -v "$PKG_CONFIG" >/dev/null 2>&1; then
  echo "1..0 # SKIP $PKG_CONFIG is not installed"
  exit 0
fi
if [ -z "${RL_TOP_BUILDDIR:-}" ] || [ -z "${RL_PKGCONFIGDIR:-}" ] || [ -z "${RL_LIBDIR:-}" ] \
   || [ -z "${RL_VERSION:-}" ]; then
  echo "1..0 # SKIP run through make check (needs RL_TOP_BUILDDIR, RL_PKGCONFIGDIR, RL_LIBDIR, RL_VERSION)"
  exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/redislock-pc.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
dest=$tmp/dest

# The library (shared and static) with libtool, its headers and redislock.pc, without
# the testing library, the tool or the benchmark: installing the testing library would
# relink it in the build tree while other tests run against it. Sub-makes of their
# own: not the jobserver of the make running the tests.
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${MAKE:-make}" -s -C "$RL_TOP_BUILDDIR/src" \
     install-redislockincludeHEADERS install-nodist_redislockincludeHEADERS \
     DESTDIR="$dest" >"$tmp/install.log" 2>&1 \
   && mkdir -p "$dest$RL_LIBDIR" \
   && "$RL_TOP_BUILDDIR/libtool" --quiet --mode=install install -c \
     "$RL_TOP_BUILDDIR/src/libredislock.la" "$dest$RL_LIBDIR" >>"$tmp/install.log" 2>&1 \
   && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${MAKE:-make}" -s -C "$RL_TOP_BUILDDIR" \
     install-pkgconfigDATA DESTDIR="$dest" >>"$tmp/install.log" 2>&1; then
  ok "make install DESTDIR installs the library and redislock.pc"
else
  not_ok "make install DESTDIR installs the library and redislock.pc"
  diag "$(tail -20 "$tmp/install.log")"
  echo "1..$n"
  exit 1
fi

pcdir=$tmp/pc
mkdir -p "$pcdir"
sed -E -e "s#^(prefix|exec_prefix|libdir|includedir)=/#\1=$dest/#" \
  "$dest$RL_PKGCONFIGDIR/redislock.pc" >"$pcdir/redislock.pc"
PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_PATH
unset PKG_CONFIG_SYSROOT_DIR

cflags=$("$PKG_CONFIG" --cflags redislock 2>"$tmp/err")
case $cflags in
  *hiredis* | *_FILE_OFFSET_BITS*) not_ok "pkg-config --cflags names no hiredis flag"; diag "$cflags" ;;
  *) ok "pkg-config --cflags names no hiredis flag" ;;
esac

requires=$("$PKG_CONFIG" --print-requires redislock 2>&1)
floors=yes
for m in glib-2.0 gobject-2.0 gio-2.0; do
  printf '%s\n' "$requires" | grep -q "^$m >= 2\.74" || floors=no
done
if [ $floors = yes ]; then
  ok "Requires has glib, gobject and gio >= 2.74"
else
  not_ok "Requires has glib, gobject and gio >= 2.74"; diag "$requires"
fi

cat >"$tmp/prog.c" <<'PROG'
#include <redislock/redislock.h>
#include <stdio.h>

int
main (void)
{
  GError *error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new ("memory://pkgconfig", "pc", &error);
  RedisLock *lock;
  gboolean held;

  if (registry == NULL)
    {
      fprintf (stderr, "%s\n", error->message);
      g_error_free (error);
      return 1;
    }
  lock = redis_lock_registry_obtain (registry, "a", &error);
  if (lock == NULL || !redis_lock_lock (lock, &error))
    {
      fprintf (stderr, "%s\n", error->message);
      return 1;
    }
  held = redis_lock_is_held_by_current_thread (lock);
  if (!redis_lock_unlock (lock, &error))
    {
      fprintf (stderr, "%s\n", error->message);
      return 1;
    }
  redis_lock_unref (lock);
  redis_lock_registry_unref (registry);
  printf ("redislock %s %s\n", REDIS_LOCK_VERSION_S, held ? "held" : "not held");
  return held ? 0 : 1;
}
PROG

# build NAME LIBS...: compile and link prog.c with this build's compiler flags
build () {
  out=$1; shift
  # shellcheck disable=SC2086 # flags are word lists
  $CC ${CFLAGS:-} $cflags "$tmp/prog.c" -o "$tmp/$out" ${LDFLAGS:-} "$@" >"$tmp/cc.log" 2>&1
}

want="redislock $RL_VERSION held"
libs=$("$PKG_CONFIG" --libs redislock)
# shellcheck disable=SC2086
if build prog-shared $libs; then
  ok "a program builds with pkg-config --cflags --libs redislock"
  if got=$(LD_LIBRARY_PATH=$dest$RL_LIBDIR "$tmp/prog-shared" 2>&1) && [ "$got" = "$want" ]; then
    ok "it runs against the installed shared library"
  else
    not_ok "it runs against the installed shared library"; diag "$got"
  fi
else
  not_ok "a program builds with pkg-config --cflags --libs redislock"; diag "$libs" "$(cat "$tmp/cc.log")"
  not_ok "it runs against the installed shared library"
fi

if [ ! -f "$dest$RL_LIBDIR/libredislock.a" ]; then
  echo "ok $((n + 1)) # SKIP libredislock.a is not built (configure --disable-static)"
  n=$((n + 1))
  echo "ok $((n + 1)) # SKIP libredislock.a is not built"
  n=$((n + 1))
else
  # -l:libredislock.a picks the static library where -lredislock would take the .so
  static_libs=$("$PKG_CONFIG" --static --libs redislock | sed 's/-lredislock\( \|$\)/-l:libredislock.a\1/')
  # shellcheck disable=SC2086
  if build prog-static $static_libs; then
    ok "a program links libredislock.a with pkg-config --static --libs redislock"
    if LC_ALL=C readelf -d "$tmp/prog-static" 2>/dev/null | grep -q 'NEEDED.*libredislock'; then
      not_ok "the static program runs without libredislock.so"; diag "it needs libredislock.so"
    elif got=$("$tmp/prog-static" 2>&1) && [ "$got" = "$want" ]; then
      ok "the static program runs without libredislock.so"
    else
      not_ok "the static program runs without libredislock.so"; diag "$got"
    fi
  elif grep -q 'cannot find -l' "$tmp/cc.log" && ! grep -q 'undefined reference' "$tmp/cc.log"; then
    # a -dev package of a library under GnuTLS or GLib is missing (scripts/install-deps
    # installs them): not something redislock.pc can fix
    missing=$(sed -n 's/.*cannot find \(-l[^:]*\).*/\1/p' "$tmp/cc.log" | sort -u | tr '\n' ' ')
    echo "ok $((n + 1)) # SKIP static link: no static-link files for $missing"
    n=$((n + 1))
    echo "ok $((n + 1)) # SKIP static link: no static-link files for $missing"
    n=$((n + 1))
  else
    not_ok "a program links libredislock.a with pkg-config --static --libs redislock"
    diag "$static_libs" "$(grep -v '^/usr/bin/ld: warning' "$tmp/cc.log" | head -15)"
    not_ok "the static program runs without libredislock.so"
  fi
fi

echo "1..$n"
[ "$failures" -eq 0 ]
