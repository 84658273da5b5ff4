/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection-tests.h: what the two files of the connection test program share
 * (connection.c, connection-proxy.c). */
#ifndef REDIS_LOCK_TESTS_CONNECTION_TESTS_H
#define REDIS_LOCK_TESTS_CONNECTION_TESTS_H

#include "common.h"

/* Short timeouts for the outage tests; the bounds checked allow generous slack. */
#define TIMEOUT_MS 400

/* Asserts that a call made at @start_ms failed (@ok FALSE) with CONNECTION within
 * the outage timeouts; @what names the call in the message. */
void assert_fails_in_time (gboolean ok, GError *error, gint64 start_ms, const char *what);

/* The tests of connection-proxy.c, added by connection.c's main(). */
void connection_add_proxy_tests (void);

#endif /* REDIS_LOCK_TESTS_CONNECTION_TESTS_H */
