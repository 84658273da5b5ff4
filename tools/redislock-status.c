/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-status.c: `redislock status NAME…` and `redislock list`.
 *
 * Both show locks as a table or, with --json, as a JSON array: name, key, held or
 * free, the owner (the value of the key; split into host and pid when it is a client
 * id of libredislock) and the remaining TTL. status reads the named locks
 * (redis_lock_registry_get_lease_info()) and the last fencing token of each, when one
 * was ever handed out (redis_lock_registry_get_last_fencing_token()), and exits 1 when
 * one is free; list finds every
 * lock of a registry (redis_lock_registry_list_leases()). Both also show the threads
 * waiting for each lock (host, pid, since when) from the registry's waits-for records
 * (redis_lock_registry_list_waiters()): a line per waiter under the lock in the table,
 * a "waiters" array in JSON. Both read through a registry
 * of the library, so the key layout and the commands that read it stay the library's.
 * They share one file because they share the printing.
 */
#include "config.h"

#include "redislock-tool.h"
#include "report.h"

#include <stdio.h>
#include <string.h>

/* A lock as status and list show it. */
typedef struct
{
  char *name;
  char *key;
  gboolean held;
  char *owner;   /* NULL when free */
  gint64 ttl_ms; /* -1: no expiry; meaningless when free */
  gboolean has_token; /* a fenced acquisition of the name ever happened */
  guint64 token;      /* then the last token handed out */
  GPtrArray *waiters; /* RedisLockWaiterInfo (borrowed from the list read), oldest first */
} LockInfo;

static void
lock_info_free (gpointer p)
{
  LockInfo *info = p;

  g_free (info->name);
  g_free (info->key);
  g_free (info->owner);
  g_ptr_array_unref (info->waiters);
  g_free (info);
}

/* The lock @name, held by @lease (NULL: free). */
static LockInfo *
lock_info_new (const char *name, const RedisLockLeaseInfo *lease)
{
  LockInfo *info = g_new0 (LockInfo, 1);

  info->name = g_strdup (name);
  info->key = g_strconcat (effective_registry (), ":", name, NULL);
  info->held = lease != NULL;
  info->waiters = g_ptr_array_new ();
  if (lease != NULL)
    {
      info->owner = g_strdup (lease->owner);
      info->ttl_ms = lease->pttl_ms;
    }
  return info;
}

/* A registry on --url and --registry, for reading leases; NULL after a message, with
 * the exit status in *@status. */
static RedisLockRegistry *
open_registry (int *status)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = tool_registry_new (&error);

  if (registry == NULL)
    {
      die_message ("%s", error->message);
      *status = exit_status_for_error (error);
    }
  return registry;
}

/* Hands each waiter of @waiters (RedisLockWaiterInfo, oldest first) to its lock of
 * @locks. */
static void
attach_waiters (GPtrArray *locks, GPtrArray *waiters)
{
  for (guint i = 0; i < locks->len; i++)
    {
      LockInfo *info = g_ptr_array_index (locks, i);

      for (guint j = 0; j < waiters->len; j++)
        {
          RedisLockWaiterInfo *waiter = g_ptr_array_index (waiters, j);

          if (strcmp (waiter->name, info->name) == 0)
            g_ptr_array_add (info->waiters, waiter);
        }
    }
}

/* When a wait began, as local time of day with milliseconds. */
static char *
format_since (gint64 since_us)
{
  g_autoptr (GDateTime) t = g_date_time_new_from_unix_local (since_us / G_USEC_PER_SEC);

  if (t == NULL)
    return g_strdup ("?");
  return g_strdup_printf ("%02d:%02d:%02d.%03d", g_date_time_get_hour (t),
                          g_date_time_get_minute (t), g_date_time_get_second (t),
                          (int) (since_us % G_USEC_PER_SEC / 1000));
}

static char *
format_ttl (const LockInfo *info)
{
  if (!info->held)
    return g_strdup ("-");
  if (info->ttl_ms < 0)
    return g_strdup ("none");
  if (info->ttl_ms < 1000)
    return g_strdup_printf ("%" G_GINT64_FORMAT "ms", info->ttl_ms);
  return g_strdup_printf ("%.1fs", (double) info->ttl_ms / 1000.0);
}

/* The TOKEN column and the "last_token" field: for status, when @locks have a token. */
static gboolean
any_token (GPtrArray *locks)
{
  for (guint i = 0; i < locks->len; i++)
    if (((const LockInfo *) g_ptr_array_index (locks, i))->has_token)
      return TRUE;
  return FALSE;
}

