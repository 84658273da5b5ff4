/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock: the command-line tool, a flock(1) whose locks live in Redis.
 *
 * This file is the front of the tool, shaped like GLib's gio tool: main(), the table
 * of commands it dispatches to (each command lives in a redislock-<command>.c of its
 * own), the options every command takes (--url, --registry), the option parsing they
 * share and the usage messages. `run` holds a lock while a command runs, `status` and
 * `list` show who holds which lock, `demo` runs a flash sale made correct by the lock.
 * The manual is redislock.1; the tests are tests/cli.sh.
 */
#include "config.h"

#include "redislock-tool.h"

#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* Options shared by the subcommands                                                     */

char *opt_url;
char **opt_urls; /* every --url given, in order; several make a quorum registry */
char *opt_registry;
const char *tool_argv0;
int pipe_disposition_ignored;

const char *
effective_url (void)
{
  const char *env;

  if (opt_url != NULL)
    return opt_url;
  env = g_getenv ("REDIS_URL");
  if (env != NULL && *env != '\0')
    return env;
  return DEFAULT_URL;
}

const char *
effective_registry (void)
{
  return opt_registry != NULL ? opt_registry : DEFAULT_REGISTRY;
}

/* --url, once or more: the first is opt_url, all are in opt_urls. */
static gboolean
add_url (const char *option_name, const char *value, gpointer data, GError **error)
{
  guint n = opt_urls != NULL ? g_strv_length (opt_urls) : 0;

  if (*value == '\0')
    {
      g_set_error_literal (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                           "the URL must not be empty");
      return FALSE;
    }
  opt_urls = g_renew (char *, opt_urls, n + 2);
  opt_urls[n] = g_strdup (value);
  opt_urls[n + 1] = NULL;
  if (opt_url == NULL)
    opt_url = opt_urls[0];
  return TRUE;
}

RedisLockRegistry *
tool_registry_new (GError **error)
{
  if (opt_urls != NULL && g_strv_length (opt_urls) > 1)
    return redis_lock_registry_new_quorum ((const char *const *) opt_urls, effective_registry (),
                                           error);
  return redis_lock_registry_new (effective_url (), effective_registry (), error);
}
const GOptionEntry common_entries[] = {
  { "url", 'u', 0, G_OPTION_ARG_CALLBACK, (gpointer) add_url,
    "Redis server (default: $REDIS_URL, else " DEFAULT_URL "); given several times: "
    "independent masters, a lock held on a majority of them", "URL" },
  { "registry", 'r', 0, G_OPTION_ARG_STRING, &opt_registry,
    "Registry key: lock NAME is the Redis key KEY:NAME (default: " DEFAULT_REGISTRY ")",
    "KEY" },
  { NULL },
};

static const char url_help[] =
  "URL forms:\n"
  "  redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]\n"
  "  unix:///PATH/TO/SOCKET[?db=N&password=P&username=U]\n"
  "  redis-sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…][/DB]"
  "[?sentinel_username=U&sentinel_password=P]#MASTER\n"
  "  redis-cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]\n"
  "\n";
static const char duration_help[] =
  "Durations: a number with a unit, 500ms, 10s, 2m, 1h; a plain number is seconds\n"
  "(1.5 = 1500ms).\n"
  "\n";
static const char see_also_help[] = "See redislock(1) for details and examples.";

/* Parses the options of a subcommand. Returns -1 to go on, else an exit status. */
int
parse_options (const char *cmd, const char *usage, const char *params, const char *summary,
               const GOptionEntry *entries, gboolean with_common, gboolean strict_posix,
               int *argc, char ***argv)
{
  g_autoptr (GOptionContext) context = g_option_context_new (params);
  g_autoptr (GError) error = NULL;
  g_autofree char *prgname = g_strdup_printf ("redislock %s", cmd);
  g_autofree char *description = g_strconcat (url_help,
                                              strcmp (cmd, "run") == 0 ? duration_help : "",
                                              see_also_help, NULL);

  g_set_prgname (prgname);
  g_option_context_set_summary (context, summary);
  g_option_context_set_description (context, description);
  if (with_common)
    g_option_context_add_main_entries (context, common_entries, NULL);
  if (entries != NULL)
    g_option_context_add_main_entries (context, entries, NULL);
  g_option_context_set_strict_posix (context, strict_posix);
  if (!g_option_context_parse (context, argc, argv, &error))
    return usage_error (cmd, usage, "%s", error->message);
  if (opt_registry != NULL && *opt_registry == '\0')
    return usage_error (cmd, usage, "the registry key must not be empty");
  if (opt_url != NULL && *opt_url == '\0')
    return usage_error (cmd, usage, "the URL must not be empty");
  return -1;
}
/* Prints a usage error for subcommand @cmd (NULL: top level) and returns EXIT_USAGE. */
int
usage_error (const char *cmd, const char *usage, const char *format, ...)
{
  va_list ap;
  g_autofree char *shown = NULL;

  va_start (ap, format);
  shown = format_redacted (format, ap);
  va_end (ap);
  fprintf (stderr, "redislock%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", shown);
  fprintf (stderr, "Usage: redislock %s\n", usage);
  fprintf (stderr, "Try 'redislock %s%s--help' for more information.\n", cmd ? cmd : "",
           cmd ? " " : "");
  return EXIT_USAGE;
}

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

  if (argc >= 2 && strcmp (argv[1], DEMO_WORKER_MODE) == 0)
    return demo_worker (argc - 1, argv + 1);

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
