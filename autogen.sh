#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Regenerates the autotools files (configure, Makefile.in, the libtool and TAP driver
# scripts under build-aux/) from configure.ac and the Makefile.am files.  Run it once
# after a fresh clone; then ./configure && make.  Arguments are passed to configure
# unless NOCONFIGURE is set.
set -e
srcdir=$(dirname "$0")
test -n "$srcdir" || srcdir=.
cd "$srcdir"
autoreconf --force --install --verbose >/dev/null 2>&1 || autoreconf --force --install --verbose
cd - >/dev/null
if [ -z "$NOCONFIGURE" ]; then
  exec "$srcdir/configure" "$@"
fi
