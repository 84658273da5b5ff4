/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-run-args.c: the command line of `redislock run`: its options (GOption
 * tables), where they end (NAME, or the first "--"), the durations and counts they take
 * and the checks on them, into a RunArgs for redislock-run.c. Kept apart from the
 * holder and the job control of redislock-run.c, which never read an option. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "redislock-run.h"

gint64
lease_margin_us (gint64 ttl_ms)
{
  gint64 ttl_us = ttl_ms * 1000;

  return MIN (MAX (ttl_us / 20, 25000), ttl_us / 2);
}

/* Whether the option @arg ("-x", "--long" or "--long=VALUE") of @tables takes the next
 * argument as its value. */
static gboolean
option_takes_next (const char *arg, const GOptionEntry *const *tables)
{
  const GOptionEntry *const *t;
  const GOptionEntry *e;

  if (arg[1] == '-')
    {
      const char *name = arg + 2;
      gsize len = strcspn (name, "=");

      if (name[len] == '=')
        return FALSE;
      for (t = tables; *t != NULL; t++)
        for (e = *t; e->long_name != NULL; e++)
          if (strlen (e->long_name) == len && strncmp (e->long_name, name, len) == 0)
            return e->arg != G_OPTION_ARG_NONE;
      return FALSE;
    }
  for (t = tables; *t != NULL; t++)
    for (e = *t; e->long_name != NULL; e++)
      if (e->short_name != 0 && e->short_name == arg[strlen (arg) - 1])
        return e->arg != G_OPTION_ARG_NONE;
  return FALSE;
}



static const char run_usage[] = "run [OPTION…] [--] NAME [--] COMMAND [ARG…]\n"
                                "       redislock run --lock NAME [--lock NAME…] [OPTION…] [--] COMMAND [ARG…]";

static char *opt_wait, *opt_ttl, *opt_kill_after, *opt_min_replicas;
static char **opt_locks;
static gboolean opt_fencing, opt_read, opt_wait_queue;
static int opt_permits = -1; /* -1: not given */
static const GOptionEntry run_entries[] = {
  { "wait", 'w', 0, G_OPTION_ARG_STRING, &opt_wait,
    "Give up (exit 1) when the lock is not acquired within DURATION; 0 tries once "
    "(default: wait forever)",
    "DURATION" },
  { "ttl", 't', 0, G_OPTION_ARG_STRING, &opt_ttl,
    "Lease TTL, renewed while the command runs; bounds how long a crashed redislock "
    "blocks others; at least 100ms (default: 60s)",
    "DURATION" },
  { "kill-after", 'k', 0, G_OPTION_ARG_STRING, &opt_kill_after,
    "When the lease is lost, send SIGKILL this long after SIGTERM (default: 5s), at most "
    "the lease margin, 5% of the TTL (3s at the default TTL); a longer value is cut, with "
    "a warning",
    "DURATION" },
  { "min-replicas", 0, 0, G_OPTION_ARG_STRING, &opt_min_replicas,
    "Count the lease taken and renewed only once N replicas acknowledged it (WAIT, 1s); "
    "fewer: exit 2 without running the command (default: 0, off)",
    "N" },
  { "lock", 'l', 0, G_OPTION_ARG_STRING_ARRAY, &opt_locks,
    "Hold lock NAME; repeat for several locks, taken all or none. With --lock there is no "
    "NAME argument: the command follows the options",
    "NAME" },
  { "fencing", 'f', 0, G_OPTION_ARG_NONE, &opt_fencing,
    "Take each lock with a fencing token, passed to the command as REDIS_LOCK_TOKEN", NULL },
  { "wait-queue", 0, 0, G_OPTION_ARG_NONE, &opt_wait_queue,
    "While waiting, stand in the lock's line in Redis: a release hands the lock to the "
    "first process in line", NULL },
  { "read", 0, 0, G_OPTION_ARG_NONE, &opt_read,
    "Take a shared (read) hold of the read-write lock NAME: other --read runs hold it at "
    "the same time; writers of it wait, and a waiting writer keeps new readers out", NULL },
  { "permits", 'p', 0, G_OPTION_ARG_INT, &opt_permits,
    "Hold one permit of the semaphore NAME of N permits instead of the lock NAME "
    "(REDIS_LOCK_KEY is the permit's key)",
    "N" },
  { NULL },
};



