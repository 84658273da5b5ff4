/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* debug.c: whether the library's debug messages are shown (see debug.h). */
#include "config.h"

#include "debug.h"

gboolean
rl_debug_on (void)
{
  static gsize env_read = 0;
  static gboolean env_on = FALSE;

  if (g_log_get_debug_enabled ())
    return TRUE;
  if (g_once_init_enter (&env_read))
    {
      env_on = !g_log_writer_default_would_drop (G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN);
      g_once_init_leave (&env_read, 1);
    }
  return env_on;
}
