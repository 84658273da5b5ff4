/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stress-worker.c: the worker processes of the stress test, which take the locks.
 *
 * A worker is this program run again with --worker (see stress.c): it opens its
 * registries, runs R x T threads, each looping obtain, lock, critical section, unlock
 * until the controller closes the worker's stdin or the deadline passes, then prints a
 * report on stdout and exits. The critical section checks the holder and counter keys
 * on the thread's own raw connection (the checks described in stress.c). A worker only
 * counts and records what it saw, in a Tally per thread merged at the end; it judges
 * nothing, because whether an overlap or an error is allowed depends on the faults the
 * controller injected, and only the controller knows those (stress-check.c). Its only
 * other channels are its stdin ('s': freeze inside the next section) and its slot in the
 * shared progress file, which the controller polls.
 *
 * In history mode (--history, the scenarios of stress-jepsen.c) a worker opens any
 * topology, has no raw connection and checks nothing inside a section: it keeps every
 * section's interval on the monotonic clock, its fencing token, whether and when its
 * holder was told the lease was lost, and writes them to its history file at the end.
 * Its threads hold the scenario's member of the lock family: the lock here, the others
 * in stress-family.c's loops.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "stress.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* Records (lease losses, overlaps, clobbers) a worker thread keeps; more are counted. */
#define MAX_RECORDS 2000
/* How long the replicas asked for have to acknowledge a write (set_min_replicas). */
#define MIN_REPLICAS_WAIT_MS 500

const char *const code_names[] = {
  "INVALID",    "CONNECTION", "REDIS",  "NOT_OWNER",      "LEASE_LOST",
  "CACHE_FULL", "FORKED",     "CLOSED", "NOT_REPLICATED",
};
const gsize n_code_names = G_N_ELEMENTS (code_names);

/* ------------------------------------------------------------------------------------- */
/* Tallies: what a worker thread saw, merged per process and reported to the controller. */

void
tally_init (Tally *t)
{
  t->counts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  t->records = g_ptr_array_new_with_free_func (g_free);
  t->dropped = 0;
  t->max_acquire_ms = t->max_unlock_ms = 0;
  t->max_failed_acquire_ms = t->max_failed_unlock_ms = 0;
}

void
tally_clear (Tally *t)
{
  g_clear_pointer (&t->counts, g_hash_table_unref);
  g_clear_pointer (&t->records, g_ptr_array_unref);
}

void
tally_add (Tally *t, const char *key, guint64 n)
{
  guint64 *value = g_hash_table_lookup (t->counts, key);

  if (value == NULL)
    {
      value = g_new0 (guint64, 1);
      g_hash_table_insert (t->counts, g_strdup (key), value);
    }
  *value += n;
}

guint64
tally_get (Tally *t, const char *key)
{
  guint64 *value = g_hash_table_lookup (t->counts, key);

  return value != NULL ? *value : 0;
}

void
tally_record (Tally *t, const char *format, ...)
{
  va_list ap;

  if (t->records->len >= MAX_RECORDS)
    {
      t->dropped++;
      return;
    }
  va_start (ap, format);
  g_ptr_array_add (t->records, g_strdup_vprintf (format, ap));
  va_end (ap);
}

static void
tally_merge (Tally *into, Tally *from)
{
  GHashTableIter iter;
  gpointer key, value;

  g_hash_table_iter_init (&iter, from->counts);
  while (g_hash_table_iter_next (&iter, &key, &value))
    tally_add (into, key, *(guint64 *)value);
  for (guint i = 0; i < from->records->len; i++)
    {
      if (into->records->len >= MAX_RECORDS * 4)
        into->dropped++;
      else
        g_ptr_array_add (into->records, g_strdup (g_ptr_array_index (from->records, i)));
    }
  into->dropped += from->dropped;
  into->max_acquire_ms = MAX (into->max_acquire_ms, from->max_acquire_ms);
  into->max_unlock_ms = MAX (into->max_unlock_ms, from->max_unlock_ms);
  into->max_failed_acquire_ms = MAX (into->max_failed_acquire_ms, from->max_failed_acquire_ms);
  into->max_failed_unlock_ms = MAX (into->max_failed_unlock_ms, from->max_failed_unlock_ms);
}

