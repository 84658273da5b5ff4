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
 * a "waiters" array in JSON; and the processes standing in each lock's wait queue
 * (redis_lock_registry_list_queue(): position, host:pid, since when), an "in line"
 * line each in the table, a "queue" array in JSON. The lock family's keys in the
 * listing are read as the holds they make (redislock-family.c): a read-write lock
 * shows its writer or its readers, a semaphore its permits used of its size, a line
 * per reader or permit under it; status finds them by name in the listing, and shows
 * a plain lock as a leader's with --leader (nothing in Redis tells the two apart).
 * Both read through a registry of the library, so the key layout and the commands
 * that read it stay the library's.
 * They share one file because they share the printing.
 */
#include "config.h"

#include "redislock-tool.h"
#include "report.h"

#include <stdio.h>
#include <string.h>

/* A lock, read-write lock or semaphore as status and list show it. */
typedef struct
{
  FamilyHold *hold;
  gboolean owns_hold; /* else borrowed from a listing's holds */
  gboolean has_token; /* a fenced acquisition of the name ever happened */
  guint64 token;      /* then the last token handed out */
  GPtrArray *waiters; /* RedisLockWaiterInfo (borrowed from the list read), oldest first */
  GPtrArray *queue;   /* RedisLockQueueInfo (owned), first in line first */
} LockInfo;

static void
lock_info_free (gpointer p)
{
  LockInfo *info = p;

  if (info->owns_hold)
    family_hold_free (info->hold);
  g_ptr_array_unref (info->waiters);
  g_ptr_array_unref (info->queue);
  g_free (info);
}

/* Takes @hold when @owns, else borrows it. */
static LockInfo *
lock_info_new (FamilyHold *hold, gboolean owns)
{
  LockInfo *info = g_new0 (LockInfo, 1);

  info->hold = hold;
  info->owns_hold = owns;
  info->waiters = g_ptr_array_new ();
  info->queue = g_ptr_array_new ();
  return info;
}

/* The plain lock @name, held by @lease (NULL: free), as a leader's when @leader. */
static LockInfo *
plain_lock_info_new (const char *name, const RedisLockLeaseInfo *lease, gboolean leader)
{
  FamilyHold *hold = family_hold_new (name, leader ? FAMILY_KIND_LEADER : FAMILY_KIND_LOCK);

  if (lease != NULL)
    {
      FamilyKey key = { (char *) name, FAMILY_ROLE_LOCK, NULL, 0 };

      family_hold_add (hold, &key, name, lease->owner, lease->pttl_ms);
    }
  return lock_info_new (hold, TRUE);
}

/* The single holder shown on a lock's line: a lock's, a leader's or a writer's. */
static const FamilyHolder *
main_holder (const FamilyHold *hold)
{
  const FamilyHolder *h;

  if (hold->holders->len == 0)
    return NULL;
  h = g_ptr_array_index (hold->holders, 0);
  return h->role == FAMILY_ROLE_LOCK || h->role == FAMILY_ROLE_WRITER ? h : NULL;
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
      gboolean first = TRUE;

      /* under the first line of the name (a name may be a lock and a read-write lock) */
      for (guint k = 0; k < i && first; k++)
        first = strcmp (((LockInfo *) g_ptr_array_index (locks, k))->hold->name, info->hold->name)
                != 0;
      for (guint j = 0; first && j < waiters->len; j++)
        {
          RedisLockWaiterInfo *waiter = g_ptr_array_index (waiters, j);

          if (strcmp (waiter->name, info->hold->name) == 0)
            g_ptr_array_add (info->waiters, waiter);
        }
    }
}

/* Reads the wait queue of each lock of @locks (the first of its name: a name may be a
 * lock and a read-write lock; only a plain lock has a queue). */
