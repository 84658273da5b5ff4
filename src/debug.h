/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* debug.h: rl_debug(), the library's debug messages, formatted only when shown.
 *
 * g_debug() formats its message before GLib's default writer decides to drop it (it
 * drops debug messages unless G_MESSAGES_DEBUG names the domain or
 * g_log_set_debug_enabled() was called), and every outermost unlock logs its plan:
 * that formatting cost an uncontended lock+unlock a fifth of its instructions. So the
 * message is formatted only when the default writer would show it, and
 * G_MESSAGES_DEBUG is read once, at the first message, rather than three times a
 * lock+unlock (a getenv() walks the whole environment). An application that routes the
 * library's messages elsewhere (its own writer or handler) sets G_MESSAGES_DEBUG before
 * it starts, or calls g_log_set_debug_enabled (TRUE), to receive them.
 */
#ifndef RL_DEBUG_H
#define RL_DEBUG_H

#include <glib.h>

/* Whether the library's debug messages are shown. */
gboolean rl_debug_on (void);

#define rl_debug(...)                                                                        \
  G_STMT_START                                                                               \
  {                                                                                          \
    if (G_UNLIKELY (rl_debug_on ()))                                                         \
      g_debug (__VA_ARGS__);                                                                 \
  }                                                                                          \
  G_STMT_END

#endif /* RL_DEBUG_H */