const char *
error_code_name (const GError *error)
{
  if (error->domain == REDIS_LOCK_ERROR && error->code >= 0
      && error->code < (gint)G_N_ELEMENTS (code_names))
    return code_names[error->code];
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return "CANCELLED";
  return "OTHER";
}

/* ------------------------------------------------------------------------------------- */
/* Worker processes. */

typedef enum
{
  SECTION_DONE,
  SECTION_INTERRUPTED, /* the raw connection failed inside the section */
} SectionResult;

typedef enum
{
  MODE_TRY_FOR,
  MODE_TRY_FULL,
  MODE_TRY,
  MODE_LOCK,
} AcquireMode;

/* Stops the whole process: SIGSTOP to the calling thread, which stops before raise()
 * returns (kill (getpid ()) could be taken by another thread and let this one run on
 * for a while). The stop is recorded, so that the bounds on the calls of the other
 * threads leave out the time nobody in the process ran (worker_frozen_us()). */
void
worker_freeze (Worker *w)
{
  Freeze f = { g_get_monotonic_time (), 0 };
  guint i;

  test_sync_lock (&w->freeze_sync);
  i = w->freezes->len;
  g_array_append_val (w->freezes, f);
  test_sync_unlock (&w->freeze_sync);
  raise (SIGSTOP);
  test_sync_lock (&w->freeze_sync);
  g_array_index (w->freezes, Freeze, i).until = g_get_monotonic_time ();
  test_sync_broadcast (&w->freeze_sync);
  test_sync_unlock (&w->freeze_sync);
}

/* How much of [@start, @end] (monotonic µs) the process stood stopped. A call that
 * ended after a stop began waits until thread 0 has recorded the stop's end: all
 * threads run again together when the process is continued, thread 0 maybe last. */
static gint64
worker_frozen_us (Worker *w, gint64 start, gint64 end)
{
  gint64 frozen = 0;

  test_sync_lock (&w->freeze_sync);
  for (guint i = 0; i < w->freezes->len; i++)
    {
      gint64 from = g_array_index (w->freezes, Freeze, i).from, until;

      if (from >= end)
        continue;
      while ((until = g_array_index (w->freezes, Freeze, i).until) == 0)
        test_sync_wait (&w->freeze_sync);
      if (until > start)
        frozen += MIN (until, end) - MAX (from, start);
    }
  test_sync_unlock (&w->freeze_sync);
  return frozen;
}

/* The ms a call from @start to @end took, without the time its process stood stopped. */
static gint64
call_ms (Worker *w, gint64 start, gint64 end)
{
  return (end - start - worker_frozen_us (w, start, end)) / 1000;
}

static void
raw_drop (WorkerThread *t)
{
  g_clear_pointer (&t->raw, redisFree);
  g_clear_pointer (&t->run_id, g_free);
}

/* The run_id of the server behind @c: tells one run of redis-server from the next. */
static char *
raw_run_id (redisContext *c)
{
  redisReply *reply = redisCommand (c, "INFO server");
  char *id = NULL;

  if (reply == NULL)
    return NULL;
  if (reply->type == REDIS_REPLY_STRING)
    {
      const char *p = strstr (reply->str, "run_id:");
      if (p != NULL)
        id = g_strndup (p + strlen ("run_id:"), strcspn (p + strlen ("run_id:"), "\r\n"));
    }
  freeReplyObject (reply);
  return id;
}

/* Opens the thread's raw connection, named so the CLIENT KILL fault spares it. Only
 * ever called between sections. */
static gboolean
raw_connect (WorkerThread *t)
{
  struct timeval tv = { RAW_TIMEOUT_S, 0 };
  redisContext *c = redisConnectUnixWithTimeout (t->w->opt->socket_path, tv);
  redisReply *reply;
  gboolean named;

  if (c == NULL || c->err != 0)
    {
      if (c != NULL)
        redisFree (c);
      return FALSE;
    }
  redisSetTimeout (c, tv);
  reply = redisCommand (c, "CLIENT SETNAME stress-check-p%d-r%u-t%u", t->w->opt->index, t->reg,
                        t->index);
  named = reply != NULL && reply->type == REDIS_REPLY_STATUS;
  if (reply != NULL)
    freeReplyObject (reply);
  t->raw = c;
  t->run_id = named ? raw_run_id (c) : NULL;
  if (t->run_id == NULL)
    {
      raw_drop (t);
      return FALSE;
    }
  return TRUE;
}