static gboolean
attach_queues (RedisLockRegistry *registry, GPtrArray *locks, GError **error)
{
  for (guint i = 0; i < locks->len; i++)
    {
      LockInfo *info = g_ptr_array_index (locks, i);
      gboolean first = TRUE;
      GPtrArray *queue;

      for (guint k = 0; k < i && first; k++)
        first = strcmp (((LockInfo *) g_ptr_array_index (locks, k))->hold->name, info->hold->name)
                != 0;
      if (!first)
        continue;
      queue = redis_lock_registry_list_queue (registry, info->hold->name, error);
      if (queue == NULL)
        return FALSE;
      g_ptr_array_unref (info->queue);
      info->queue = queue;
    }
  return TRUE;
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
format_ttl (const FamilyHolder *holder)
{
  if (holder == NULL)
    return g_strdup ("-");
  if (holder->ttl_ms < 0)
    return g_strdup ("none");
  if (holder->ttl_ms < 1000)
    return g_strdup_printf ("%" G_GINT64_FORMAT "ms", holder->ttl_ms);
  return g_strdup_printf ("%.1fs", (double) holder->ttl_ms / 1000.0);
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

/* The OWNER column of a lock's line: its holder, or how many hold it. */
static char *
owner_text (const FamilyHold *hold)
{
  const FamilyHolder *h = main_holder (hold);

  if (h != NULL)
    return escape_for_display (h->owner);
  if (hold->kind == FAMILY_KIND_RW && hold->holders->len > 0)
    return g_strdup_printf ("%u reader%s", hold->holders->len, hold->holders->len == 1 ? "" : "s");
  if (hold->kind == FAMILY_KIND_SEMAPHORE && hold->size > 0)
    return g_strdup_printf ("%u of %u permits", hold->holders->len, hold->size);
  if (hold->kind == FAMILY_KIND_SEMAPHORE && hold->holders->len > 0)
    return g_strdup_printf ("%u permit%s", hold->holders->len, hold->holders->len == 1 ? "" : "s");
  return g_strdup ("-");
}

static void
append_family_json (GString *out, const FamilyHold *hold)
{
  g_string_append (out, ", \"kind\": ");
  rl_json_append_string (out, family_kind_name (hold->kind));
  g_string_append (out, ", \"state\": ");
  rl_json_append_string (out, family_hold_state (hold));
  g_string_append (out, ", \"holders\": [");
  for (guint i = 0; i < hold->holders->len; i++)
    {
      const FamilyHolder *h = g_ptr_array_index (hold->holders, i);

      g_string_append (out, i ? ", {\"role\": " : "{\"role\": ");
      rl_json_append_string (out, hold->kind == FAMILY_KIND_LEADER ? "leader"
                                                                   : family_role_name (h->role));
      g_string_append (out, ", \"key\": ");
      rl_json_append_string (out, h->key);
      if (h->role == FAMILY_ROLE_PERMIT)
        g_string_append_printf (out, ", \"permit\": %u", h->permit);
      append_holder_json (out, TRUE, h->owner, h->ttl_ms);
      g_string_append_c (out, '}');
    }
  g_string_append_c (out, ']');
  if (hold->kind == FAMILY_KIND_RW)
    {
      g_string_append_printf (out, ", \"readers\": %u, \"writer_waiting\": ",
                              family_hold_count (hold, FAMILY_ROLE_READER));
      rl_json_append_string (out, hold->writer_waiting);
    }
  if (hold->kind == FAMILY_KIND_SEMAPHORE)
    {
      g_string_append_printf (out, ", \"permits_used\": %u", hold->holders->len);
      if (hold->size > 0)
        g_string_append_printf (out, ", \"size\": %u", hold->size);
      else
        g_string_append (out, ", \"size\": null");
    }
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
          const FamilyHolder *h = main_holder (info->hold);

          g_string_append (out, i ? ",\n  {" : "\n  {");
          g_string_append (out, "\"name\": ");
          rl_json_append_string (out, info->hold->name);
          g_string_append (out, ", \"key\": ");
          rl_json_append_string (out, info->hold->key);
          /* held: by anyone; owner and TTL: of the one holder of a lock or a writer */
          append_holder_json (out, info->hold->holders->len > 0, h != NULL ? h->owner : NULL,
                              h != NULL ? h->ttl_ms : -1);
          if (with_tokens && info->has_token)
            g_string_append_printf (out, ", \"last_token\": %" G_GUINT64_FORMAT, info->token);
          else if (with_tokens)
            g_string_append (out, ", \"last_token\": null");
          append_waiters_json (out, info->waiters);
          append_queue_json (out, info->queue);
          append_family_json (out, info->hold);
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
      int state_w = 5;

      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);
          char *name = escape_for_display (info->hold->name);
          char *ttl = format_ttl (main_holder (info->hold));

          char *token = info->has_token ? g_strdup_printf ("%" G_GUINT64_FORMAT, info->token)
                                        : g_strdup ("-");

          name_w = MAX (name_w, g_utf8_strlen (name, -1));
          ttl_w = MAX (ttl_w, (glong) strlen (ttl));
          token_w = MAX (token_w, (glong) strlen (token));
          state_w = MAX (state_w, (int) strlen (family_hold_state (info->hold)));
          g_ptr_array_add (names, name);
          g_ptr_array_add (ttls, ttl);
          g_ptr_array_add (tokens, token);
        }
      /* The TOKEN column only when a name has a fencing counter: the table stays as it
       * was for locks taken without fencing. */
      if (token_column)
        printf ("%-*s  %-*s  %*s  %*s  %s\n", (int) name_w, "NAME", state_w, "STATE", (int) ttl_w,
                "TTL", (int) token_w, "TOKEN", "OWNER");
      else
        printf ("%-*s  %-*s  %*s  %s\n", (int) name_w, "NAME", state_w, "STATE", (int) ttl_w,
                "TTL", "OWNER");
      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);
          const FamilyHold *hold = info->hold;
          const char *name = g_ptr_array_index (names, i);
          g_autofree char *owner = owner_text (hold);
          int pad = (int) (name_w - g_utf8_strlen (name, -1));

          if (token_column)
            printf ("%s%*s  %-*s  %*s  %*s  %s\n", name, pad, "", state_w,
                    family_hold_state (hold), (int) ttl_w,
                    (const char *) g_ptr_array_index (ttls, i), (int) token_w,
                    (const char *) g_ptr_array_index (tokens, i), owner);
          else
            printf ("%s%*s  %-*s  %*s  %s\n", name, pad, "", state_w, family_hold_state (hold),
                    (int) ttl_w, (const char *) g_ptr_array_index (ttls, i), owner);
          /* a line per reader or permit, and a writer's wait */
          for (guint j = 0; main_holder (hold) == NULL && j < hold->holders->len; j++)
            {
              const FamilyHolder *h = g_ptr_array_index (hold->holders, j);
              g_autofree char *who = escape_for_display (h->owner);
              g_autofree char *ttl = format_ttl (h);

              if (h->role == FAMILY_ROLE_PERMIT)
                printf ("  permit %u %s (%s)\n", h->permit, who, ttl);
              else
                printf ("  %s %s (%s)\n", family_role_name (h->role), who, ttl);
            }
          if (hold->writer_waiting != NULL)
            {
              g_autofree char *who = escape_for_display (hold->writer_waiting);

              printf ("  writer waiting %s\n", who);
            }
          for (guint j = 0; j < info->waiters->len; j++)
            {
              const RedisLockWaiterInfo *w = g_ptr_array_index (info->waiters, j);
              g_autofree char *host = escape_for_display (w->host);
              g_autofree char *since = format_since (w->since_us);

              printf ("  waiter %s:%" G_GINT64_FORMAT " since %s (%.1fs)\n", host, w->pid, since,
                      (double) (g_get_real_time () - w->since_us) / G_USEC_PER_SEC);
            }
          for (guint j = 0; j < info->queue->len; j++)
            {
              const RedisLockQueueInfo *q = g_ptr_array_index (info->queue, j);
              g_autofree char *host = escape_for_display (q->host);
              g_autofree char *since = format_since (q->since_us);

              /* since: the Redis server's clock, which may differ from ours */
              printf ("  in line: %u. %s:%" G_GINT64_FORMAT " (since %s, %.1fs)\n", q->position,
                      host, q->pid, since,
                      (double) (g_get_real_time () - q->since_us) / G_USEC_PER_SEC);
            }
        }
    }
}

