/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* waits.c: who waits for whom: the waits-for records and the deadlock check.
 *
 * A thread that has waited for a lock for RL_WAITS_FIRST_CHECK_MS (in the store, or for
 * the local mutex that another thread of its process holds) writes a record to the
 * store: its wait's id, the key it waits for, where it runs (host, pid), when its wait
 * began, and the keys and values of the leases it holds itself, in every registry of
 * the process on the same registry key. The record is renewed at every check and
 * deleted when the wait ends; it expires on its own (RL_WAITS_RECORD_TTL_MS) when its
 * process died. A lease value is unique to one acquisition, so the records alone make
 * the waits-for graph of the deployment: a waiter W has an edge to every record that
 * claims to hold the key W waits for. A read-write lock's waiter waits for every lease
 * of the lock (its record names the prefix of their keys): a writer for each reader
 * and the writer, a reader for the writer; and the read-write lock's holds (which a
 * reader lease shared by several threads does not tell apart) are kept here, per
 * owner, for the records (rl_waits_hold()).
 *
 * A cycle in that graph is only a suspicion: records are written at different times,
 * and a claim to hold a key may be stale (the lease expired and another acquisition
 * took it). So a waiter looks only for a cycle in which its own wait began last
 * (comparing start times, then ids: every waiter orders them alike), which makes it
 * the one waiter of that cycle that gives way, and then confirms it: each key of the
 * cycle must still hold the value its record claims (read from the store), and every
 * record of the cycle must still be there when the records are read again afterwards.
 * A thread cannot release a lease while it waits, so a record whose key values and
 * presence were confirmed after the first reading describes a wait that spanned both
 * readings with those holds; every edge of the cycle held at the moment between them.
 * A record also describes one instant of one thread (its holds and its wait,
 * together), so waits that only ever go up one order of keys can never make a cycle,
 * however stale their records are.
 *
 * The check costs one request per RL_WAITS_CHECK_MS of a wait that is already long;
 * a confirmation, which only the last waiter of a cycle makes, a few more.
 */
#include "config.h"

#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "internal.h"
#include "rwlock.h"
#include "waits.h"

/* The registries of the process, for the holds a record lists. list_mutex guards it;
 * it is taken before any lease table's mutex. */
static RlMutex list_mutex = { PTHREAD_MUTEX_INITIALIZER };
static GList *registries;

/* The read-write locks' holds: owner -> set of the lease carriers it holds (a reader
 * lease is shared by the reading threads of a registry, so the carrier alone does not
 * say who holds it). holds_mutex guards it and is taken with no other mutex inside. */
static RlMutex holds_mutex = { PTHREAD_MUTEX_INITIALIZER };
static GHashTable *rw_holds;

static void
list_fork_prepare (void)
{
  rl_mutex_lock (&list_mutex);
  rl_mutex_lock (&holds_mutex);
}

static void
list_fork_release (void)
{
  rl_mutex_unlock (&holds_mutex);
  rl_mutex_unlock (&list_mutex);
}

void
rl_waits_register (RedisLockRegistry *registry)
{
  static gsize once = 0;

  if (g_once_init_enter (&once))
    {
      pthread_atfork (list_fork_prepare, list_fork_release, list_fork_release);
      g_once_init_leave (&once, 1);
    }
  rl_mutex_lock (&list_mutex);
  registries = g_list_prepend (registries, registry);
  rl_mutex_unlock (&list_mutex);
}

void
rl_waits_unregister (RedisLockRegistry *registry)
{
  rl_mutex_lock (&list_mutex);
  registries = g_list_remove (registries, registry);
  rl_mutex_unlock (&list_mutex);
}