/* Counter values are "n id": the count and the section that wrote it. */
guint64
parse_counter (const redisReply *reply, const char **writer)
{
  const char *space;

  *writer = "none";
  if (reply == NULL || reply->type != REDIS_REPLY_STRING)
    return 0;
  space = strchr (reply->str, ' ');
  if (space != NULL)
    *writer = space + 1;
  return g_ascii_strtoull (reply->str, NULL, 10);
}

static const char cas_delete_script[] = "local v = redis.call('GET', KEYS[1])\n"
                                        "if v == ARGV[1] then\n"
                                        "  redis.call('DEL', KEYS[1])\n"
                                        "  return 1\n"
                                        "end\n"
                                        "return v\n";

/* The critical section, on the thread's raw connection. */
static SectionResult
critical_section (WorkerThread *t, const char *name, const char *id, gboolean freeze)
{
  Tally *tally = &t->tally;
  g_autofree char *holder_key = g_strdup_printf (DATA_PREFIX ":holder:%s", name);
  g_autofree char *counter_key = g_strdup_printf (DATA_PREFIX ":counter:%s", name);
  g_autofree char *write_key = g_strdup_printf ("writes %s %s", t->run_id, name);
  g_autofree char *value = NULL;
  redisReply *reply;
  const char *writer;
  guint64 read_n, prev_n;

  reply = redisCommand (t->raw, "MGET %s %s", holder_key, counter_key);
  if (reply == NULL)
    goto broken;
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
    {
      tally_record (tally, "failure unexpected MGET reply type %d", reply->type);
      freeReplyObject (reply);
      return SECTION_INTERRUPTED;
    }
  if (reply->element[0]->type == REDIS_REPLY_STRING)
    tally_record (tally, "overlap %s %s", id, reply->element[0]->str);
  read_n = parse_counter (reply->element[1], &writer);
  freeReplyObject (reply);

  reply = redisCommand (t->raw, "SET %s %s", holder_key, id);
  if (reply == NULL)
    goto broken;
  freeReplyObject (reply);

  if (freeze)
    {
      /* Which section froze, for the controller: the holder key may already name a
       * later one by the time it looks (the lease expires while this thread sleeps). */
      reply = redisCommand (t->raw, "SET " DATA_PREFIX ":frozen %s:%s", name, id);
      if (reply == NULL)
        goto broken;
      freeReplyObject (reply);
      worker_freeze (t->w);
    }

  value = g_strdup_printf ("%" G_GUINT64_FORMAT " %s", read_n + 1, id);
  reply = redisCommand (t->raw, "SET %s %s GET", counter_key, value);
  if (reply == NULL)
    {
      g_autofree char *key = g_strdup_printf ("uncertain %s", t->run_id);
      tally_add (tally, key, 1);
      goto broken;
    }
  if (reply->type == REDIS_REPLY_ERROR)
    {
      tally_record (tally, "failure SET GET: %s", reply->str);
      freeReplyObject (reply);
      return SECTION_INTERRUPTED;
    }
  tally_add (tally, write_key, 1);
  prev_n = parse_counter (reply, &writer);
  if (prev_n != read_n)
    tally_record (tally, "clobber %s %s %" G_GINT64_FORMAT " %s %s", id, writer,
                  (gint64)(prev_n - read_n), t->run_id, name);
  freeReplyObject (reply);

  reply = redisCommand (t->raw, "EVAL %s 1 %s %s", cas_delete_script, holder_key, id);
  if (reply == NULL)
    goto broken;
  if (!(reply->type == REDIS_REPLY_INTEGER && reply->integer == 1))
    tally_record (tally, "overlap %s %s", id,
                  reply->type == REDIS_REPLY_STRING ? reply->str : "none");
  freeReplyObject (reply);
  return SECTION_DONE;

broken:
  tally_add (tally, "interrupted", 1);
  raw_drop (t);
  return SECTION_INTERRUPTED;
}

/* Before freezing: lets the other threads of registry 0 block on the frozen lock
 * (asleep in the kernel, waiting for the local mutex), at most 3 s. */
