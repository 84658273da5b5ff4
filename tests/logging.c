/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* logging.c: the library's debug messages, in the GLib log domain `redislock`.
 *
 * A debug message is formatted and logged only when GLib's default writer would show
 * it: G_MESSAGES_DEBUG naming the domain, read once at the first message, or
 * g_log_set_debug_enabled (TRUE) at any time. Otherwise the message never reaches a
 * writer, so formatting it costs nothing on every unlock. This program installs a
 * writer of its own (before anything is logged, as GLib requires) that counts the
 * library's debug messages, and runs lock+unlock pairs on a memory:// store, whose
 * outermost unlock logs its plan.
 */
#include "config.h"

#include <string.h>

#include <redislock/redislock.h>

static gint debug_messages; /* atomic: the library's debug messages the writer saw */

static GLogWriterOutput
count_writer (GLogLevelFlags level, const GLogField *fields, gsize n_fields, gpointer data)
{
  const char *domain = NULL;
  const char *message = NULL;

  for (gsize i = 0; i < n_fields; i++)
    if (strcmp (fields[i].key, "GLIB_DOMAIN") == 0)
      domain = fields[i].value;
    else if (strcmp (fields[i].key, "MESSAGE") == 0)
      message = fields[i].value;
  if ((level & G_LOG_LEVEL_DEBUG) && g_strcmp0 (domain, "redislock") == 0 && message != NULL
      && strstr (message, "unlock") != NULL)
    g_atomic_int_inc (&debug_messages);
  if (level & G_LOG_LEVEL_DEBUG)
    return G_LOG_WRITER_HANDLED;
  return g_log_writer_default (level, fields, n_fields, data);
}

/* Lock+unlock pairs on one lock of a memory:// registry. */
static void
lock_unlock_pairs (guint n)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = redis_lock_registry_new ("memory://logging", "log",
                                                                     &error);
  g_autoptr (RedisLock) lock = NULL;

  g_assert_no_error (error);
  lock = redis_lock_registry_obtain (registry, "pairs", &error);
  g_assert_no_error (error);
  for (guint i = 0; i < n; i++)
    {
      g_assert_true (redis_lock_lock (lock, &error));
      g_assert_no_error (error);
      g_assert_true (redis_lock_unlock (lock, &error));
      g_assert_no_error (error);
    }
}

static void
test_debug_off (void)
{
  g_test_summary ("With debug messages off (no G_MESSAGES_DEBUG, g_log_set_debug_enabled "
                  "FALSE), the unlock plan's debug message reaches no writer: it is not "
                  "even formatted.");
  g_log_set_debug_enabled (FALSE);
  g_atomic_int_set (&debug_messages, 0);
  lock_unlock_pairs (10);
  g_assert_cmpint (g_atomic_int_get (&debug_messages), ==, 0);
}

static void
test_debug_on (void)
{
  g_test_summary ("g_log_set_debug_enabled (TRUE) turns the library's debug messages on at "
                  "once: each outermost unlock's plan reaches the writer.");
  g_log_set_debug_enabled (TRUE);
  g_atomic_int_set (&debug_messages, 0);
  lock_unlock_pairs (10);
  g_log_set_debug_enabled (FALSE);
  g_assert_cmpint (g_atomic_int_get (&debug_messages), >=, 10);
}

int
main (int argc, char **argv)
{
  /* Before anything is logged: the writer can be set only then, and the library reads
   * G_MESSAGES_DEBUG once, at its first message. */
  g_unsetenv ("G_MESSAGES_DEBUG");
  g_log_set_writer_func (count_writer, NULL, NULL);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/logging/debug/off", test_debug_off);
  g_test_add_func ("/logging/debug/on", test_debug_on);
  return g_test_run ();
}