void
rl_waits_hold (RedisLock *carrier, gpointer owner, gboolean held)
{
  GHashTable *set;

  rl_mutex_lock (&holds_mutex);
  if (rw_holds == NULL)
    rw_holds = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) g_hash_table_unref);
  set = g_hash_table_lookup (rw_holds, owner);
  if (held)
    {
      if (set == NULL)
        {
          set = g_hash_table_new (NULL, NULL);
          g_hash_table_insert (rw_holds, owner, set);
        }
      g_hash_table_add (set, carrier);
    }
  else if (set != NULL)
    {
      g_hash_table_remove (set, carrier);
      if (g_hash_table_size (set) == 0)
        g_hash_table_remove (rw_holds, owner);
    }
  if (g_hash_table_size (rw_holds) == 0)
    g_clear_pointer (&rw_holds, g_hash_table_unref);
  rl_mutex_unlock (&holds_mutex);
}

void
rl_waits_forget (RedisLock *carrier)
{
  GHashTableIter iter;
  gpointer set;

  rl_mutex_lock (&holds_mutex);
  if (rw_holds != NULL)
    {
      g_hash_table_iter_init (&iter, rw_holds);
      while (g_hash_table_iter_next (&iter, NULL, &set))
        if (g_hash_table_remove (set, carrier) && g_hash_table_size (set) == 0)
          g_hash_table_iter_remove (&iter);
      if (g_hash_table_size (rw_holds) == 0)
        g_clear_pointer (&rw_holds, g_hash_table_unref);
    }
  rl_mutex_unlock (&holds_mutex);
}

/* Whether @owner holds the read-write lock lease @carrier carries. */
static gboolean
rw_held_by (RedisLock *carrier, gpointer owner)
{
  GHashTable *set;
  gboolean held;

  rl_mutex_lock (&holds_mutex);
  set = rw_holds != NULL ? g_hash_table_lookup (rw_holds, owner) : NULL;
  held = set != NULL && g_hash_table_contains (set, carrier);
  rl_mutex_unlock (&holds_mutex);
  return held;
}

/* Records ---------------------------------------------------------------------- */

/* The name of lock @key for a message: the key without "registry_key:". */
static const char *
name_of (const char *key, const char *registry_key)
{
  gsize len = strlen (registry_key);

  if (strncmp (key, registry_key, len) == 0 && key[len] == ':')
    return key + len + 1;
  return key;
}


/* What a record says it waits for, for a message: lock “x”, or read-write lock “y”.
 * (g_free()) */
static char *
wait_name (const RlWaitRecord *record, const char *registry_key)
{
  const char *tail = name_of (record->key, registry_key);
  g_autofree char *key = NULL;
  g_autofree char *rw = NULL;

  if (!record->prefix)
    return g_strdup_printf ("lock “%s”", tail);
  /* The prefix ends "}:rw:"; rl_store_rw_name_of_key() wants a key after it. */
  key = g_strconcat (tail, "w", NULL);
  rw = rl_store_rw_name_of_key (key);
  return g_strdup_printf ("read-write lock “%s”", rw != NULL ? rw : tail);
}

/* A record is a sequence of fields, each its length in decimal, ":", and its bytes
 * (a lock name may hold any byte): "1" (the format), id, key, host, pid, since (wall
 * clock µs), then a key and a value per lease held. A wait for a read-write lock, for
 * every lease whose key begins with its prefix, is format "2": the same with the field
 * "*" after the key (a reader of format 1 only skips such records). */
#define RECORD_FORMAT "1"
#define RECORD_FORMAT_PREFIX "2"
#define RECORD_FIXED 6

static void
append_field (GString *out, const char *field)
{
  g_string_append_printf (out, "%zu:", strlen (field));
  g_string_append (out, field);
}

void
rl_wait_record_free (RlWaitRecord *record)
{
  if (record == NULL)
    return;
  g_free (record->id);
  g_free (record->key);
  g_free (record->host);
  g_ptr_array_unref (record->held_keys);
  g_ptr_array_unref (record->held_values);
  g_free (record);
}