/* Where the options of `run` end: at the first "--" (*@sep set), NAME following it, or
 * at the first argument that is not an option, NAME. */
static int
find_options_end (int argc, char **argv, gboolean *sep)
{
  static const GOptionEntry *const tables[] = { common_entries, run_entries, NULL };
  int end;

  *sep = FALSE;
  for (end = 1; end < argc; end++)
    {
      const char *arg = argv[end];

      if (strcmp (arg, "--") == 0)
        {
          *sep = TRUE;
          break;
        }
      if (arg[0] != '-' || arg[1] == '\0')
        break;
      if (option_takes_next (arg, tables) && end + 1 < argc)
        end++;
    }
  return end;
}

/* Parses the options before NAME. Returns -1 to go on, else an exit status. */
static int
parse_run_options (int end, char **argv)
{
  int opt_argc = end, rc;
  char **opt_argv = g_new0 (char *, opt_argc + 1);

  memcpy (opt_argv, argv, sizeof (char *) * (gsize) opt_argc);
  rc = parse_options ("run", run_usage, "[--] NAME [--] COMMAND [ARG…]",
                      "Holds lock NAME (or every --lock NAME; with --read a shared hold of the\n"
                      "read-write lock NAME; with --permits N one permit of the semaphore NAME)\n"
                      "while COMMAND runs, and exits with its status.\n"
                      "Exit status: the command's; 1 when the lock was not acquired within\n"
                      "--wait; 2 on a Redis error; 3 when the lease was lost while the command\n"
                      "ran; 64 on a usage error; 126/127 when the command cannot be run;\n"
                      "128+N when the command (or redislock, before it started) got signal N.",
                      run_entries, TRUE, TRUE, &opt_argc, &opt_argv);
  if (rc < 0 && opt_argc > 1)
    rc = usage_error ("run", run_usage, "unexpected argument '%s'", opt_argv[1]);
  g_free (opt_argv);
  return rc;
}

/* Reads --wait, --ttl and --kill-after into @args. */
static int
parse_run_durations (RunArgs *args)
{
  args->wait_ms = -1;
  args->ttl_ms = DEFAULT_TTL_MS;
  args->kill_after_ms = DEFAULT_KILL_AFTER_MS;
  if (opt_wait != NULL && strcmp (opt_wait, "forever") != 0
      && !parse_duration (opt_wait, &args->wait_ms))
    return usage_error ("run", run_usage, "invalid duration for --wait: '%s'", opt_wait);
  if (opt_ttl != NULL && (!parse_duration (opt_ttl, &args->ttl_ms) || args->ttl_ms < 1))
    return usage_error ("run", run_usage, "invalid duration for --ttl: '%s' (at least 1ms)",
                        opt_ttl);
  /* The watchdog renews a lease at a third of its TTL and reports it lost once it has
   * gone unconfirmed for the TTL less the lease margin, which is at least 25 ms: below
   * MIN_TTL_MS the time left for a renewal's round trip is a few milliseconds (at 10ms,
   * under 2), which an ordinary scheduling delay exceeds, and the command is killed
   * for a loss that no other holder caused. */
  if (args->ttl_ms < MIN_TTL_MS)
    return usage_error ("run", run_usage,
                        "--ttl %s is too short: at least %dms (a lease is renewed every third "
                        "of its TTL and counts as lost once unconfirmed for the TTL less a "
                        "margin of at least 25ms, which leaves a shorter lease too little "
                        "time for a renewal to reach Redis)",
                        opt_ttl, MIN_TTL_MS);
  if (opt_kill_after != NULL && !parse_duration (opt_kill_after, &args->kill_after_ms))
    return usage_error ("run", run_usage, "invalid duration for --kill-after: '%s'",
                        opt_kill_after);
  /* The command must be dead before the key can expire: the grace is at most the lease
   * margin. Said when the value given is more. */
  if (opt_kill_after != NULL && args->kill_after_ms * 1000 > lease_margin_us (args->ttl_ms))
    {
      g_autofree char *given = format_duration (args->kill_after_ms);
      g_autofree char *used = format_duration (lease_margin_us (args->ttl_ms) / 1000);
      g_autofree char *ttl = format_duration (args->ttl_ms);

      fprintf (stderr,
               "redislock run: warning: --kill-after %s is more than the lease margin of a "
               "%s TTL: using %s\n",
               given, ttl, used);
    }
  if (opt_min_replicas != NULL)
    {
      guint64 n;
      if (!g_ascii_string_to_unsigned (opt_min_replicas, 10, 0, 1000, &n, NULL))
        return usage_error ("run", run_usage,
                            "invalid number for --min-replicas: '%s' (0 to 1000)",
                            opt_min_replicas);
      args->min_replicas = (guint) n;
    }
  return -1;
}

