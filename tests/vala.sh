#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# vala.sh: the Vala bindings. redislock.vapi and redislock-testing.vapi are made from
# the GIRs with their .deps files, and examples/vala-contend (vala-contend.vala compiled
# by valac against them) runs: eight threads of two registries count exactly under one
# lock, try_lock_for () gives up while another registry holds the lock, and a bad name
# is caught as Redis.LockError.INVALID; it starts its own redis-server. Run by make
# check with RL_TOP_BUILDDIR and REDISLOCK_VALA (yes, no, or nocompiler: vapigen
# without valac). Prints TAP.

set -u

case ${REDISLOCK_VALA:-no} in
  no) echo "1..0 # SKIP no Vala bindings in this build (configure --enable-vala: vapigen and introspection)"; exit 0 ;;
esac
top=${RL_TOP_BUILDDIR:?run through make check}

n=0
failures=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
diag () { printf '%s\n' "$@" | sed 's/^/# /'; }

# has_deps FILE PACKAGE...: FILE lists each PACKAGE on a line of its own.
has_deps () {
  f=$1; shift
  for p in "$@"; do grep -qx "$p" "$f" 2>/dev/null || return 1; done
}

vapi=$top/src/redislock.vapi
if grep -q 'namespace Redis ' "$vapi" 2>/dev/null && grep -q 'public errordomain LockError ' "$vapi" \
   && grep -q 'public class LockRegistry ' "$vapi"; then
  ok "redislock.vapi has the namespace Redis, LockRegistry and the error domain LockError"
else
  not_ok "redislock.vapi has the namespace Redis, LockRegistry and the error domain LockError"
fi
if has_deps "$top/src/redislock.deps" glib-2.0 gobject-2.0 gio-2.0; then
  ok "redislock.deps lists glib-2.0, gobject-2.0 and gio-2.0"
else
  not_ok "redislock.deps lists glib-2.0, gobject-2.0 and gio-2.0"
fi
if grep -q 'public class TestServer ' "$top/testing/redislock-testing.vapi" 2>/dev/null \
   && has_deps "$top/testing/redislock-testing.deps" glib-2.0 gobject-2.0; then
  ok "redislock-testing.vapi has TestServer and its .deps"
else
  not_ok "redislock-testing.vapi has TestServer and its .deps"
fi

if [ "$REDISLOCK_VALA" = nocompiler ]; then
  echo "ok 4 # SKIP valac is not installed: examples/vala-contend is not built"
  n=4
else
  out=$(unset REDIS_URL; "$top/examples/vala-contend" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q 'counter = 400 (expected 400)' \
     && printf '%s\n' "$out" | grep -q 'try_lock_for (100) = false' \
     && printf '%s\n' "$out" | grep -q '^obtain (""): '; then
    ok "examples/vala-contend: exact count, false while held elsewhere, LockError caught"
  else
    not_ok "examples/vala-contend: exact count, false while held elsewhere, LockError caught"
    diag "exit status $rc" "$out"
  fi
fi

echo "1..$n"
[ "$failures" -eq 0 ]