static void
wait_for_siblings (Worker *w)
{
  gint64 deadline = g_get_monotonic_time () + 3 * G_USEC_PER_SEC;

  for (guint i = 1; i < w->n_threads && w->threads[i].reg == 0; i++)
    {
      gint tid;

      while ((tid = g_atomic_int_get (&w->threads[i].waiting_tid)) == 0
             && g_get_monotonic_time () < deadline)
        g_usleep (1000);
      if (tid != 0)
        test_wait_thread_blocked (tid, MAX (1, (deadline - g_get_monotonic_time ()) / 1000));
    }
}

static AcquireMode
pick_mode (WorkerThread *t)
{
  gint32 r = g_rand_int_range (t->rand, 0, 100);

  if (r < 10)
    return MODE_TRY;
  if (r < 25)
    return t->w->opt->use_lock ? MODE_LOCK : MODE_TRY_FOR;
  if (r < 40)
    return MODE_TRY_FULL;
  return MODE_TRY_FOR;
}

void
count_error (Tally *tally, const char *op, const GError *error)
{
  g_autofree char *key = g_strdup_printf ("error %s %s", op, error_code_name (error));

  tally_add (tally, key, 1);
}

/* The name this loop locks, and whether this thread is to freeze in it (@freeze) or to
 * wait behind the thread that does (@sibling): while a freeze is asked for, thread 0 of
 * registry 0 freezes in name-0 and the other threads of that registry wait for name-0
 * behind it, as they would for any holder. */
static char *
pick_name (WorkerThread *t, gboolean *freeze, gboolean *sibling)
{
  Worker *w = t->w;
  char *name = g_strdup_printf ("name-%d", g_rand_int_range (t->rand, 0, w->opt->names));

  *freeze = *sibling = FALSE;
  if (t->reg == 0 && t->index == 0)
    *freeze = g_atomic_int_compare_and_exchange (&w->self_stop, 1, 0);
  else if (t->reg == 0)
    *sibling = g_atomic_int_get (&w->freezing);
  if (*freeze || *sibling)
    {
      g_free (name);
      name = g_strdup ("name-0");
    }
  return name;
}

/* Takes @lock in a random mode (the section to freeze in with the short TTL, a sibling
 * waiting through the freeze), timing the call: the controller checks the bounded ones
 * against their bound, those that failed with CONNECTION too. A call of another
 * registry's thread stands still while thread 0 holds the process stopped: that time
 * is the test's, not the library's, and is left out. */
static gboolean
acquire (WorkerThread *t, RedisLock *lock, gboolean freeze, gboolean sibling)
{
  WorkerOptions *opt = t->w->opt;
  Tally *tally = &t->tally;
  g_autoptr (GError) error = NULL;
  AcquireMode mode = freeze ? MODE_TRY_FULL : sibling ? MODE_TRY_FOR : pick_mode (t);
  gboolean acquired, bounded = TRUE;
  gint64 start, ms;

  if (sibling)
    {
      bounded = FALSE; /* waits through the freeze */
      g_atomic_int_set (&t->waiting_tid, test_thread_id ());
    }
  start = g_get_monotonic_time ();
  t->called_us = start;
  switch (mode)
    {
      case MODE_LOCK:
        bounded = FALSE;
        acquired = redis_lock_lock (lock, &error);
        break;
      case MODE_TRY:
        acquired = redis_lock_try_lock (lock, &error);
        break;
      case MODE_TRY_FULL:
        acquired = redis_lock_try_lock_full (lock, opt->wait_ms,
                                             freeze ? opt->stop_ttl_ms : opt->ttl_ms, NULL, &error);
        break;
      case MODE_TRY_FOR:
      default:
        acquired = redis_lock_try_lock_for (lock, sibling ? opt->stop_ms + 10000 : opt->wait_ms,
                                            NULL, &error);
        break;
    }
  t->acquired_us = g_get_monotonic_time ();
  g_atomic_int_set (&t->waiting_tid, 0);
  ms = call_ms (t->w, start, t->acquired_us);
  if (bounded)
    tally->max_acquire_ms = MAX (tally->max_acquire_ms, ms);
  if (error != NULL)
    {
      count_error (tally, "acquire", error);
      if (bounded && g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION))
        tally->max_failed_acquire_ms = MAX (tally->max_failed_acquire_ms, ms);
      if (redis_lock_is_held_by_current_thread (lock))
        tally_record (tally, "failure a failed acquisition left the lock held");
    }
  else if (!acquired)
    tally_add (tally, mode == MODE_TRY ? "busy" : "timeouts", 1);
  return acquired;
}