static gboolean opt_json, opt_leader;

static const char status_usage[] = "status [OPTION…] NAME…";
static const char list_usage[] = "list [OPTION…]";

static const GOptionEntry json_entries[] = {
  { "json", 'j', 0, G_OPTION_ARG_NONE, &opt_json, "Print a JSON array for scripts", NULL },
  { NULL },
};

static const GOptionEntry status_entries[] = {
  { "json", 'j', 0, G_OPTION_ARG_NONE, &opt_json, "Print a JSON array for scripts", NULL },
  { "leader", 0, 0, G_OPTION_ARG_NONE, &opt_leader,
    "Each NAME is a leader election: show its holder as the leader", NULL },
  { NULL },
};

/* The holds of @names, in that order, from the plain leases and the family's holds of
 * @family (FamilyHold, borrowed: @family must outlive the result); NULL after a message when one cannot be read.
 * A name shows as a lock when it is held as one or nothing else of that name is
 * found, and as each read-write lock or semaphore found. *@all_held: whether every
 * name has a line that is held. */
static GPtrArray *
read_named_locks (RedisLockRegistry *registry, GPtrArray *names, GPtrArray *family,
                  gboolean *all_held)
{
  g_autoptr (GPtrArray) locks = g_ptr_array_new_with_free_func (lock_info_free);
  guint j;

  *all_held = TRUE;
  for (j = 0; j < names->len; j++)
    {
      g_autoptr (GError) error = NULL;
      const char *name = g_ptr_array_index (names, j);
      RedisLockLeaseInfo *lease = redis_lock_registry_get_lease_info (registry, name, &error);
      LockInfo *info;
      gboolean held = lease != NULL, others = FALSE;

      if (lease == NULL && error != NULL)
        {
          die_message ("%s", error->message);
          return NULL;
        }
      for (guint k = 0; k < family->len; k++)
        {
          FamilyHold *hold = g_ptr_array_index (family, k);

          if (hold->kind != FAMILY_KIND_LOCK && strcmp (hold->name, name) == 0)
            others = TRUE;
        }
      info = NULL;
      if (held || !others)
        {
          info = plain_lock_info_new (name, lease, opt_leader);
          g_ptr_array_add (locks, info);
        }
      redis_lock_lease_info_free (lease);
      for (guint k = 0; k < family->len; k++)
        {
          FamilyHold *hold = g_ptr_array_index (family, k);

          if (hold->kind != FAMILY_KIND_LOCK && strcmp (hold->name, name) == 0)
            {
              held = held || hold->holders->len > 0;
              g_ptr_array_add (locks, lock_info_new (hold, FALSE));
            }
        }
      *all_held = *all_held && held;
      if (info == NULL)
        continue;
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

/* The holds of the lock family in the registry's listing: read-write locks and
 * semaphores (FamilyHold); NULL after a message. */
static GPtrArray *
read_family (RedisLockRegistry *registry)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) leases = redis_lock_registry_list_leases (registry, &error);

  if (leases == NULL)
    {
      die_message ("%s", error->message);
      return NULL;
    }
  return family_group (leases);
}

