#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs one Python test script for automake's tap-driver with $PYTHON (configure picks a
# python3 that has PyGObject). A script that cannot run here prints a `1..0 # SKIP`
# plan and exits 77, the automake convention for a skipped test; tap-driver counts the
# plan as a skip but would count the status as an error, so 77 becomes 0 here.
#
# A library built with AddressSanitizer or ThreadSanitizer cannot be loaded into the
# uninstrumented python3 (the sanitizer's runtime must come first in the process), so
# the script is skipped in such a build; tests/types checks the GTypes there.
py=${PYTHON:-python3}
if [ "${REDIS_LOCK_INTROSPECTION:-yes}" = no ]; then
  echo "1..0 # SKIP this build has no typelib (gobject-introspection not found, or --disable-introspection)"
  exit 0
fi
if ! command -v "$py" >/dev/null 2>&1; then
  echo "1..0 # SKIP $py is not installed"
  exit 0
fi
for dir in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
  lib="$dir/libredislock.so"
  [ -e "$lib" ] || continue
  if command -v ldd >/dev/null 2>&1 && ldd "$lib" 2>/dev/null | grep -Eq 'lib(asan|tsan)\.so'; then
    echo "1..0 # SKIP $lib is built with a sanitizer, which $py cannot load"
    exit 0
  fi
  break
done
"$py" "$@"
rc=$?
[ "$rc" -eq 77 ] && exit 0
exit "$rc"