static void
print_locks (GPtrArray *locks, gboolean json, gboolean with_tokens)
{
  guint i;

  if (json)
    {
      GString *out = g_string_new ("[");

      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);

          g_string_append (out, i ? ",\n  {" : "\n  {");
          g_string_append (out, "\"name\": ");
          rl_json_append_string (out, info->name);
          g_string_append (out, ", \"key\": ");
          rl_json_append_string (out, info->key);
          append_holder_json (out, info->held, info->owner, info->ttl_ms);
          if (with_tokens && info->has_token)
            g_string_append_printf (out, ", \"last_token\": %" G_GUINT64_FORMAT, info->token);
          else if (with_tokens)
            g_string_append (out, ", \"last_token\": null");
          append_waiters_json (out, info->waiters);
          g_string_append_c (out, '}');
        }
      g_string_append (out, locks->len ? "\n]\n" : "]\n");
      fputs (out->str, stdout);
      g_string_free (out, TRUE);
      return;
    }
  else
    {
      g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
      g_autoptr (GPtrArray) ttls = g_ptr_array_new_with_free_func (g_free);
      g_autoptr (GPtrArray) tokens = g_ptr_array_new_with_free_func (g_free);
      gboolean token_column = with_tokens && any_token (locks);
      glong name_w = 4, ttl_w = 3, token_w = 5;

      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);
          char *name = escape_for_display (info->name);
          char *ttl = format_ttl (info);

          char *token = info->has_token ? g_strdup_printf ("%" G_GUINT64_FORMAT, info->token)
                                        : g_strdup ("-");

          name_w = MAX (name_w, g_utf8_strlen (name, -1));
          ttl_w = MAX (ttl_w, (glong) strlen (ttl));
          token_w = MAX (token_w, (glong) strlen (token));
          g_ptr_array_add (names, name);
          g_ptr_array_add (ttls, ttl);
          g_ptr_array_add (tokens, token);
        }
      /* The TOKEN column only when a name has a fencing counter: the table stays as it
       * was for locks taken without fencing. */
      if (token_column)
        printf ("%-*s  %-5s  %*s  %*s  %s\n", (int) name_w, "NAME", "STATE", (int) ttl_w, "TTL",
                (int) token_w, "TOKEN", "OWNER");
      else
        printf ("%-*s  %-5s  %*s  %s\n", (int) name_w, "NAME", "STATE", (int) ttl_w, "TTL",
                "OWNER");
      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);
          const char *name = g_ptr_array_index (names, i);
          g_autofree char *owner = info->owner ? escape_for_display (info->owner) : g_strdup ("-");
          int pad = (int) (name_w - g_utf8_strlen (name, -1));

          if (token_column)
            printf ("%s%*s  %-5s  %*s  %*s  %s\n", name, pad, "", info->held ? "held" : "free",
                    (int) ttl_w, (const char *) g_ptr_array_index (ttls, i), (int) token_w,
                    (const char *) g_ptr_array_index (tokens, i), owner);
          else
            printf ("%s%*s  %-5s  %*s  %s\n", name, pad, "", info->held ? "held" : "free",
                    (int) ttl_w, (const char *) g_ptr_array_index (ttls, i), owner);
          for (guint j = 0; j < info->waiters->len; j++)
            {
              const RedisLockWaiterInfo *w = g_ptr_array_index (info->waiters, j);
              g_autofree char *host = escape_for_display (w->host);
              g_autofree char *since = format_since (w->since_us);

              printf ("  waiter %s:%" G_GINT64_FORMAT " since %s (%.1fs)\n", host, w->pid, since,
                      (double) (g_get_real_time () - w->since_us) / G_USEC_PER_SEC);
            }
        }
    }
}

static gboolean opt_json;

static const char status_usage[] = "status [OPTION…] NAME…";
static const char list_usage[] = "list [OPTION…]";

static const GOptionEntry json_entries[] = {
  { "json", 'j', 0, G_OPTION_ARG_NONE, &opt_json, "Print a JSON array for scripts", NULL },
  { NULL },
};

/* The leases of @names, in that order; NULL after a message when one cannot be read. */
static GPtrArray *
read_named_locks (RedisLockRegistry *registry, GPtrArray *names)
{
  g_autoptr (GPtrArray) locks = g_ptr_array_new_with_free_func (lock_info_free);
  guint j;

  for (j = 0; j < names->len; j++)
    {
      g_autoptr (GError) error = NULL;
      const char *name = g_ptr_array_index (names, j);
      RedisLockLeaseInfo *lease = redis_lock_registry_get_lease_info (registry, name, &error);
      LockInfo *info;

      if (lease == NULL && error != NULL)
        {
          die_message ("%s", error->message);
          return NULL;
        }
      info = lock_info_new (name, lease);
      redis_lock_lease_info_free (lease);
      g_ptr_array_add (locks, info);
      /* A name that cannot have a counter (INVALID) simply has none. */
      info->has_token = redis_lock_registry_get_last_fencing_token (registry, name, &info->token,
                                                                    &error);
      if (error != NULL && !g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID))
        {
          die_message ("%s", error->message);
          return NULL;
        }
    }
  return g_steal_pointer (&locks);
}