/* Checks a lock name of the command line. Returns -1 when good, else an exit status. */
static int
check_name (const char *name)
{
  if (*name == '\0')
    return usage_error ("run", run_usage, "the lock NAME must not be empty");
  if (strlen (name) > REDIS_LOCK_NAME_MAX)
    return usage_error ("run", run_usage, "lock NAME longer than %d bytes", REDIS_LOCK_NAME_MAX);
  return -1;
}

/* The command line of `run`: options, NAME, COMMAND. One "--" right after NAME is
 * skipped; all the rest, other "--" included, is the command's. With --lock, there is
 * no NAME: the command follows the options (and one "--"). Returns -1 to go on, else an
 * exit status. */
int
parse_run_arguments (int argc, char **argv, RunArgs *args)
{
  static const GOptionEntry *const tables[] = { common_entries, run_entries, NULL };
  gboolean sep;
  int end, rc, i;

  split_attached_values (&argc, &argv, tables, TRUE);
  end = find_options_end (argc, argv, &sep);
  rc = parse_run_options (end, argv);

  if (rc >= 0)
    return rc;
  i = sep ? end + 1 : end;
  args->names = g_ptr_array_new ();
  if (opt_locks != NULL)
    for (char **l = opt_locks; *l != NULL; l++)
      g_ptr_array_add (args->names, *l);
  else
    {
      if (i >= argc)
        return usage_error ("run", run_usage, "no lock NAME given");
      g_ptr_array_add (args->names, argv[i++]);
      if (i < argc && strcmp (argv[i], "--") == 0)
        i++;
    }
  g_ptr_array_add (args->names, NULL);
  args->command = argv + i;
  if (args->command[0] == NULL)
    return usage_error ("run", run_usage, "no COMMAND given");
  for (guint j = 0; j + 1 < args->names->len; j++)
    if ((rc = check_name (g_ptr_array_index (args->names, j))) >= 0)
      return rc;
  args->fencing = opt_fencing;
  args->wait_queue = opt_wait_queue;
  args->read = opt_read;
  if (opt_read && (opt_locks != NULL || opt_fencing))
    return usage_error ("run", run_usage, "--read takes one NAME, without --lock or --fencing");
  if (opt_permits != -1 && (opt_permits < 1 || opt_permits > REDIS_SEMAPHORE_MAX_PERMITS))
    return usage_error ("run", run_usage, "invalid number for --permits: %d (1 to %d)",
                        opt_permits, REDIS_SEMAPHORE_MAX_PERMITS);
  if (opt_permits != -1 && (opt_locks != NULL || opt_fencing || opt_read))
    return usage_error ("run", run_usage,
                        "--permits takes one NAME, without --lock, --fencing or --read");
  args->permits = opt_permits > 0 ? (guint) opt_permits : 0;
  return parse_run_durations (args);
}
