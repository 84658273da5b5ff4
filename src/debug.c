/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* debug.c: whether the library's debug messages are shown (see debug.h). */
#include "config.h"

#include "debug.h"

gboolean
rl_debug_on (void)
{
  /* What G_MESSAGES_DEBUG said, read at the first message: 0 not read yet, 1 off, 2
   * on. Threads that meet 0 together each read it and store the same answer, so a
   * plain atomic does (no once-lock, which ThreadSanitizer could not see through). */
  static gint env = 0;
  gint seen;

  if (g_log_get_debug_enabled ())
    return TRUE;
  seen = g_atomic_int_get (&env);
  if (seen == 0)
    {
      seen = g_log_writer_default_would_drop (G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN) ? 1 : 2;
      g_atomic_int_set (&env, seen);
    }
  return seen == 2;
}