/* The record @text, or NULL when it is not one (another format: left alone). */
static RlWaitRecord *
record_parse (const char *text)
{
  g_autoptr (GPtrArray) fields = g_ptr_array_new_with_free_func (g_free);
  const char *p = text;
  RlWaitRecord *record;
  gboolean prefix = FALSE;

  while (*p != '\0')
    {
      char *end;
      guint64 len = g_ascii_strtoull (p, &end, 10);

      if (end == p || *end != ':' || len > strlen (end + 1))
        return NULL;
      g_ptr_array_add (fields, g_strndup (end + 1, len));
      p = end + 1 + len;
    }
  if (fields->len > 3 && strcmp (g_ptr_array_index (fields, 0), RECORD_FORMAT_PREFIX) == 0
      && strcmp (g_ptr_array_index (fields, 3), "*") == 0)
    {
      /* The prefix wait's marker goes: the rest reads as format 1. */
      g_ptr_array_remove_index (fields, 3);
      prefix = TRUE;
    }
  else if (fields->len > 0 && strcmp (g_ptr_array_index (fields, 0), RECORD_FORMAT) != 0)
    return NULL;
  if (fields->len < RECORD_FIXED || (fields->len - RECORD_FIXED) % 2 != 0)
    return NULL;
  record = g_new0 (RlWaitRecord, 1);
  record->id = g_strdup (g_ptr_array_index (fields, 1));
  record->key = g_strdup (g_ptr_array_index (fields, 2));
  record->prefix = prefix;
  record->host = g_strdup (g_ptr_array_index (fields, 3));
  record->pid = g_ascii_strtoll (g_ptr_array_index (fields, 4), NULL, 10);
  record->since_us = g_ascii_strtoll (g_ptr_array_index (fields, 5), NULL, 10);
  record->held_keys = g_ptr_array_new_with_free_func (g_free);
  record->held_values = g_ptr_array_new_with_free_func (g_free);
  for (guint i = RECORD_FIXED; i < fields->len; i += 2)
    {
      g_ptr_array_add (record->held_keys, g_strdup (g_ptr_array_index (fields, i)));
      g_ptr_array_add (record->held_values, g_strdup (g_ptr_array_index (fields, i + 1)));
    }
  return record;
}

/* Parses @texts into a new array of RlWaitRecord, skipping what is not a record. */
static GPtrArray *
records_parse (GPtrArray *texts)
{
  GPtrArray *records = g_ptr_array_new_with_free_func ((GDestroyNotify) rl_wait_record_free);

  for (guint i = 0; i < texts->len; i++)
    {
      RlWaitRecord *record = record_parse (g_ptr_array_index (texts, i));

      if (record != NULL)
        g_ptr_array_add (records, record);
    }
  return records;
}

GPtrArray *
rl_waits_read (RlStore *store, gint64 deadline, GError **error)
{
  g_autoptr (GPtrArray) texts = g_ptr_array_new_with_free_func (g_free);

  if (store->vt->waits_update != NULL
      && !store->vt->waits_update (store, NULL, NULL, 0, texts, deadline, error))
    return NULL;
  return records_parse (texts);
}

static gint
compare_since (gconstpointer a, gconstpointer b)
{
  const RedisLockWaiterInfo *x = *(RedisLockWaiterInfo *const *) a;
  const RedisLockWaiterInfo *y = *(RedisLockWaiterInfo *const *) b;

  return x->since_us < y->since_us ? -1 : x->since_us > y->since_us;
}

GPtrArray *
redis_lock_registry_list_waiters (RedisLockRegistry *registry, GError **error)
{
  g_autoptr (GPtrArray) records = NULL;
  GPtrArray *waiters;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  if (!rl_registry_check (registry, error))
    return NULL;
  records = rl_waits_read (registry->store, 0, error);
  if (records == NULL)
    return NULL;
  waiters = g_ptr_array_new_with_free_func ((GDestroyNotify) redis_lock_waiter_info_free);
  for (guint i = 0; i < records->len; i++)
    {
      RlWaitRecord *record = g_ptr_array_index (records, i);
      RedisLockWaiterInfo *info = g_new0 (RedisLockWaiterInfo, 1);

      if (record->prefix)
        {
          /* A read-write lock's: its name, as its keys carry it. */
          g_autofree char *key = g_strconcat (name_of (record->key, registry->registry_key),
                                              "w", NULL);
          info->name = rl_store_rw_name_of_key (key);
        }
      if (info->name == NULL)
        info->name = g_strdup (name_of (record->key, registry->registry_key));
      info->waiter = g_strdup (record->id);
      info->host = g_strdup (record->host);
      info->pid = record->pid;
      info->since_us = record->since_us;
      g_ptr_array_add (waiters, info);
    }
  g_ptr_array_sort (waiters, compare_since);
  return waiters;
}