/* Whether to freeze in the section just locked: only in a lease that really has the
 * short TTL, since a lease handed over by another thread of this registry keeps the
 * TTL it was taken with. If not, the freeze is asked for again (next loop); if so, the
 * siblings are let block on the lock first. May drop the raw connection. */
static gboolean
confirm_freeze (WorkerThread *t, RedisLock *lock)
{
  Worker *w = t->w;
  redisReply *reply = redisCommand (t->raw, "PTTL %s", redis_lock_get_key (lock));
  gboolean freeze = reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0
                    && reply->integer <= w->opt->stop_ttl_ms;

  if (reply == NULL)
    raw_drop (t);
  else
    freeReplyObject (reply);
  if (!freeze)
    g_atomic_int_set (&w->self_stop, 1);
  else
    wait_for_siblings (w);
  return freeze;
}

/* Re-entry now and then: never fails, never waits, raises the hold count. */
static gboolean
maybe_reenter (WorkerThread *t, RedisLock *lock)
{
  g_autoptr (GError) error = NULL;
  gboolean reentered;

  if (g_rand_int_range (t->rand, 0, 100) >= 20)
    return FALSE;
  reentered = redis_lock_try_lock (lock, &error);
  if (!reentered || error != NULL || redis_lock_get_hold_count (lock) != 2)
    tally_record (&t->tally, "failure re-entry: %s",
                  error != NULL ? error->message : "not held twice");
  tally_add (&t->tally, "reentries", 1);
  return reentered;
}

/* Unlocks (twice after a re-entry), timing the outermost unlock. A lost lease is
 * recorded with the section id @id, and a frozen section's unlock result as "stop".
 * Returns how the outermost unlock ended: "OK" or the error code's name. */
static const char *
release (WorkerThread *t, RedisLock *lock, const char *id, gboolean reentered, gboolean freeze)
{
  Tally *tally = &t->tally;
  g_autoptr (GError) error = NULL;
  gint64 start, ms;
  gboolean ok;

  if (reentered && (!redis_lock_unlock (lock, &error) || error != NULL))
    {
      tally_record (tally, "failure inner unlock: %s", error != NULL ? error->message : "FALSE");
      g_clear_error (&error);
    }
  start = g_get_monotonic_time ();
  ok = redis_lock_unlock (lock, &error);
  ms = call_ms (t->w, start, g_get_monotonic_time ());
  if (!ok)
    {
      count_error (tally, "unlock", error);
      if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST))
        tally_record (tally, "lease-lost %s", id);
      if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION))
        tally->max_failed_unlock_ms = MAX (tally->max_failed_unlock_ms, ms);
    }
  tally->max_unlock_ms = MAX (tally->max_unlock_ms, ms);
  if (freeze)
    tally_record (tally, "stop %s %s", id, error != NULL ? error_code_name (error) : "OK");
  if (redis_lock_is_held_by_current_thread (lock))
    tally_record (tally, "failure the outermost unlock left the lock held");
  return error != NULL ? error_code_name (error) : "OK";
}

/* A section of history mode, from the return of the acquisition: re-entry now and
 * then, a freeze when asked for (the process stops itself; its lease expires while the
 * controller keeps it stopped), a short hold, then whether the holder was told its
 * lease was lost (is_lease_lost, the lease cancellable, or LEASE_LOST from the unlock)
 * and when it was first told (the lease cancellable's handler notes the time it fired).
 * The end of the interval is taken right before the unlock is called. */
