#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs one GLib test program in TAP mode for automake's tap-driver.
exec "$@" --tap -k