/* The holds of the calling thread --------------------------------------------- */

typedef struct
{
  gpointer self;
  GString *out;
} HeldScan;

static void
add_held (RedisLock *lock, const char *value, gpointer user_data)
{
  HeldScan *scan = user_data;

  if (lock->member == RL_MEMBER_RW_LEASE ? !rw_held_by (lock, scan->self)
                                          : g_atomic_pointer_get (&lock->owner) != scan->self)
    return;
  append_field (scan->out, lock->key_data);
  append_field (scan->out, value);
}

/* Appends the key and value of every lease the calling thread holds in a registry of
 * the process on @registry_key. */
static void
append_held (GString *out, const char *registry_key)
{
  HeldScan scan = { g_thread_self (), out };

  rl_mutex_lock (&list_mutex);
  for (GList *l = registries; l != NULL; l = l->next)
    {
      RedisLockRegistry *registry = l->data;

      if (strcmp (registry->registry_key, registry_key) == 0 && !rl_registry_is_forked (registry)
          && registry->leases != NULL)
        rl_leases_foreach_held (registry->leases, add_held, &scan);
    }
  rl_mutex_unlock (&list_mutex);
}

static char *
record_build (const RlWaiting *waiting)
{
  RedisLockRegistry *registry = waiting->lock->registry;
  GString *out = g_string_new (NULL);
  char number[24];

  append_field (out, waiting->prefix ? RECORD_FORMAT_PREFIX : RECORD_FORMAT);
  append_field (out, waiting->id);
  append_field (out, waiting->key);
  if (waiting->prefix)
    append_field (out, "*");
  append_field (out, g_get_host_name ());
  g_snprintf (number, sizeof number, "%ld", (long) getpid ());
  append_field (out, number);
  g_snprintf (number, sizeof number, "%" G_GINT64_FORMAT, waiting->since_us);
  append_field (out, number);
  append_held (out, registry->registry_key);
  return g_string_free (out, FALSE);
}

/* The cycle ---------------------------------------------------------------------- */

/* Whether @a's wait began before @b's: start times, then ids, so every waiter orders
 * the records alike. */
static gboolean
began_before (const RlWaitRecord *a, const RlWaitRecord *b)
{
  if (a->since_us != b->since_us)
    return a->since_us < b->since_us;
  return strcmp (a->id, b->id) < 0;
}

/* The index in @holder's holds of the key @waiter waits for (with a prefix, the first
 * that begins with it), or -1. */
static gint
held_index (const RlWaitRecord *holder, const RlWaitRecord *waiter)
{
  gsize len = strlen (waiter->key);

  for (guint i = 0; i < holder->held_keys->len; i++)
    {
      const char *key = g_ptr_array_index (holder->held_keys, i);

      if (waiter->prefix ? strncmp (key, waiter->key, len) == 0 : strcmp (key, waiter->key) == 0)
        return (gint) i;
    }
  return -1;
}

/* A cycle of two waits or more through @records[@self] in which every other wait began
 * before its own: in
 * *cycle (indexes, starting with @self, each waiting for a key the next one holds,
 * the last for one @self holds). A depth-first search over the records that began
 * earlier. */