static void
history_section (WorkerThread *t, RedisLock *lock, const char *name, const char *id,
                 gboolean freeze)
{
  Worker *w = t->w;
  HistoryEntry e = { 0 };
  GCancellable *cancellable;
  gulong handler = 0;
  gboolean reentered;

  e.call_us = t->called_us;
  e.start_us = t->acquired_us;
  e.name = (guint)g_ascii_strtoull (name + strlen ("name-"), NULL, 10);
  e.reg = t->reg;
  e.thread = t->index;
  e.token = redis_lock_get_fencing_token (lock);
  e.role = 'L';
  cancellable = redis_lock_get_lease_cancellable (lock);
  if (cancellable != NULL)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (family_note_told), &e.told_us, NULL);
  reentered = !freeze && maybe_reenter (t, lock);
  family_hold (t, freeze);
  e.told = redis_lock_is_lease_lost (lock)
           || (cancellable != NULL && g_cancellable_is_cancelled (cancellable));
  e.end_us = g_get_monotonic_time ();
  if (e.told)
    family_note_told (NULL, &e.told_us);
  /* The handler is gone (or has returned) before the entry is read or moved. */
  if (cancellable != NULL)
    g_cancellable_disconnect (cancellable, handler);
  e.unlocked = release (t, lock, id, reentered, freeze);
  if (g_str_equal (e.unlocked, "LEASE_LOST"))
    {
      e.told = TRUE;
      family_note_told (NULL, &e.told_us);
    }
  g_array_append_val (t->history, e);
  tally_add (&t->tally, "sections", 1);
  __atomic_fetch_add (w->progress, 1, __ATOMIC_RELAXED);
}

/* One loop: obtain, lock, critical section, unlock. */
static void
iteration (WorkerThread *t)
{
  Worker *w = t->w;
  WorkerOptions *opt = w->opt;
  Tally *tally = &t->tally;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL;
  g_autofree char *id = NULL;
  gboolean freeze, sibling, reentered;
  SectionResult result;
  RedisLock *lock;

  name = pick_name (t, &freeze, &sibling);
  id = g_strdup_printf ("p%d.r%u.t%u.%" G_GUINT64_FORMAT, opt->index, t->reg, t->index, ++t->seq);

  lock = redis_lock_registry_obtain (w->registries[t->reg], name, &error);
  if (lock == NULL)
    {
      count_error (tally, "obtain", error);
      if (freeze)
        g_atomic_int_set (&w->self_stop, 1);
      return;
    }
  if (!acquire (t, lock, freeze, sibling))
    {
      if (freeze)
        g_atomic_int_set (&w->self_stop, 1);
      redis_lock_unref (lock);
      return;
    }
  tally_add (tally, "acquired", 1);
  if (opt->history_path != NULL)
    {
      history_section (t, lock, name, id, freeze);
      redis_lock_unref (lock);
      return;
    }
  if (freeze)
    {
      freeze = confirm_freeze (t, lock);
      if (t->raw == NULL)
        {
          redis_lock_unlock (lock, NULL);
          redis_lock_unref (lock);
          return;
        }
    }
  reentered = !freeze && maybe_reenter (t, lock);

  result = critical_section (t, name, id, freeze);
  if (freeze)
    g_atomic_int_set (&w->freezing, 0);
  release (t, lock, id, reentered, freeze);
  redis_lock_unref (lock);

  if (result == SECTION_DONE)
    {
      tally_add (tally, "sections", 1);
      __atomic_fetch_add (w->progress, 1, __ATOMIC_RELAXED);
    }
}

static gpointer
worker_thread_main (gpointer data)
{
  WorkerThread *t = data;
  Worker *w = t->w;

  if (w->opt->history_path != NULL && w->opt->member != MEMBER_LOCK)
    family_thread_run (t);
  while (w->opt->member == MEMBER_LOCK && !g_atomic_int_get (&w->stop)
         && g_get_monotonic_time () < w->deadline_us)
    {
      if (w->opt->history_path == NULL && t->raw == NULL && !raw_connect (t))
        {
          /* The server is down (a restart): back off, it comes back. */
          tally_add (&t->tally, "raw-reconnect-failures", 1);
          g_usleep (20 * 1000);
          continue;
        }
      iteration (t);
    }
  raw_drop (t);
  g_atomic_int_inc (&w->done);
  return NULL;
}

/* Reads the controller's instructions on stdin: 's' freezes the process in its next
 * section; end of file (the controller closed the pipe, or died) ends the run. */
static gpointer
stdin_thread_main (gpointer data)
{
  Worker *w = data;

  for (;;)
    {
      char buf[16];
      ssize_t n = read (STDIN_FILENO, buf, sizeof buf);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      for (ssize_t i = 0; i < n; i++)
        if (buf[i] == 's')
          {
            g_atomic_int_set (&w->freezing, 1);
            g_atomic_int_set (&w->self_stop, 1);
          }
    }
  g_atomic_int_set (&w->stop, 1);
  return NULL;
}

