/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-options.c: the options every command of the redislock tool takes (--url,
 * --registry), the option parsing the commands share and their usage messages.
 *
 * Kept out of the front (redislock.c, main() and the table of commands) because the
 * commands call it: the front calls the commands, the commands call this file, and no
 * call goes back up.
 */
#include "config.h"

#include "redislock-tool.h"

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

/* Every URL form the library takes; the rediss ones in a build with TLS. */
static const char url_help[]
    = "URL forms:\n"
      "  redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?db=N&password=P&username=U]\n"
      "  unix:///PATH/TO/SOCKET[?db=N&password=P&username=U]\n"
      "  redis-sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…][/DB]"
      "[?sentinel_username=U&sentinel_password=P]#MASTER\n"
      "  redis-cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]\n"
#ifdef RL_HAVE_GNUTLS
      "  rediss://…, rediss-sentinel://…, rediss-cluster://…\n"
      "      the same over TLS, with ?ca=FILE&cert=FILE&key=FILE&sni=NAME in the query\n"
      "      (all optional; certificates are always verified)\n"
#endif
      "  memory://NAME   a store inside this process, for tests (no other process sees it)\n"
      "\n";
static const char duration_help[] =
  "Durations: a number with a unit, 500ms, 10s, 2m, 1h; a plain number is seconds\n"
  "(1.5 = 1500ms).\n"
  "\n";
static const char see_also_help[] = "See redislock(1) for details and examples.";

/* The entry of @tables (NULL-terminated) with the short name @c, or NULL. */
static const GOptionEntry *
find_short_option (const GOptionEntry *const *tables, char c)
{
  for (const GOptionEntry *const *t = tables; *t != NULL; t++)
    for (const GOptionEntry *e = *t; e->long_name != NULL; e++)
      if (e->short_name != 0 && e->short_name == c)
        return e;
  return NULL;
}

/* Whether @e reads a value from the next argument when given alone ("-w 5s"). */
static gboolean
takes_value (const GOptionEntry *e)
{
  if (e->arg == G_OPTION_ARG_NONE)
    return FALSE;
  return e->arg != G_OPTION_ARG_CALLBACK
         || (e->flags & (G_OPTION_FLAG_NO_ARG | G_OPTION_FLAG_OPTIONAL_ARG)) == 0;
}

/* Whether the long option @arg ("--name", not "--name=VALUE") of @tables reads a value
 * from the next argument. */
static gboolean
long_option_takes_next (const char *arg, const GOptionEntry *const *tables)
{
  const char *name = arg + 2;

  if (strchr (name, '=') != NULL)
    return FALSE;
  for (const GOptionEntry *const *t = tables; *t != NULL; t++)
    for (const GOptionEntry *e = *t; e->long_name != NULL; e++)
      if (strcmp (e->long_name, name) == 0)
        return takes_value (e);
  return FALSE;
}

/* The arguments split_attached_values() made, kept for the life of the process: the
 * commands keep pointers into them, and GOption drops the ones it parsed from argv. */
static GPtrArray *split_args;

void
split_attached_values (int *argc, char ***argv, const GOptionEntry *const *tables,
                       gboolean strict_posix)
{
  GPtrArray *out = g_ptr_array_new ();
  gboolean options = TRUE;
  int i;

  if (split_args == NULL)
    split_args = g_ptr_array_new ();
  g_ptr_array_add (out, (*argv)[0]);
  for (i = 1; i < *argc; i++)
    {
      char *arg = (*argv)[i];
      gsize len = strlen (arg);
      const GOptionEntry *e = NULL;
      gsize k;

      if (!options || arg[0] != '-' || arg[1] == '\0')
        {
          /* not an option: under strict POSIX rules, the end of the options */
          g_ptr_array_add (out, arg);
          options = options && !strict_posix;
          continue;
        }
      if (strcmp (arg, "--") == 0)
        {
          for (; i < *argc; i++)
            g_ptr_array_add (out, (*argv)[i]);
          break;
        }
      if (arg[1] == '-')
        {
          g_ptr_array_add (out, arg);
          if (long_option_takes_next (arg, tables) && i + 1 < *argc)
            g_ptr_array_add (out, (*argv)[++i]);
          continue;
        }
      /* "-XYZ": each flag apart, up to the first that takes a value, which gets the rest
       * of the argument or, when nothing is left, the next argument. An argument with a
       * character that is not one of ours, or with flags only, is left to GOption. */
      for (k = 1; k < len; k++)
        {
          e = find_short_option (tables, arg[k]);
          if (e == NULL || takes_value (e))
            break;
        }
      if (k == len || e == NULL)
        {
          g_ptr_array_add (out, arg);
          continue;
        }
      for (gsize f = 1; f <= k; f++)
        {
          char *flag = g_strdup_printf ("-%c", arg[f]);

          g_ptr_array_add (split_args, flag);
          g_ptr_array_add (out, flag);
        }
      if (k < len - 1)
        {
          char *value = g_strdup (arg + k + 1);

          g_ptr_array_add (split_args, value);
          g_ptr_array_add (out, value);
        }
      else if (i + 1 < *argc)
        g_ptr_array_add (out, (*argv)[++i]);
    }
  *argc = (int)out->len;
  g_ptr_array_add (out, NULL);
  g_ptr_array_add (split_args, out->pdata);
  *argv = (char **)g_ptr_array_free (out, FALSE);
}

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

  const GOptionEntry *tables[] = { with_common ? common_entries : entries, entries, NULL };
  int split_argc = *argc;
  char **split_argv = *argv;

  if (!with_common)
    tables[1] = NULL;
  split_attached_values (&split_argc, &split_argv, tables, strict_posix);
  g_set_prgname (prgname);
  g_option_context_set_summary (context, summary);
  g_option_context_set_description (context, description);
  if (with_common)
    g_option_context_add_main_entries (context, common_entries, NULL);
  if (entries != NULL)
    g_option_context_add_main_entries (context, entries, NULL);
  g_option_context_set_strict_posix (context, strict_posix);
  if (!g_option_context_parse (context, &split_argc, &split_argv, &error))
    return usage_error (cmd, usage, "%s", error->message);
  /* What is left goes back into the caller's array, which the caller frees: it is no
   * longer than before the split, since GOption took the options and their values and
   * every argument the split made is one of those. */
  g_assert (split_argc <= *argc);
  memmove (*argv, split_argv, sizeof (char *) * (gsize)split_argc);
  (*argv)[split_argc] = NULL;
  *argc = split_argc;
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