static gboolean
find_cycle (GPtrArray *records, guint self, GArray *cycle)
{
  guint n = records->len;
  g_autofree gint *parent = g_new (gint, n);
  g_autofree guint *stack = g_new (guint, n);
  const RlWaitRecord *me = g_ptr_array_index (records, self);
  guint depth = 0;

  for (guint i = 0; i < n; i++)
    parent[i] = -1;
  parent[self] = (gint) self;
  stack[depth++] = self;
  while (depth > 0)
    {
      guint at = stack[--depth];
      const RlWaitRecord *waiter = g_ptr_array_index (records, at);

      for (guint j = 0; j < n; j++)
        {
          const RlWaitRecord *holder = g_ptr_array_index (records, j);

          if (held_index (holder, waiter) < 0)
            continue;
          if (j == self && at == self)
            /* A thread waiting for a lock it holds itself through another registry:
             * two registries are two owners, and its wait ends with its deadline, as
             * it would for any other owner. Not a cycle of waits. */
            continue;
          if (j == self)
            {
              /* Back at the start: unwind. */
              for (guint k = at; k != self; k = (guint) parent[k])
                g_array_prepend_val (cycle, k);
              g_array_prepend_val (cycle, self);
              return TRUE;
            }
          if (parent[j] >= 0 || !began_before (holder, me))
            continue;
          parent[j] = (gint) at;
          stack[depth++] = j;
        }
    }
  return FALSE;
}

/* The key @waiter waits for that @holder holds, and its value, as @holder's record
 * claims them. */
static const char *
claimed_key (const RlWaitRecord *waiter, const RlWaitRecord *holder)
{
  return g_ptr_array_index (holder->held_keys, held_index (holder, waiter));
}

static const char *
claimed_value (const RlWaitRecord *waiter, const RlWaitRecord *holder)
{
  return g_ptr_array_index (holder->held_values, held_index (holder, waiter));
}

/* Whether the cycle still holds: each key holds the value its holder's record claims,
 * and then every record of the cycle is still there (read again by @deadline). A store
 * error: not confirmed. */
static gboolean
confirm_cycle (RlStore *store, GPtrArray *records, GArray *cycle, gint64 deadline)
{
  g_autoptr (GPtrArray) again = NULL;

  for (guint i = 0; i < cycle->len; i++)
    {
      const RlWaitRecord *waiter = g_ptr_array_index (records, g_array_index (cycle, guint, i));
      const RlWaitRecord *holder
          = g_ptr_array_index (records, g_array_index (cycle, guint, (i + 1) % cycle->len));
      g_autofree char *value = NULL;
      gint64 pttl_ms;

      if (!store->vt->inspect (store, claimed_key (waiter, holder), &value, &pttl_ms, NULL)
          || value == NULL || strcmp (value, claimed_value (waiter, holder)) != 0)
        return FALSE;
    }
  again = rl_waits_read (store, deadline, NULL);
  if (again == NULL)
    return FALSE;
  for (guint i = 0; i < cycle->len; i++)
    {
      const RlWaitRecord *member = g_ptr_array_index (records, g_array_index (cycle, guint, i));
      gboolean found = FALSE;

      for (guint j = 0; j < again->len && !found; j++)
        {
          const RlWaitRecord *now = g_ptr_array_index (again, j);
          found = strcmp (now->id, member->id) == 0 && strcmp (now->key, member->key) == 0;
        }
      if (!found)
        return FALSE;
    }
  return TRUE;
}

static void
set_deadlock_error (GError **error, GPtrArray *records, GArray *cycle, const char *registry_key)
{
  const RlWaitRecord *me = g_ptr_array_index (records, g_array_index (cycle, guint, 0));
  GString *text = g_string_new (NULL);
  g_autofree char *what = wait_name (me, registry_key);

  g_string_append_printf (text,
                          "Deadlock: waiting for %s closes a cycle of %u waits, and this "
                          "wait began last: ",
                          what, cycle->len);
  for (guint i = 0; i < cycle->len; i++)
    {
      const RlWaitRecord *waiter = g_ptr_array_index (records, g_array_index (cycle, guint, i));
      const RlWaitRecord *holder
          = g_ptr_array_index (records, g_array_index (cycle, guint, (i + 1) % cycle->len));
      g_autofree char *waited = wait_name (waiter, registry_key);

      if (i == 0)
        g_string_append_printf (text, "this thread (%s:%" G_GINT64_FORMAT ")", me->host, me->pid);
      g_string_append_printf (text, " waits for %s, held by ", waited);
      if (holder == me)
        g_string_append (text, "this thread");
      else
        g_string_append_printf (text, "%s:%" G_GINT64_FORMAT " (lease %s), which",
                                holder->host, holder->pid, claimed_value (waiter, holder));
    }
  g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_DEADLOCK, text->str);
  g_string_free (text, TRUE);
}