int
cmd_status (int argc, char **argv)
{
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) waiters = NULL;
  g_autoptr (GPtrArray) locks = NULL;
  g_autoptr (GPtrArray) names = g_ptr_array_new ();
  g_autofree char **opt_argv = NULL;
  int rc, i, opt_argc;
  gboolean all_held = TRUE;
  guint j;

  /* Options end at the first "--"; names follow (they may start with a dash). */
  for (opt_argc = 1; opt_argc < argc && strcmp (argv[opt_argc], "--") != 0; opt_argc++)
    ;
  opt_argv = g_new0 (char *, opt_argc + 1);
  memcpy (opt_argv, argv, sizeof (char *) * (gsize) opt_argc);
  for (i = opt_argc + 1; i < argc; i++)
    g_ptr_array_add (names, argv[i]);
  rc = parse_options ("status", status_usage, "NAME…",
                      "Shows whether each lock NAME is held, by which client, for how long, and\n"
                      "the last fencing token handed out for it (when one ever was), and the\n"
                      "threads waiting for it (host:pid, since when).\n"
                      "Exit status: 0 when every NAME is held, 1 when one is free, 2 on a Redis\n"
                      "error, 64 on a usage error.",
                      json_entries, TRUE, FALSE, &opt_argc, &opt_argv);
  if (rc >= 0)
    return rc;
  for (i = opt_argc - 1; i >= 1; i--)
    g_ptr_array_insert (names, 0, opt_argv[i]);
  if (names->len == 0)
    return usage_error ("status", status_usage, "no lock NAME given");
  for (j = 0; j < names->len; j++)
    {
      const char *name = g_ptr_array_index (names, j);

      if (name[0] == '\0')
        return usage_error ("status", status_usage, "a lock NAME must not be empty");
      if (strlen (name) > REDIS_LOCK_NAME_MAX)
        return usage_error ("status", status_usage, "lock NAME longer than %d bytes",
                            REDIS_LOCK_NAME_MAX);
    }
  registry = open_registry (&rc);
  if (registry == NULL)
    return rc;
  locks = read_named_locks (registry, names);
  if (locks == NULL)
    return EXIT_REDIS;
  waiters = redis_lock_registry_list_waiters (registry, &error);
  if (waiters == NULL)
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  attach_waiters (locks, waiters);
  print_locks (locks, opt_json, TRUE);
  for (j = 0; j < locks->len; j++)
    if (!((LockInfo *) g_ptr_array_index (locks, j))->held)
      all_held = FALSE;
  return all_held ? 0 : 1;
}

static int
compare_leases (gconstpointer a, gconstpointer b)
{
  const RedisLockLeaseInfo *x = *(const RedisLockLeaseInfo *const *) a;
  const RedisLockLeaseInfo *y = *(const RedisLockLeaseInfo *const *) b;

  return strcmp (x->name, y->name);
}

int
cmd_list (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (GPtrArray) leases = NULL;
  g_autoptr (GPtrArray) waiters = NULL;
  g_autoptr (GPtrArray) locks = g_ptr_array_new_with_free_func (lock_info_free);
  int rc;
  guint j;

  rc = parse_options ("list", list_usage, "",
                      "Lists the locks held in a registry (keys KEY:*, found with SCAN).",
                      json_entries, TRUE, FALSE, &argc, &argv);
  if (rc >= 0)
    return rc;
  if (argc > 1)
    return usage_error ("list", list_usage, "unexpected argument '%s'", argv[1]);
  registry = open_registry (&rc);
  if (registry == NULL)
    return rc;
  leases = redis_lock_registry_list_leases (registry, &error);
  if (leases == NULL)
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  /* By name; SCAN may return a key more than once. */
  g_ptr_array_sort (leases, compare_leases);
  for (j = 0; j < leases->len; j++)
    {
      const RedisLockLeaseInfo *lease = g_ptr_array_index (leases, j);

      if (j == 0 || compare_leases (&g_ptr_array_index (leases, j - 1), &lease) != 0)
        g_ptr_array_add (locks, lock_info_new (lease->name, lease));
    }
  waiters = redis_lock_registry_list_waiters (registry, &error);
  if (waiters == NULL)
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  attach_waiters (locks, waiters);
  print_locks (locks, opt_json, FALSE);
  return 0;
}