static void
print_tally (Tally *tally)
{
  GHashTableIter iter;
  gpointer key, value;

  g_hash_table_iter_init (&iter, tally->counts);
  while (g_hash_table_iter_next (&iter, &key, &value))
    printf ("count %" G_GUINT64_FORMAT " %s\n", *(guint64 *)value, (const char *)key);
  for (guint i = 0; i < tally->records->len; i++)
    printf ("%s\n", (const char *)g_ptr_array_index (tally->records, i));
  printf ("count %" G_GUINT64_FORMAT " dropped-records\n", tally->dropped);
  printf ("max acquire %" G_GINT64_FORMAT "\n", tally->max_acquire_ms);
  printf ("max unlock %" G_GINT64_FORMAT "\n", tally->max_unlock_ms);
  printf ("max failed-acquire %" G_GINT64_FORMAT "\n", tally->max_failed_acquire_ms);
  printf ("max failed-unlock %" G_GINT64_FORMAT "\n", tally->max_failed_unlock_ms);
  printf ("end\n");
  fflush (stdout);
}

/* Opens the worker's registries, set up as the scenario says. The server may be
 * restarting or frozen right now: a connection failure is retried until the deadline;
 * any other failure ends the worker process with a report that says so. */
static void
open_registries (Worker *w)
{
  WorkerOptions *opt = w->opt;

  g_auto (GStrv) urls = g_strsplit (opt->url, " ", -1);

  for (gint r = 0; r < opt->registries; r++)
    {
      g_autoptr (GError) error = NULL;

      while ((w->registries[r]
              = opt->quorum ? redis_lock_registry_new_quorum ((const char *const *)urls,
                                                              STRESS_REGISTRY_KEY, &error)
                            : redis_lock_registry_new (opt->url, STRESS_REGISTRY_KEY, &error))
                 == NULL
             && g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION)
             && g_get_monotonic_time () < w->deadline_us)
        {
          g_clear_error (&error);
          g_usleep (20 * 1000);
        }
      if (w->registries[r] == NULL)
        {
          printf ("failure worker %d: registry: %s\nend\n", opt->index, error->message);
          fflush (stdout);
          _exit (2);
        }
      redis_lock_registry_set_expire_after_ms (w->registries[r], opt->ttl_ms);
      if (opt->fencing)
        redis_lock_registry_set_fencing (w->registries[r], TRUE);
      if (opt->min_replicas > 0)
        redis_lock_registry_set_min_replicas (w->registries[r], (guint)opt->min_replicas,
                                              MIN_REPLICAS_WAIT_MS);
      if (opt->timeout_ms > 0)
        {
          redis_lock_registry_set_connect_timeout_ms (w->registries[r], opt->timeout_ms);
          redis_lock_registry_set_command_timeout_ms (w->registries[r], opt->timeout_ms);
        }
      /* Odd registries wait by polling, even ones by notification. */
      if (r % 2 == 1)
        {
          redis_lock_registry_set_wait_mode (w->registries[r], REDIS_LOCK_WAIT_SPIN);
          redis_lock_registry_set_idle_between_tries_ms (w->registries[r], 5);
        }
    }
}

/* The history file: one line per entry, "name proc reg thread call start end token told
 * unlocked told_us role", the times in microseconds of CLOCK_MONOTONIC
 * (g_get_monotonic_time()). */
static gboolean
write_history (WorkerOptions *opt, WorkerThread *threads, guint n_threads)
{
  FILE *f = fopen (opt->history_path, "we");
  gboolean ok;

  if (f == NULL)
    return FALSE;
  for (guint i = 0; i < n_threads; i++)
    for (guint j = 0; j < threads[i].history->len; j++)
      {
        HistoryEntry *e = &g_array_index (threads[i].history, HistoryEntry, j);
        fprintf (f,
                 "%u %d %u %u %" G_GINT64_FORMAT " %" G_GINT64_FORMAT " %" G_GINT64_FORMAT
                 " %" G_GUINT64_FORMAT " %d %s %" G_GINT64_FORMAT " %c\n",
                 e->name, opt->index, e->reg, e->thread, e->call_us, e->start_us, e->end_us, e->token,
                 e->told ? 1 : 0, e->unlocked, e->told_us, e->role);
      }
  ok = !ferror (f);
  return fclose (f) == 0 && ok;
}