/* The wait ---------------------------------------------------------------------- */

void
rl_waiting_begin (RlWaiting *waiting, RedisLock *lock, gint64 deadline, gboolean bounded)
{
  RedisLockRegistry *registry = lock->registry;

  waiting->lock = lock;
  waiting->key = lock->key_data;
  waiting->prefix = FALSE;
  waiting->deadline = deadline;
  waiting->bounded = bounded;
  waiting->started = g_get_monotonic_time ();
  waiting->recorded = FALSE;
  waiting->since_us = 0;
  waiting->id[0] = '\0';
  if (g_atomic_int_get (&registry->settings.deadlock_detection)
      && registry->store->vt->waits_update != NULL)
    waiting->check_at = waiting->started + RL_WAITS_FIRST_CHECK_MS * 1000;
  else
    waiting->check_at = RL_FOREVER;
}

void
rl_waiting_begin_prefix (RlWaiting *waiting, RedisLock *carrier, const char *prefix,
                         gint64 deadline, gboolean bounded)
{
  rl_waiting_begin (waiting, carrier, deadline, bounded);
  waiting->key = prefix;
  waiting->prefix = TRUE;
}

gboolean
rl_waiting_check (RlWaiting *waiting, GError **error)
{
  RedisLockRegistry *registry = waiting->lock->registry;
  RlStore *store = registry->store;
  g_autoptr (GPtrArray) texts = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) records = NULL;
  g_autoptr (GArray) cycle = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autoptr (GError) local_error = NULL;
  g_autofree char *record = NULL;
  gint64 now = g_get_monotonic_time ();
  /* The check's requests end with the acquisition's wait, as its attempts do. */
  gint64 until = rl_request_deadline (registry, waiting->deadline, waiting->bounded, now);
  guint self;

  waiting->check_at = now + RL_WAITS_CHECK_MS * 1000;
  if (until <= now)
    return TRUE;
  if (waiting->id[0] == '\0')
    {
      rl_leases_value (registry->leases, rl_leases_next_serial (registry->leases), waiting->id);
      waiting->since_us = g_get_real_time () - (now - waiting->started);
    }
  record = record_build (waiting);
  waiting->recorded = TRUE;
  if (!store->vt->waits_update (store, waiting->id, record, RL_WAITS_RECORD_TTL_MS, texts, until,
                                &local_error))
    {
      rl_debug ("waits-for record of %s: %s", waiting->key, local_error->message);
      return TRUE;
    }
  records = records_parse (texts);
  for (self = 0; self < records->len; self++)
    if (strcmp (((RlWaitRecord *) g_ptr_array_index (records, self))->id, waiting->id) == 0)
      break;
  if (self == records->len || !find_cycle (records, self, cycle))
    return TRUE;
  rl_debug ("waits-for %s: a cycle of %u waits, confirming", waiting->key, cycle->len);
  if (!confirm_cycle (store, records, cycle, until))
    return TRUE;
  set_deadlock_error (error, records, cycle, registry->registry_key);
  return FALSE;
}

void
rl_waiting_retarget (RlWaiting *waiting, RedisLock *lock)
{
  if (lock->registry != waiting->lock->registry)
    {
      rl_waiting_end (waiting);
      waiting->id[0] = '\0';
    }
  waiting->lock = lock;
  waiting->key = lock->key_data;
}

void
rl_waiting_end (RlWaiting *waiting)
{
  RlStore *store;
  g_autoptr (GError) error = NULL;
  gint64 until;

  if (!waiting->recorded)
    return;
  waiting->recorded = FALSE;
  store = waiting->lock->registry->store;
  /* A record the store did not delete in time expires. */
  until = rl_cleanup_deadline (waiting->lock->registry, waiting->deadline, waiting->bounded);
  if (!store->vt->waits_update (store, waiting->id, NULL, 0, NULL, until, &error))
    rl_debug ("deleting the waits-for record of %s: %s (it expires)", waiting->key,
             error->message);
}
