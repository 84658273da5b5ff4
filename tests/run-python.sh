#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs one Python test script for automake's tap-driver with $PYTHON (configure picks a
# python3 that has PyGObject). A script that cannot run here prints a `1..0 # SKIP`
# plan and exits 77, the automake convention for a skipped test; tap-driver counts the
# plan as a skip but would count the status as an error, so 77 becomes 0 here.
py=${PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  echo "1..0 # SKIP $py is not installed"
  exit 0
fi
"$py" "$@"
rc=$?
[ "$rc" -eq 77 ] && exit 0
exit "$rc"
