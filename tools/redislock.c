/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock: the command-line tool, a flock(1) whose locks live in Redis.
 *
 * This file is the front of the tool, shaped like GLib's gio tool: main(), the help
 * and the table of commands it dispatches to (each command lives in a
 * redislock-<command>.c of its own; the options they share are parsed by
 * redislock-options.c). `run` holds a lock while a command runs, `status` and `list`
 * show who holds which lock, `demo` runs a flash sale made correct by the lock, its
 * worker processes being one more, hidden, entry of the table. The manual is
 * redislock.1; the tests are tests/cli.sh.
 */
#include "config.h"

#include "redislock-tool.h"

#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* main                                                                                  */

static const char main_help[] =
  "Usage: redislock COMMAND [OPTION…] [ARG…]\n"
  "\n"
  "Named locks shared through Redis: flock(1) for processes on many machines.\n"
  "\n"
  "Commands:\n"
  "  run [OPTION…] [--] NAME [--] COMMAND [ARG…]\n"
  "                                          hold lock NAME while COMMAND runs\n"
  "  status [OPTION…] NAME…                  show whether locks are held, by whom, how long\n"
  "  list [OPTION…]                          show the locks held in a registry\n"
  "  break [OPTION…] NAME                    delete lock NAME whoever holds it; waiters wake\n"
  "  watch [OPTION…]                         show a registry's locks live (q to quit)\n"
  "  demo [OPTION…]                          flash-sale demonstration of the lock\n"
  "  help [COMMAND]                          show help for a command\n"
  "\n"
  "Options:\n"
  "  -h, --help       show this help\n"
  "  -V, --version    show the version\n"
  "\n"
  "Common command options:\n"
  "  -u, --url URL        Redis server (default: $REDIS_URL, else " DEFAULT_URL ");\n"
  "                       several --url: independent masters, locks on a majority\n"
  "  -r, --registry KEY   lock NAME is the Redis key KEY:NAME (default: " DEFAULT_REGISTRY ")\n"
  "\n"
  "Examples:\n"
  "  redislock run --wait 10s nightly-backup -- ./backup.sh\n"
  "  redislock status nightly-backup\n"
  "  redislock list --json\n"
  "\n"
  "Run 'redislock COMMAND --help' for the options of a command; see redislock(1).\n";

static const char help_help[]
    = "Usage: redislock help [COMMAND]\n"
      "\n"
      "Show the options of COMMAND (as 'redislock COMMAND --help' does), or without\n"
      "COMMAND the list of commands.\n";

/* The commands, as GLib's gio tool lists its own: name and entry point. */
typedef struct
{
  const char *name;
  int (*handler) (int argc, char **argv);
} ToolCommand;

static const ToolCommand commands[] = {
  { "run", cmd_run },
  { "status", cmd_status },
  { "list", cmd_list },
  { "demo", cmd_demo },
  { "break", cmd_break },
  { "watch", cmd_watch },
  /* Hidden: what `demo` starts its worker processes as. */
  { DEMO_WORKER_MODE, demo_worker },
};

/* Handles what comes before a command (--help, --version, help COMMAND): returns -1
 * with @argc and @argv moved to the command's arguments, or an exit status. */
static int
parse_top_level (int *argc, char ***argv)
{
  static char *help_argv[] = { NULL, (char *) "--help", NULL };
  const char *cmd;

  if (*argc < 2)
    {
      fputs (main_help, stderr);
      return EXIT_USAGE;
    }
  cmd = (*argv)[1];
  if (strcmp (cmd, "-h") == 0 || strcmp (cmd, "--help") == 0 || strcmp (cmd, "-?") == 0)
    {
      fputs (main_help, stdout);
      return 0;
    }
  if (strcmp (cmd, "-V") == 0 || strcmp (cmd, "--version") == 0)
    {
      printf ("redislock %s\n", REDIS_LOCK_VERSION_S);
      return 0;
    }
  if (strcmp (cmd, "help") == 0)
    {
      if (*argc < 3)
        {
          fputs (main_help, stdout);
          return 0;
        }
      if (*argc == 3
          && (strcmp ((*argv)[2], "--help") == 0 || strcmp ((*argv)[2], "-h") == 0
              || strcmp ((*argv)[2], "-?") == 0))
        {
          fputs (help_help, stdout);
          return 0;
        }
      if (*argc > 3)
        return usage_error ("help", "help [COMMAND]", "too many arguments");
      help_argv[0] = (*argv)[2];
      *argc = 2;
      *argv = help_argv;
      return -1;
    }
  (*argc)--;
  (*argv)++;
  return -1;
}

int
main (int argc, char **argv)
{
  gsize i;
  int rc;

  setlocale (LC_ALL, "");
  tool_argv0 = argv[0];
  g_log_set_writer_func (redacting_log_writer, NULL, NULL);
  /* A write to a dropped Redis connection must be an error, not a death. */
  pipe_disposition_ignored = signal_is_ignored (SIGPIPE);
  signal (SIGPIPE, SIG_IGN);

  g_set_prgname ("redislock");
  rc = parse_top_level (&argc, &argv);
  if (rc >= 0)
    return rc;
  for (i = 0; i < G_N_ELEMENTS (commands); i++)
    if (strcmp (argv[0], commands[i].name) == 0)
      return commands[i].handler (argc, argv);
  fprintf (stderr, "redislock: unknown command '%s'\n", argv[0]);
  fprintf (stderr, "Usage: redislock COMMAND [OPTION…] [ARG…]\n");
  fprintf (stderr, "Try 'redislock --help' for more information.\n");
  return EXIT_USAGE;
}