int
worker_main (WorkerOptions *opt)
{
  Worker w = { 0 };
  guint n_threads = (guint)(opt->registries * opt->threads);
  g_autofree WorkerThread *threads = g_new0 (WorkerThread, n_threads);
  Tally total;
  guint64 *map;
  int fd;
  gint64 give_up;

#ifdef __linux__
  /* Die with the controller, even when it is killed. */
  prctl (PR_SET_PDEATHSIG, SIGKILL);
#endif
  fd = open (opt->progress_path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    {
      g_printerr ("stress worker %d: %s: %s\n", opt->index, opt->progress_path, g_strerror (errno));
      return 2;
    }
  map = mmap (NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close (fd);
  if (map == MAP_FAILED)
    {
      g_printerr ("stress worker %d: mmap: %s\n", opt->index, g_strerror (errno));
      return 2;
    }
  /* GLib sets up its table of error domains on the first GError, behind a lock made on
   * first use that ThreadSanitizer cannot follow: make one before any thread starts,
   * so ThreadSanitizer runs look at the library's locking instead. */
  g_error_free (g_error_new_literal (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "first error"));
  w.opt = opt;
  test_sync_init (&w.freeze_sync);
  w.freezes = g_array_new (FALSE, FALSE, sizeof (Freeze));
  w.progress = &map[opt->index];
  w.deadline_us = g_get_monotonic_time () + opt->max_ms * 1000;
  w.registries = g_new0 (RedisLockRegistry *, opt->registries);
  w.threads = threads;
  w.n_threads = n_threads;
  open_registries (&w);

  /* Every thread's state is set up before any thread starts: they read each other's. */
  for (guint i = 0; i < n_threads; i++)
    {
      WorkerThread *t = &threads[i];

      t->w = &w;
      t->reg = i / (guint)opt->threads;
      t->index = i % (guint)opt->threads;
      t->rand
          = g_rand_new_with_seed ((guint32)(opt->index * 7919 + i * 104729 + (guint32)getpid ()));
      tally_init (&t->tally);
      t->history = g_array_new (FALSE, FALSE, sizeof (HistoryEntry));
    }
  g_thread_unref (g_thread_new ("stress-stdin", stdin_thread_main, &w));
  for (guint i = 0; i < n_threads; i++)
    threads[i].thread = g_thread_new ("stress-worker", worker_thread_main, &threads[i]);

  /* Every call a thread makes is bounded, except redis_lock_lock(), which the scenarios
   * with outages do not use; a thread still busy well after the deadline is hung. */
  give_up = w.deadline_us
            + (opt->wait_ms + 4 * MAX (opt->timeout_ms, LIBRARY_DEFAULT_TIMEOUT_MS) + 60000) * 1000;
  while ((guint)g_atomic_int_get (&w.done) < n_threads && g_get_monotonic_time () < give_up)
    g_usleep (10 * 1000);
  if ((guint)g_atomic_int_get (&w.done) < n_threads)
    {
      printf ("failure worker %d: %u of %u threads still running long after the deadline\nend\n",
              opt->index, n_threads - (guint)g_atomic_int_get (&w.done), n_threads);
      fflush (stdout);
      _exit (3);
    }

  tally_init (&total);
  for (guint i = 0; i < n_threads; i++)
    g_thread_join (threads[i].thread);
  if (opt->history_path != NULL && !write_history (opt, threads, n_threads))
    tally_record (&total, "failure worker %d: cannot write %s", opt->index, opt->history_path);
  for (guint i = 0; i < n_threads; i++)
    {
      g_array_unref (threads[i].history);
      tally_merge (&total, &threads[i].tally);
      tally_clear (&threads[i].tally);
      g_rand_free (threads[i].rand);
    }
  for (gint r = 0; r < opt->registries; r++)
    redis_lock_registry_unref (w.registries[r]);
  g_free (w.registries);
  g_array_unref (w.freezes);
  test_sync_clear (&w.freeze_sync);
  print_tally (&total);
  tally_clear (&total);
  munmap (map, 4096);
  return 0;
}