int
cmd_status (int argc, char **argv)
{
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) waiters = NULL;
  g_autoptr (GPtrArray) locks = NULL;
  g_autoptr (GPtrArray) family = NULL;
  g_autoptr (GPtrArray) names = g_ptr_array_new ();
  g_autofree char **opt_argv = NULL;
  int rc, i, opt_argc;
  gboolean all_held;
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
                      "threads waiting for it (host:pid, since when) and the processes in its\n"
                      "wait queue (position, host:pid, since when). A read-write lock or a\n"
                      "semaphore of that NAME shows as one: its readers or writer, its permits\n"
                      "used of its size.\n"
                      "Exit status: 0 when every NAME is held, 1 when one is free, 2 on a Redis\n"
                      "error, 64 on a usage error.",
                      status_entries, TRUE, FALSE, &opt_argc, &opt_argv);
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
  family = read_family (registry);
  if (family == NULL)
    return EXIT_REDIS;
  locks = read_named_locks (registry, names, family, &all_held);
  if (locks == NULL)
    return EXIT_REDIS;
  waiters = redis_lock_registry_list_waiters (registry, &error);
  if (waiters == NULL)
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  attach_waiters (locks, waiters);
  if (!attach_queues (registry, locks, &error))
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  print_locks (locks, opt_json, TRUE);
  return all_held ? 0 : 1;
}

int
cmd_list (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (GPtrArray) family = NULL;
  g_autoptr (GPtrArray) waiters = NULL;
  g_autoptr (GPtrArray) locks = g_ptr_array_new_with_free_func (lock_info_free);
  int rc;
  guint j;

  rc = parse_options ("list", list_usage, "",
                      "Lists the locks held in a registry (keys KEY:*, found with SCAN): plain\n"
                      "locks, read-write locks (readers or a writer) and semaphores (permits\n"
                      "used of the size).",
                      json_entries, TRUE, FALSE, &argc, &argv);
  if (rc >= 0)
    return rc;
  if (argc > 1)
    return usage_error ("list", list_usage, "unexpected argument '%s'", argv[1]);
  registry = open_registry (&rc);
  if (registry == NULL)
    return rc;
  family = read_family (registry);
  if (family == NULL)
    return EXIT_REDIS;
  /* By name; a semaphore's size or a writer's mark alone holds nothing. */
  for (j = 0; j < family->len; j++)
    {
      FamilyHold *hold = g_ptr_array_index (family, j);

      if (hold->holders->len > 0)
        g_ptr_array_add (locks, lock_info_new (hold, FALSE));
    }
  waiters = redis_lock_registry_list_waiters (registry, &error);
  if (waiters == NULL)
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  attach_waiters (locks, waiters);
  if (!attach_queues (registry, locks, &error))
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  print_locks (locks, opt_json, FALSE);
  return 0;
}
