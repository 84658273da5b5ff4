/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* error.c: the library's error domain, REDIS_LOCK_ERROR.
 *
 * One quark for every error the library reports, as GLib libraries do; the codes are
 * in redislock-error.h.
 */
#include "config.h"

#include <glib.h>

#include "redislock/redislock.h"

/* Not G_DEFINE_QUARK: its unsynchronised first-use check is a (benign) data race that
 * ThreadSanitizer reports when several threads fail at once. */
GQuark
redis_lock_error_quark (void)
{
  static gsize quark = 0;

  if (g_once_init_enter (&quark))
    g_once_init_leave (&quark, g_quark_from_static_string ("redis-lock-error-quark"));
  return (GQuark) quark;
}
