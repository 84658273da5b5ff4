/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-break.c: `redislock break NAME`, an operator's forced unlock.
 *
 * A holder that crashed with a long TTL keeps its lock until the key expires; `break`
 * deletes the key whoever holds it and publishes the unlock notification, so waiters
 * everywhere wake at once and a holder of this library learns that its lease is lost
 * (redis_lock_registry_force_unlock()). It goes through a registry of the library, so
 * the key layout, the notification and the refusal of keys that are no leases (a
 * readers set, a waiting mark, a semaphore's size: INVALID) stay the library's. Exit
 * status: 0 when a key was deleted, 1 when the lock was free, 2 on a Redis error, 64
 * on a usage error or a key that is no lease.
 */
#include "config.h"

#include "redislock-tool.h"

#include <stdio.h>
#include <string.h>

static const char break_usage[] = "break [OPTION…] [--] NAME";

static const GOptionEntry break_entries[] = { { NULL } };

int
cmd_break (int argc, char **argv)
{
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char **opt_argv = NULL;
  const char *name = NULL;
  int rc, opt_argc;

  /* Options end at the first "--"; the name follows (it may start with a dash). */
  for (opt_argc = 1; opt_argc < argc && strcmp (argv[opt_argc], "--") != 0; opt_argc++)
    ;
  if (opt_argc + 1 < argc)
    name = argv[opt_argc + 1];
  if (opt_argc + 2 < argc)
    return usage_error ("break", break_usage, "one lock NAME only");
  opt_argv = g_new0 (char *, opt_argc + 1);
  memcpy (opt_argv, argv, sizeof (char *) * (gsize) opt_argc);
  rc = parse_options ("break", break_usage, "NAME",
                      "Deletes lock NAME whoever holds it and notifies its waiters, which wake at\n"
                      "once; a holder using redislock learns within about a second that its lease\n"
                      "is lost. For recovering from a crashed holder with a long TTL. Deletes\n"
                      "leases only: a read-write lock's readers set or waiting mark and a\n"
                      "semaphore's size are refused.\n"
                      "Exit status: 0 when the lock was held and is now free, 1 when it was free,\n"
                      "2 on a Redis error, 64 on a usage error or a key that is no lease.",
                      break_entries, TRUE, FALSE, &opt_argc, &opt_argv);
  if (rc >= 0)
    return rc;
  if (opt_argc > 2 || (opt_argc == 2 && name != NULL))
    return usage_error ("break", break_usage, "one lock NAME only");
  if (opt_argc == 2)
    name = opt_argv[1];
  if (name == NULL)
    return usage_error ("break", break_usage, "no lock NAME given");
  if (name[0] == '\0')
    return usage_error ("break", break_usage, "a lock NAME must not be empty");
  if (strlen (name) > REDIS_LOCK_NAME_MAX)
    return usage_error ("break", break_usage, "lock NAME longer than %d bytes",
                        REDIS_LOCK_NAME_MAX);

  registry = tool_registry_new (&error);
  if (registry == NULL)
    {
      die_message ("%s", error->message);
      return exit_status_for_error (error);
    }
  if (redis_lock_registry_force_unlock (registry, name, &error))
    {
      g_autofree char *shown = escape_for_display (name);
      printf ("%s: broken\n", shown);
      return 0;
    }
  if (error != NULL)
    {
      die_message ("%s", error->message);
      return exit_status_for_error (error);
    }
  {
    g_autofree char *shown = escape_for_display (name);
    printf ("%s: free\n", shown);
  }
  return 1;
}
