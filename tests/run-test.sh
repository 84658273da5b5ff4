#!/bin/sh
# Runs one GLib test program in TAP mode for automake's tap-driver.
exec "$@" --tap -k
