/* stress.c: mutual exclusion under load, under faults, across processes.
 *
 * Workers are P child processes (this program run again in a hidden worker mode, so no
 * registry is ever used across fork()) with R registries each and T threads per
 * registry. Every loop obtains a lock from a small set of names, takes it, and inside
 * the critical section reads that name's holder key and counter key in Redis on the
 * thread's own raw connection, checks nobody else is inside (holder empty), writes its
 * own section id to the holder key, increments the counter non-atomically (read, then
 * `SET counter "n+1 id" GET`), and clears the holder key only if it still holds its own
 * id. Because every counter write returns the value it replaced, each lost increment is
 * caught at the write that lost it and names the section that wrote the replaced value;
 * the final counters are compared with the confirmed writes as well. A section seen
 * inside someone else's section is an overlap. Both are failures, except that a section
 * whose unlock reported LEASE_LOST really did lose its lease: anomalies involving such a
 * section count as "expired-lease" overlaps and lost updates, which are allowed only
 * around a worker process that was frozen with SIGSTOP for longer than its TTL.
 *
 * Faults, each its own scenario, then all together: CLIENT KILL of random library
 * connections every 100 ms (the harness's own connections are named "stress-*" and
 * spared); a worker process stopping itself inside a section held with a short TTL and
 * resumed later; redis-server killed and restarted (no persistence) while locks are
 * held; redis-server frozen for a few seconds with 500 ms timeouts, where every library
 * call must return within its bound. The raw connection of a section is opened before
 * the lock is taken and never reopened inside the section, so a section never writes
 * to a server other than the one it locked on; the counters are checked per server run
 * (run_id). Two small fault cases follow the scenarios: a holder frozen past its lease
 * while a thread of its registry waits (no hand-over of the dead lease), and an unlock
 * whose release reply is lost to CLIENT KILL (no false LEASE_LOST).
 *
 * With no option this is the quick profile run by `make check` (/stress/quick/...);
 * `--long` runs the long profile (/stress/long/..., `make stress`). Each scenario prints
 * one summary row; the whole table is printed at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <glib-unix.h>
#include <glib/gstdio.h>

#define STRESS_REGISTRY_KEY "stresslock"
#define DATA_PREFIX "stressdata"
/* The harness's raw connections wait this long: longer than any outage, so a command
 * the harness sent is answered, never left to run later behind its back. */
#define RAW_TIMEOUT_S 60
/* Library default for connect and command timeouts (redislock-registry.h). */
#define LIBRARY_DEFAULT_TIMEOUT_MS 3000
/* Records (lease losses, overlaps, clobbers) a worker thread keeps; more are counted. */
#define MAX_RECORDS 2000
/* Sections that must complete after the last fault before the scenario may end. */
#define POST_FAULT_SECTIONS 100

static const char *const code_names[] = {
  "INVALID", "CONNECTION", "REDIS", "NOT_OWNER", "LEASE_LOST", "CACHE_FULL", "FORKED", "CLOSED",
};

/* What one scenario runs; the worker processes get the part they need on their command
 * line. */
typedef struct
{
  const char *name;
  const char *summary;
  guint procs, registries, threads, names;
  gint64 ttl_ms;     /* registries' lease TTL */
  gint64 timeout_ms; /* connect and command timeout; 0: the library default */
  gint64 wait_ms;    /* bound of try_lock_for / try_lock_full */
  gboolean use_lock; /* also use the unbounded redis_lock_lock() */
  guint64 min_sections;
  gint64 kill_ms;     /* CLIENT KILL every 100 ms for at least this long; 0: never */
  guint pauses;       /* workers frozen inside a section */
  gint64 stop_ms;     /* how long each is frozen */
  gint64 stop_ttl_ms; /* TTL of the frozen section's lease */
  guint restarts;     /* redis-server killed and started again */
  guint outages;      /* redis-server frozen */
  gint64 outage_ms;   /* for this long */
  gint64 cap_ms;      /* the whole scenario must end within this */
} Scenario;

/* ------------------------------------------------------------------------------------- */
/* Tallies: what a worker thread saw, merged per process and reported to the controller. */

typedef struct
{
  GHashTable *counts; /* "key" -> guint64* : sections, errors, writes, ... */
  GPtrArray *records; /* lines: lease-lost, overlap, clobber, stop, failure */
  guint64 dropped;
  gint64 max_acquire_ms, max_unlock_ms, max_failed_acquire_ms, max_failed_unlock_ms;
} Tally;

static void
tally_init (Tally *t)
{
  t->counts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  t->records = g_ptr_array_new_with_free_func (g_free);
  t->dropped = 0;
  t->max_acquire_ms = t->max_unlock_ms = 0;
  t->max_failed_acquire_ms = t->max_failed_unlock_ms = 0;
}

static void
tally_clear (Tally *t)
{
  g_clear_pointer (&t->counts, g_hash_table_unref);
  g_clear_pointer (&t->records, g_ptr_array_unref);
}

static void
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

static guint64
tally_get (Tally *t, const char *key)
{
  guint64 *value = g_hash_table_lookup (t->counts, key);

  return value != NULL ? *value : 0;
}

static void G_GNUC_PRINTF (2, 3) tally_record (Tally *t, const char *format, ...)
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

static const char *
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

typedef struct
{
  gint index;
  char *url;
  char *socket_path;
  char *progress_path;
  gint registries, threads, names;
  gint64 ttl_ms, timeout_ms, wait_ms, stop_ttl_ms, stop_ms, max_ms;
  gboolean use_lock;
} WorkerOptions;

typedef struct
{
  WorkerOptions *opt;
  RedisLockRegistry **registries;
  gint stop;      /* atomic: finish the current loop and leave */
  gint self_stop; /* atomic: thread 0 freezes the process inside its next section */
  gint freezing;  /* atomic: from the freeze request until thread 0 has resumed */
  gint done;      /* atomic: threads that have left their loop */
  guint64 *progress;
  gint64 deadline_us;
  struct _WorkerThread *threads;
  guint n_threads;
} Worker;

typedef struct _WorkerThread
{
  Worker *w;
  guint reg, index;
  gint waiting_tid; /* atomic: kernel thread id while waiting for the frozen lock */
  GThread *thread;
  redisContext *raw;
  char *run_id;
  GRand *rand;
  guint64 seq;
  Tally tally;
} WorkerThread;

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
static guint64
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

  /* raise() sends to the calling thread, which stops before it returns; kill (getpid
   * ()) could be taken by another thread and let this one run on for a while. */
  if (freeze)
    raise (SIGSTOP);

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

static void
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
 * against their bound, those that failed with CONNECTION too. */
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
  g_atomic_int_set (&t->waiting_tid, 0);
  ms = (g_get_monotonic_time () - start) / 1000;
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
 * recorded with the section id @id, and a frozen section's unlock result as "stop". */
static void
release (WorkerThread *t, RedisLock *lock, const char *id, gboolean reentered, gboolean freeze)
{
  Tally *tally = &t->tally;
  g_autoptr (GError) error = NULL;
  gint64 start, ms;

  if (reentered && (!redis_lock_unlock (lock, &error) || error != NULL))
    {
      tally_record (tally, "failure inner unlock: %s", error != NULL ? error->message : "FALSE");
      g_clear_error (&error);
    }
  start = g_get_monotonic_time ();
  if (!redis_lock_unlock (lock, &error))
    {
      ms = (g_get_monotonic_time () - start) / 1000;
      count_error (tally, "unlock", error);
      if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST))
        tally_record (tally, "lease-lost %s", id);
      if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION))
        tally->max_failed_unlock_ms = MAX (tally->max_failed_unlock_ms, ms);
    }
  else
    ms = (g_get_monotonic_time () - start) / 1000;
  tally->max_unlock_ms = MAX (tally->max_unlock_ms, ms);
  if (freeze)
    tally_record (tally, "stop %s %s", id, error != NULL ? error_code_name (error) : "OK");
  if (redis_lock_is_held_by_current_thread (lock))
    tally_record (tally, "failure the outermost unlock left the lock held");
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

  while (!g_atomic_int_get (&w->stop) && g_get_monotonic_time () < w->deadline_us)
    {
      if (t->raw == NULL && !raw_connect (t))
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

  for (gint r = 0; r < opt->registries; r++)
    {
      g_autoptr (GError) error = NULL;

      while ((w->registries[r] = redis_lock_registry_new (opt->url, STRESS_REGISTRY_KEY, &error))
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

static int
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
    {
      g_thread_join (threads[i].thread);
      tally_merge (&total, &threads[i].tally);
      tally_clear (&threads[i].tally);
      g_rand_free (threads[i].rand);
    }
  for (gint r = 0; r < opt->registries; r++)
    redis_lock_registry_unref (w.registries[r]);
  g_free (w.registries);
  print_tally (&total);
  tally_clear (&total);
  munmap (map, 4096);
  return 0;
}

/* The frozen-holder probe, a worker process of its own: thread 0 holds "probe" with a
 * short TTL while thread 1 waits for it, then the process freezes; after the controller
 * has let the lease expire, taken "probe" itself and resumed us, thread 0 unlocks and
 * thread 1 reports whether it got the lock and who owned the key when it did. */
typedef struct
{
  RedisLock *lock;
  const char *socket_path;
  RedisLockRegistry *registry;
  gint tid; /* atomic */
} Probe;

static gpointer
probe_waiter (gpointer data)
{
  Probe *probe = data;
  g_autoptr (GError) error = NULL;
  gboolean acquired;

  g_atomic_int_set (&probe->tid, test_thread_id ());
  acquired = redis_lock_try_lock_for (probe->lock, 5000, NULL, &error);
  if (acquired)
    {
      struct timeval tv = { RAW_TIMEOUT_S, 0 };
      redisContext *c = redisConnectUnixWithTimeout (probe->socket_path, tv);
      redisReply *reply = c != NULL && c->err == 0
                              ? redisCommand (c, "GET %s", redis_lock_get_key (probe->lock))
                              : NULL;
      gboolean own = reply != NULL && reply->type == REDIS_REPLY_STRING
                     && test_value_is_of (reply->str, probe->registry);

      printf ("waiter acquired, key owner %s\n", own ? "self" : "OTHER");
      if (reply != NULL)
        freeReplyObject (reply);
      if (c != NULL)
        redisFree (c);
      redis_lock_unlock (probe->lock, NULL);
    }
  else
    printf ("waiter %s\n", error != NULL ? error_code_name (error) : "timed-out");
  return NULL;
}

static int
probe_main (WorkerOptions *opt)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry;
  Probe probe = { 0 };
  GThread *waiter;
  gboolean ok;

#ifdef __linux__
  prctl (PR_SET_PDEATHSIG, SIGKILL);
#endif
  g_error_free (g_error_new_literal (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                     "first error")); /* see worker_main() */
  registry = redis_lock_registry_new (opt->url, STRESS_REGISTRY_KEY, &error);
  if (registry == NULL)
    {
      printf ("failure probe registry: %s\n", error->message);
      return 2;
    }
  probe.lock = redis_lock_registry_obtain (registry, "probe", &error);
  probe.socket_path = opt->socket_path;
  probe.registry = registry;
  if (!redis_lock_try_lock_full (probe.lock, 0, opt->stop_ttl_ms, NULL, &error))
    {
      printf ("failure probe lock: %s\n", error != NULL ? error->message : "busy");
      return 2;
    }
  waiter = g_thread_new ("probe-waiter", probe_waiter, &probe);
  while (g_atomic_int_get (&probe.tid) == 0)
    g_usleep (1000);
  test_wait_thread_blocked (g_atomic_int_get (&probe.tid), 5000);
  fflush (stdout);
  raise (SIGSTOP);
  ok = redis_lock_unlock (probe.lock, &error);
  printf ("holder unlock %s\n", ok ? "OK" : error_code_name (error));
  fflush (stdout);
  g_thread_join (waiter);
  printf ("end\n");
  fflush (stdout);
  redis_lock_unref (probe.lock);
  redis_lock_registry_unref (registry);
  return 0;
}

/* ------------------------------------------------------------------------------------- */
/* The controller: runs one scenario, injects its faults, checks what the workers saw. */

typedef struct
{
  GPid pid;
  int stdin_fd;
  int stdout_fd;
  GString *output;
  gboolean exited;
  int status;
} Child;

typedef struct
{
  const Scenario *s;
  RedisLockTestServer *server;
  char *dir;
  char *progress_path;
  guint64 *progress;
  redisContext *redis;
  Child *children;
  gint64 start_us;
  guint pauses_done, restarts_done, outages_done;
  GPtrArray *problems; /* why the scenario failed */
} Controller;

typedef struct
{
  char *name;
  guint64 sections, interrupted, overlaps, expired_overlaps, lost, expired_lost;
  guint64 lease_lost, timeouts, busy, kills;
  GHashTable *errors; /* code -> guint64* */
  gint64 max_acquire_ms, max_unlock_ms, duration_ms;
  guint pauses, restarts, outages;
  gboolean passed;
} Row;

static GPtrArray *summary_rows;
static gchar *self_exe;

static void G_GNUC_PRINTF (2, 3) problem (Controller *c, const char *format, ...)
{
  va_list ap;

  va_start (ap, format);
  g_ptr_array_add (c->problems, g_strdup_vprintf (format, ap));
  va_end (ap);
}

static guint64
progress_total (Controller *c)
{
  guint64 sum = 0;

  for (guint i = 0; i < c->s->procs; i++)
    sum += __atomic_load_n (&c->progress[i], __ATOMIC_RELAXED);
  return sum;
}

static gboolean child_reap (Child *child, int options);

/* Polls the shared progress counters until @target sections are done; gives up early
 * when a worker has exited. */
static gboolean
wait_progress (Controller *c, guint64 target, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  while (progress_total (c) < target)
    {
      for (guint i = 0; i < c->s->procs; i++)
        if (child_reap (&c->children[i], WNOHANG))
          return FALSE;
      if (g_get_monotonic_time () >= deadline)
        return FALSE;
      g_usleep (5 * 1000);
    }
  return TRUE;
}

/* Polls until every worker has done @sections sections: faults start only then. */
static gboolean
wait_started (Controller *c, guint64 sections, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  for (guint i = 0; i < c->s->procs; i++)
    while (__atomic_load_n (&c->progress[i], __ATOMIC_RELAXED) < sections)
      {
        if (child_reap (&c->children[i], WNOHANG) || g_get_monotonic_time () >= deadline)
          return FALSE;
        g_usleep (5 * 1000);
      }
  return TRUE;
}

static redisContext *
named_connection (RedisLockTestServer *server, const char *name)
{
  struct timeval tv = { RAW_TIMEOUT_S, 0 };
  redisContext *c
      = redisConnectUnixWithTimeout (redis_lock_test_server_get_socket_path (server), tv);
  redisReply *reply;

  if (c == NULL || c->err != 0)
    {
      if (c != NULL)
        redisFree (c);
      return NULL;
    }
  redisSetTimeout (c, tv);
  reply = redisCommand (c, "CLIENT SETNAME %s", name);
  if (reply == NULL || reply->type != REDIS_REPLY_STATUS)
    {
      if (reply != NULL)
        freeReplyObject (reply);
      redisFree (c);
      return NULL;
    }
  freeReplyObject (reply);
  return c;
}

/* A command on the controller's connection, reconnecting once if the server was
 * restarted since the last one. */
static redisReply *
controller_command (Controller *c, const char *format, ...)
{
  for (int attempt = 0; attempt < 2; attempt++)
    {
      va_list ap;
      redisReply *reply;

      if (c->redis == NULL)
        c->redis = named_connection (c->server, "stress-controller");
      if (c->redis == NULL)
        return NULL;
      va_start (ap, format);
      reply = redisvCommand (c->redis, format, ap);
      va_end (ap);
      if (reply != NULL)
        return reply;
      g_clear_pointer (&c->redis, redisFree);
    }
  return NULL;
}

static gboolean
spawn_worker (Controller *c, guint index, GError **error)
{
  const Scenario *s = c->s;
  Child *child = &c->children[index];
  g_autoptr (GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);

  g_ptr_array_add (argv, g_strdup (self_exe));
  g_ptr_array_add (argv, g_strdup ("--worker"));
  g_ptr_array_add (argv, g_strdup_printf ("--index=%u", index));
  g_ptr_array_add (argv, g_strdup_printf ("--url=%s", redis_lock_test_server_get_url (c->server)));
  g_ptr_array_add (
      argv, g_strdup_printf ("--socket=%s", redis_lock_test_server_get_socket_path (c->server)));
  g_ptr_array_add (argv, g_strdup_printf ("--progress=%s", c->progress_path));
  g_ptr_array_add (argv, g_strdup_printf ("--registries=%u", s->registries));
  g_ptr_array_add (argv, g_strdup_printf ("--threads=%u", s->threads));
  g_ptr_array_add (argv, g_strdup_printf ("--names=%u", s->names));
  g_ptr_array_add (argv, g_strdup_printf ("--ttl=%" G_GINT64_FORMAT, s->ttl_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--timeout=%" G_GINT64_FORMAT, s->timeout_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--wait=%" G_GINT64_FORMAT, s->wait_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--stop-ttl=%" G_GINT64_FORMAT, s->stop_ttl_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--stop-ms=%" G_GINT64_FORMAT, s->stop_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--max-ms=%" G_GINT64_FORMAT, s->cap_ms));
  if (s->use_lock)
    g_ptr_array_add (argv, g_strdup ("--use-lock"));
  g_ptr_array_add (argv, NULL);

  child->output = g_string_new (NULL);
  return g_spawn_async_with_pipes (NULL, (char **)argv->pdata, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                   NULL, NULL, &child->pid, &child->stdin_fd, &child->stdout_fd,
                                   NULL, error);
}

/* Records @child's exit if it has exited (never its stops). */
static gboolean
child_reap (Child *child, int options)
{
  int status;
  pid_t r;

  if (child->exited)
    return TRUE;
  do
    r = waitpid (child->pid, &status, options);
  while (r < 0 && errno == EINTR);
  if (r == child->pid && (WIFEXITED (status) || WIFSIGNALED (status)))
    {
      child->exited = TRUE;
      child->status = status;
      g_spawn_close_pid (child->pid);
      return TRUE;
    }
  return FALSE;
}

/* --- Faults ----------------------------------------------------------------------- */

typedef struct
{
  RedisLockTestServer *server; /* only its socket path is read */
  gint stop;                   /* atomic */
  guint64 kills, pubsub_kills, rounds;
  GThread *thread;
} Killer;

/* Every 100 ms: CLIENT LIST, then CLIENT KILL a random quarter (at least one) of the
 * library's connections, data and subscription alike. The harness's connections are
 * named "stress-*"; a connection whose last command is NULL or CLIENT might be one of
 * them about to be named, so it is spared too. */
static gpointer
killer_main (gpointer data)
{
  Killer *k = data;
  redisContext *c = NULL;
  GRand *rand = g_rand_new ();

  while (!g_atomic_int_get (&k->stop))
    {
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (long long));
      g_autoptr (GArray) pubsub = g_array_new (FALSE, FALSE, sizeof (gboolean));
      g_auto (GStrv) lines = NULL;
      redisReply *reply;
      guint n_kill;

      if (c == NULL)
        c = named_connection (k->server, "stress-killer");
      reply = c != NULL ? redisCommand (c, "CLIENT LIST") : NULL;
      if (reply == NULL || reply->type != REDIS_REPLY_STRING)
        {
          if (reply != NULL)
            freeReplyObject (reply);
          g_clear_pointer (&c, redisFree);
          g_usleep (50 * 1000);
          continue;
        }
      lines = g_strsplit (reply->str, "\n", -1);
      freeReplyObject (reply);
      for (guint i = 0; lines[i] != NULL; i++)
        {
          g_auto (GStrv) fields = g_strsplit (g_strchomp (lines[i]), " ", -1);
          long long id = -1;
          gboolean spare = FALSE, is_pubsub = FALSE;

          for (guint f = 0; fields[f] != NULL; f++)
            {
              const char *v = strchr (fields[f], '=');
              if (v == NULL)
                continue;
              v++;
              if (g_str_has_prefix (fields[f], "id="))
                id = g_ascii_strtoll (v, NULL, 10);
              else if (g_str_has_prefix (fields[f], "name="))
                spare |= *v != '\0';
              else if (g_str_has_prefix (fields[f], "cmd="))
                spare |= g_str_equal (v, "NULL") || g_str_has_prefix (v, "client");
              else if (g_str_has_prefix (fields[f], "psub="))
                is_pubsub = g_ascii_strtoll (v, NULL, 10) > 0;
            }
          if (id >= 0 && !spare)
            {
              g_array_append_val (ids, id);
              g_array_append_val (pubsub, is_pubsub);
            }
        }
      n_kill = MAX (1, ids->len / 4);
      for (guint i = 0; i < n_kill && ids->len > 0; i++)
        {
          guint pick = (guint)g_rand_int_range (rand, 0, (gint32)ids->len);
          long long id = g_array_index (ids, long long, pick);
          gboolean is_pubsub = g_array_index (pubsub, gboolean, pick);

          reply = redisCommand (c, "CLIENT KILL ID %lld", id);
          if (reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)
            {
              k->kills++;
              if (is_pubsub)
                k->pubsub_kills++;
            }
          if (reply != NULL)
            freeReplyObject (reply);
          g_array_remove_index_fast (ids, pick);
          g_array_remove_index_fast (pubsub, pick);
        }
      k->rounds++;
      g_usleep (100 * 1000); /* fault timing: one round every 100 ms */
    }
  if (c != NULL)
    redisFree (c);
  g_rand_free (rand);
  return NULL;
}

/* The section id the frozen worker @victim left in a holder key (its thread 0 of
 * registry 0 freezes), and the lock name in @name. */
static char *
frozen_holder (Controller *c, guint victim, char **name)
{
  g_autofree char *prefix = g_strdup_printf ("p%u.r0.t0.", victim);

  for (guint i = 0; i < c->s->names; i++)
    {
      redisReply *reply = controller_command (c, "GET " DATA_PREFIX ":holder:name-%u", i);
      char *id = NULL;

      if (reply != NULL && reply->type == REDIS_REPLY_STRING
          && g_str_has_prefix (reply->str, prefix))
        id = g_strdup (reply->str);
      if (reply != NULL)
        freeReplyObject (reply);
      if (id != NULL)
        {
          *name = g_strdup_printf ("name-%u", i);
          return id;
        }
    }
  return NULL;
}

/* Polls the holder key of @name until it no longer holds @id. */
static gboolean
wait_takeover (Controller *c, const char *name, const char *id, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  for (;;)
    {
      redisReply *reply = controller_command (c, "GET " DATA_PREFIX ":holder:%s", name);
      gboolean same
          = reply != NULL && reply->type == REDIS_REPLY_STRING && g_str_equal (reply->str, id);

      if (reply != NULL)
        freeReplyObject (reply);
      if (!same)
        return TRUE;
      if (g_get_monotonic_time () >= deadline)
        return FALSE;
      g_usleep (2 * 1000);
    }
}

/* A worker freezes itself with SIGSTOP inside its next section (held with the short
 * TTL); it stays frozen for stop_ms, well past that TTL, then goes on. */
static void
pause_worker (Controller *c, guint victim)
{
  Child *child = &c->children[victim];
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  gboolean stopped = FALSE;
  g_autofree char *frozen = NULL;
  g_autofree char *frozen_name = NULL;

  if (write (child->stdin_fd, "s", 1) != 1)
    {
      problem (c, "cannot tell worker %u to freeze: %s", victim, g_strerror (errno));
      return;
    }
  while (!stopped && g_get_monotonic_time () < deadline)
    {
      int status;
      pid_t r = waitpid (child->pid, &status, WNOHANG | WUNTRACED);

      if (r == child->pid && WIFSTOPPED (status))
        stopped = TRUE;
      else if (r == child->pid)
        {
          child->exited = TRUE;
          child->status = status;
          g_spawn_close_pid (child->pid);
          problem (c, "worker %u exited instead of freezing", victim);
          return;
        }
      else
        g_usleep (2 * 1000);
    }
  if (!stopped)
    {
      problem (c, "worker %u did not freeze within 30 s", victim);
      return;
    }
  frozen = frozen_holder (c, victim, &frozen_name);
  g_usleep (c->s->stop_ms * 1000); /* fault timing: frozen longer than its TTL */
  /* Its lease has expired; resume it only once another worker has entered the section
   * (overwritten the holder key), so the overlap really happens. */
  if (frozen == NULL)
    {
      for (guint i = 0; i < c->s->names; i++)
        {
          redisReply *reply = controller_command (c, "GET " DATA_PREFIX ":holder:name-%u", i);
          g_test_message ("holder of name-%u: %s", i,
                          reply == NULL                       ? "(no reply)"
                          : reply->type == REDIS_REPLY_STRING ? reply->str
                                                              : "(none)");
          if (reply != NULL)
            freeReplyObject (reply);
        }
      problem (c, "worker %u froze, but no holder key names its section", victim);
    }
  else if (!wait_takeover (c, frozen_name, frozen, 30000))
    problem (c, "nobody took over %s within 30 s of worker %u freezing in it", frozen_name, victim);
  kill (child->pid, SIGCONT);
  c->pauses_done++;
}

static gboolean
some_lock_held (gpointer data)
{
  Controller *c = data;
  gboolean held = FALSE;

  for (guint i = 0; i < c->s->names && !held; i++)
    {
      redisReply *reply = controller_command (c, "EXISTS " STRESS_REGISTRY_KEY ":name-%u", i);
      held = reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
      if (reply != NULL)
        freeReplyObject (reply);
    }
  return held;
}

/* redis-server killed (SIGKILL, no persistence: every key is gone) while a lock is
 * held, and started again on the same socket. */
static void
restart_server (Controller *c)
{
  g_autoptr (GError) error = NULL;

  if (!test_wait_until (some_lock_held, c, 10000))
    problem (c, "restart: no lock was held within 10 s");
  redis_lock_test_server_stop (c->server);
  g_clear_pointer (&c->redis, redisFree);
  if (!redis_lock_test_server_start (c->server, &error))
    {
      problem (c, "restart: %s", error->message);
      return;
    }
  c->restarts_done++;
}

/* redis-server frozen (SIGSTOP): connections stay open, nothing is answered. */
static void
outage (Controller *c)
{
  redis_lock_test_server_pause (c->server);
  g_usleep (c->s->outage_ms * 1000); /* fault timing: how long the server is unreachable */
  redis_lock_test_server_resume (c->server);
  c->outages_done++;
}

/* --- Collecting and checking -------------------------------------------------------- */

typedef struct
{
  Tally tally;            /* every worker's report, merged */
  GHashTable *lease_lost; /* section id -> itself */
  GHashTable *stops;      /* frozen section id -> unlock result */
  GPtrArray *overlaps;    /* "observer other" */
  GPtrArray *clobbers;    /* "writer lastwriter delta runid name" */
  GPtrArray *failures;    /* worker-side check failures */
  GHashTable *victims;    /* "p<index>" of frozen workers */
} Collected;

static void
collect_line (Collected *col, const char *line)
{
  g_auto (GStrv) f = g_strsplit (line, " ", 3);
  guint n = g_strv_length (f);

  if (n >= 3 && g_str_equal (f[0], "count"))
    tally_add (&col->tally, f[2], g_ascii_strtoull (f[1], NULL, 10));
  else if (n >= 3 && g_str_equal (f[0], "max"))
    {
      gint64 v = g_ascii_strtoll (f[2], NULL, 10);
      if (g_str_equal (f[1], "acquire"))
        col->tally.max_acquire_ms = MAX (col->tally.max_acquire_ms, v);
      else if (g_str_equal (f[1], "unlock"))
        col->tally.max_unlock_ms = MAX (col->tally.max_unlock_ms, v);
      else if (g_str_equal (f[1], "failed-acquire"))
        col->tally.max_failed_acquire_ms = MAX (col->tally.max_failed_acquire_ms, v);
      else if (g_str_equal (f[1], "failed-unlock"))
        col->tally.max_failed_unlock_ms = MAX (col->tally.max_failed_unlock_ms, v);
    }
  else if (n >= 2 && g_str_equal (f[0], "lease-lost"))
    g_hash_table_add (col->lease_lost, g_strdup (f[1]));
  else if (n >= 3 && g_str_equal (f[0], "stop"))
    g_hash_table_insert (col->stops, g_strdup (f[1]), g_strdup (f[2]));
  else if (n >= 2 && g_str_equal (f[0], "overlap"))
    g_ptr_array_add (col->overlaps, g_strdup (line + strlen ("overlap ")));
  else if (n >= 2 && g_str_equal (f[0], "clobber"))
    g_ptr_array_add (col->clobbers, g_strdup (line + strlen ("clobber ")));
  else if (n >= 2 && g_str_equal (f[0], "failure"))
    g_ptr_array_add (col->failures, g_strdup (line + strlen ("failure ")));
  else if (!g_str_equal (line, "end") && *line != '\0')
    g_ptr_array_add (col->failures, g_strdup_printf ("unexpected worker output: %s", line));
}

/* Reads every worker's report until end of file, then reaps it, all within a bound. */
static void
collect_children (Controller *c, Collected *col)
{
  gint64 deadline = g_get_monotonic_time () + 120 * G_USEC_PER_SEC;
  guint open_fds = c->s->procs;

  for (guint i = 0; i < c->s->procs; i++)
    {
      close (c->children[i].stdin_fd); /* end of file: the workers finish */
      c->children[i].stdin_fd = -1;
      g_unix_set_fd_nonblocking (c->children[i].stdout_fd, TRUE, NULL);
    }
  while (open_fds > 0 && g_get_monotonic_time () < deadline)
    {
      g_autofree struct pollfd *pfds = g_new0 (struct pollfd, c->s->procs);
      for (guint i = 0; i < c->s->procs; i++)
        {
          pfds[i].fd = c->children[i].stdout_fd;
          pfds[i].events = POLLIN;
        }
      poll (pfds, c->s->procs, 100);
      for (guint i = 0; i < c->s->procs; i++)
        {
          char buf[4096];
          ssize_t r;

          if (c->children[i].stdout_fd < 0 || pfds[i].revents == 0)
            continue;
          r = read (c->children[i].stdout_fd, buf, sizeof buf);
          if (r > 0)
            g_string_append_len (c->children[i].output, buf, r);
          else if (r == 0 || (errno != EAGAIN && errno != EINTR))
            {
              close (c->children[i].stdout_fd);
              c->children[i].stdout_fd = -1;
              open_fds--;
            }
        }
    }
  for (guint i = 0; i < c->s->procs; i++)
    {
      Child *child = &c->children[i];
      gboolean reaped = child_reap (child, WNOHANG);

      while (!reaped && g_get_monotonic_time () < deadline)
        {
          g_usleep (10 * 1000);
          reaped = child_reap (child, WNOHANG);
        }
      if (!reaped)
        {
          problem (c, "worker %u did not exit: killed", i);
          kill (child->pid, SIGKILL);
          child_reap (child, 0);
        }
      else if (!WIFEXITED (child->status) || WEXITSTATUS (child->status) != 0)
        problem (c, "worker %u %s %d", i,
                 WIFEXITED (child->status) ? "exited with" : "was killed by signal",
                 WIFEXITED (child->status) ? WEXITSTATUS (child->status)
                                           : WTERMSIG (child->status));
      if (child->stdout_fd >= 0)
        close (child->stdout_fd);
      if (!g_str_has_suffix (child->output->str, "end\n"))
        problem (c, "worker %u report is incomplete", i);
      {
        g_auto (GStrv) lines = g_strsplit (child->output->str, "\n", -1);
        g_autofree char *proc = g_strdup_printf ("p%u", i);
        gboolean victim = g_hash_table_contains (col->victims, proc);
        for (guint l = 0; lines[l] != NULL; l++)
          {
            /* A frozen worker's call durations include the freeze: not checked. */
            if (victim && g_str_has_prefix (lines[l], "max "))
              continue;
            collect_line (col, lines[l]);
          }
      }
      g_string_free (child->output, TRUE);
      child->output = NULL;
    }
}

/* Whether one of the two section ids that open @record is in @ids. */
static gboolean
record_involves (const char *record, GHashTable *ids)
{
  g_auto (GStrv) f = g_strsplit (record, " ", -1);

  for (guint i = 0; i < 2 && f[i] != NULL; i++)
    if (g_hash_table_contains (ids, f[i]))
      return TRUE;
  return FALSE;
}

/* Whether section @id ("p3.r1.t0.42") ran in a worker process that was frozen. */
static gboolean
in_frozen_worker (const char *id, GHashTable *victims)
{
  g_autofree char *proc = g_strndup (id, strcspn (id, "."));

  return g_hash_table_contains (victims, proc);
}

/* Whether one of the two section ids that open @record ran in a frozen worker. */
static gboolean
record_in_frozen_worker (const char *record, GHashTable *victims)
{
  g_auto (GStrv) f = g_strsplit (record, " ", -1);

  for (guint i = 0; i < 2 && f[i] != NULL; i++)
    if (in_frozen_worker (f[i], victims))
      return TRUE;
  return FALSE;
}

static guint64
sum_prefixed (Tally *tally, const char *prefix, const char *suffix)
{
  GHashTableIter iter;
  gpointer key, value;
  guint64 sum = 0;

  g_hash_table_iter_init (&iter, tally->counts);
  while (g_hash_table_iter_next (&iter, &key, &value))
    if (g_str_has_prefix (key, prefix) && (suffix == NULL || g_str_has_suffix (key, suffix)))
      sum += *(guint64 *)value;
  return sum;
}

static gboolean
code_allowed (const Scenario *s, const char *op, const char *code)
{
  gboolean faults = s->kill_ms > 0 || s->restarts > 0 || s->outages > 0;

  if (g_str_equal (code, "CONNECTION"))
    return faults && !g_str_equal (op, "obtain");
  if (g_str_equal (code, "LEASE_LOST"))
    return g_str_equal (op, "unlock") && (faults || s->pauses > 0);
  return FALSE;
}

/* The row's figures: what the workers reported and which faults were done. */
static void
fill_row (Controller *c, Collected *col, Row *row)
{
  Tally *tally = &col->tally;

  row->sections = tally_get (tally, "sections");
  row->interrupted = tally_get (tally, "interrupted");
  row->timeouts = tally_get (tally, "timeouts");
  row->busy = tally_get (tally, "busy");
  row->lease_lost = g_hash_table_size (col->lease_lost);
  row->max_acquire_ms = tally->max_acquire_ms;
  row->max_unlock_ms = tally->max_unlock_ms;
  row->pauses = c->pauses_done;
  row->restarts = c->restarts_done;
  row->outages = c->outages_done;
}

/* The workers' own check failures, lost records, too few sections, and errors by code:
 * the row counts them, and a code the scenario's faults do not explain is a problem. */
static void
check_reports (Controller *c, Collected *col, Row *row)
{
  const Scenario *s = c->s;
  Tally *tally = &col->tally;
  GHashTableIter iter;
  gpointer key, value;

  for (guint i = 0; i < col->failures->len; i++)
    problem (c, "worker check: %s", (const char *)g_ptr_array_index (col->failures, i));
  if (tally->dropped > 0)
    problem (c, "%" G_GUINT64_FORMAT " records were dropped", tally->dropped);
  if (row->sections < s->min_sections)
    problem (c, "only %" G_GUINT64_FORMAT " sections, expected at least %" G_GUINT64_FORMAT,
             row->sections, s->min_sections);

  g_hash_table_iter_init (&iter, tally->counts);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      g_auto (GStrv) f = NULL;
      guint64 *sum;

      if (!g_str_has_prefix (key, "error "))
        continue;
      f = g_strsplit (key, " ", 3);
      sum = g_hash_table_lookup (row->errors, f[2]);
      if (sum == NULL)
        {
          sum = g_new0 (guint64, 1);
          g_hash_table_insert (row->errors, g_strdup (f[2]), sum);
        }
      *sum += *(guint64 *)value;
      if (!code_allowed (s, f[1], f[2]))
        problem (c, "%" G_GUINT64_FORMAT " × %s failed with %s, not expected in this scenario",
                 *(guint64 *)value, f[1], f[2]);
    }
}

/* A frozen section's lease expired by construction (checked short, frozen for longer,
 * taken over meanwhile): its unlock must say so. With connections being killed or
 * the server frozen, the release itself may fail first and report CONNECTION. Every
 * frozen section counts as one that lost its lease from here on. */
static void
check_stops (Controller *c, Collected *col)
{
  const Scenario *s = c->s;
  GHashTableIter iter;
  gpointer key, value;

  g_hash_table_iter_init (&iter, col->stops);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      gboolean connection_ok
          = (s->kill_ms > 0 || s->outages > 0) && g_str_equal (value, "CONNECTION");
      if (!g_str_equal (value, "LEASE_LOST") && !connection_ok)
        problem (c, "frozen section %s: unlock gave %s, expected LEASE_LOST", (const char *)key,
                 (const char *)value);
      g_hash_table_add (col->lease_lost, g_strdup (key));
    }
}

/* Overlaps and lost updates: those involving a section whose lease was lost are
 * expired-lease ones, allowed only for a worker frozen by the pause fault. */
static void
check_overlaps (Controller *c, Collected *col, Row *row)
{
  guint64 real_overlaps = 0;

  for (guint i = 0; i < col->overlaps->len; i++)
    {
      const char *r = g_ptr_array_index (col->overlaps, i);
      if (record_involves (r, col->lease_lost))
        {
          row->expired_overlaps++;
          if (!record_in_frozen_worker (r, col->victims))
            problem (c, "expired-lease overlap outside a frozen worker: %s", r);
        }
      else
        {
          real_overlaps++;
          if (real_overlaps <= 10)
            problem (c, "overlap: section %s", r);
        }
    }
  row->overlaps = real_overlaps;
  for (guint i = 0; i < col->clobbers->len; i++)
    {
      const char *r = g_ptr_array_index (col->clobbers, i);
      g_auto (GStrv) f = g_strsplit (r, " ", -1);
      gint64 delta = g_ascii_strtoll (f[2], NULL, 10);
      if (record_involves (r, col->lease_lost))
        {
          row->expired_lost += (guint64)ABS (delta);
          if (!record_in_frozen_worker (r, col->victims))
            problem (c, "expired-lease lost update outside a frozen worker: %s", r);
        }
      else
        {
          row->lost += (guint64)ABS (delta);
          problem (c, "lost update: section %s replaced a value it had not read (%s)", f[0], r);
        }
    }
}

/* Lease losses: without other faults, only the frozen worker may lose leases; every
 * pause froze one section, whose lease another worker then took (an overlap). */
static void
check_lease_losses (Controller *c, Collected *col, Row *row)
{
  const Scenario *s = c->s;
  GHashTableIter iter;
  gpointer key;
  guint64 lease_lost_outside = 0;

  g_hash_table_iter_init (&iter, col->lease_lost);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    if (!in_frozen_worker (key, col->victims))
      lease_lost_outside++;
  if (lease_lost_outside > 0 && s->kill_ms == 0 && s->restarts == 0 && s->outages == 0)
    problem (c,
             "%" G_GUINT64_FORMAT " sections outside the frozen worker lost their lease without a "
             "fault that explains it",
             lease_lost_outside);
  if (s->pauses > 0)
    {
      if (g_hash_table_size (col->stops) != c->pauses_done || c->pauses_done != s->pauses)
        problem (c, "%u frozen sections reported, %u pauses done, %u planned",
                 g_hash_table_size (col->stops), c->pauses_done, s->pauses);
      if (row->expired_overlaps == 0)
        problem (c, "no expired-lease overlap was seen around the frozen worker");
    }
}

/* Faults had an effect and calls stayed within their bounds: an acquisition within its
 * wait plus a connect and a command timeout, an unlock within the two timeouts, each
 * with REDISLOCK_STRESS_SLACK_MS of slack (1 s unless set). */
static void
check_bounds (Controller *c, Collected *col, Row *row)
{
  const Scenario *s = c->s;
  Tally *tally = &col->tally;
  gint64 timeout_ms = s->timeout_ms > 0 ? s->timeout_ms : LIBRARY_DEFAULT_TIMEOUT_MS;
  gint64 slack_ms = 1000;
  const char *slack_env = g_getenv ("REDISLOCK_STRESS_SLACK_MS");

  if (slack_env != NULL)
    slack_ms = g_ascii_strtoll (slack_env, NULL, 10);
  g_test_message (
      "%s: longest acquisition %" G_GINT64_FORMAT " ms (failed with CONNECTION: %" G_GINT64_FORMAT
      " ms), longest unlock %" G_GINT64_FORMAT " ms (failed with CONNECTION: %" G_GINT64_FORMAT
      " ms); timeouts %" G_GINT64_FORMAT " ms",
      s->name, tally->max_acquire_ms, tally->max_failed_acquire_ms, tally->max_unlock_ms,
      tally->max_failed_unlock_ms, timeout_ms);

  if (s->kill_ms > 0 && row->kills == 0)
    problem (c, "CLIENT KILL never killed a library connection");
  if (s->restarts != c->restarts_done)
    problem (c, "%u of %u restarts done", c->restarts_done, s->restarts);
  if (s->outages > 0 && sum_prefixed (tally, "error ", " CONNECTION") == 0)
    problem (c, "the server was unreachable, yet no call failed with CONNECTION");
  if (s->outages != c->outages_done)
    problem (c, "%u of %u outages done", c->outages_done, s->outages);
  if (tally->max_acquire_ms > s->wait_ms + 2 * timeout_ms + slack_ms)
    problem (c,
             "an acquisition took %" G_GINT64_FORMAT " ms, bound %" G_GINT64_FORMAT
             " ms (wait + connect + command timeout + slack)",
             tally->max_acquire_ms, s->wait_ms + 2 * timeout_ms + slack_ms);
  if (tally->max_unlock_ms > 2 * timeout_ms + slack_ms)
    problem (c,
             "an unlock took %" G_GINT64_FORMAT " ms, bound %" G_GINT64_FORMAT
             " ms (connect + command timeout + slack)",
             tally->max_unlock_ms, 2 * timeout_ms + slack_ms);
  if (s->kill_ms == 0 && s->restarts == 0 && s->outages == 0 && s->pauses == 0)
    {
      if (row->timeouts > 0)
        problem (c, "%" G_GUINT64_FORMAT " acquisitions timed out without any fault",
                 row->timeouts);
      if (row->interrupted > 0)
        problem (c, "%" G_GUINT64_FORMAT " sections interrupted without any fault",
                 row->interrupted);
    }
}

/* The run_id of the server's current run, read on the controller's connection. */
static char *
server_run_id (Controller *c)
{
  redisReply *reply = controller_command (c, "INFO server");
  char *run_id = NULL;

  if (reply != NULL && reply->type == REDIS_REPLY_STRING)
    {
      const char *p = strstr (reply->str, "run_id:");
      if (p != NULL)
        run_id = g_strndup (p + 7, strcspn (p + 7, "\r\n"));
    }
  if (reply != NULL)
    freeReplyObject (reply);
  return run_id;
}

/* The counter of name-@i in the server's run @run_id against the writes confirmed on
 * it: they differ by exactly the lost updates recorded, unless a write's outcome is
 * unknown. Without a fault that loses keys or leases, no lock key is left either. */
static void
check_counter (Controller *c, Collected *col, const char *run_id, guint i)
{
  const Scenario *s = c->s;
  Tally *tally = &col->tally;
  g_autofree char *writes_key = g_strdup_printf ("writes %s name-%u", run_id, i);
  g_autofree char *uncertain_key = g_strdup_printf ("uncertain %s", run_id);
  guint64 expected = tally_get (tally, writes_key);
  guint64 uncertain = tally_get (tally, uncertain_key);
  gint64 explained = 0;
  guint64 actual;
  const char *writer;
  redisReply *reply = controller_command (c, "GET " DATA_PREFIX ":counter:name-%u", i);

  actual = parse_counter (reply, &writer);
  if (reply != NULL)
    freeReplyObject (reply);
  for (guint k = 0; k < col->clobbers->len; k++)
    {
      g_auto (GStrv) f = g_strsplit (g_ptr_array_index (col->clobbers, k), " ", -1);
      g_autofree char *name = g_strdup_printf ("name-%u", i);
      if (g_str_equal (f[3], run_id) && g_str_equal (f[4], name))
        explained += g_ascii_strtoll (f[2], NULL, 10);
    }
  g_test_message ("%s name-%u: %" G_GUINT64_FORMAT
                  " confirmed increments, counter %" G_GUINT64_FORMAT ", %" G_GINT64_FORMAT
                  " explained by recorded lost updates",
                  s->name, i, expected, actual, explained);
  if ((gint64)expected - (gint64)actual != explained && uncertain == 0)
    problem (c,
             "name-%u: %" G_GUINT64_FORMAT " increments confirmed, counter is %" G_GUINT64_FORMAT
             ", lost updates recorded explain %" G_GINT64_FORMAT,
             i, expected, actual, explained);
  if (s->kill_ms == 0 && s->restarts == 0 && s->outages == 0)
    {
      g_autofree char *lock_key = g_strdup_printf (STRESS_REGISTRY_KEY ":name-%u", i);
      reply = controller_command (c, "EXISTS %s", lock_key);
      if (reply == NULL || reply->type != REDIS_REPLY_INTEGER || reply->integer != 0)
        problem (c, "lock key %s still exists after every worker closed its registries", lock_key);
      if (reply != NULL)
        freeReplyObject (reply);
    }
}

/* The verdicts on one scenario, in the order its problems are listed; fills @row. The
 * row's figures come first: checking the frozen sections adds them to the lease
 * losses, and the overlap counts feed the lease-loss check. */
static void
check_scenario (Controller *c, Collected *col, Row *row)
{
  g_autofree char *run_id = NULL;

  fill_row (c, col, row);
  check_reports (c, col, row);
  check_stops (c, col);
  check_overlaps (c, col, row);
  check_lease_losses (c, col, row);
  check_bounds (c, col, row);

  /* The counters of the server's last run against the writes confirmed on it. */
  run_id = server_run_id (c);
  if (run_id == NULL)
    problem (c, "cannot read the server's run_id");
  for (guint i = 0; run_id != NULL && i < c->s->names; i++)
    check_counter (c, col, run_id, i);
}

static void
print_row (const Row *row, gboolean header)
{
  g_autoptr (GString) errors = g_string_new (NULL);

  for (gsize i = 0; i < G_N_ELEMENTS (code_names) + 2; i++)
    {
      const char *code = i < G_N_ELEMENTS (code_names)    ? code_names[i]
                         : i == G_N_ELEMENTS (code_names) ? "CANCELLED"
                                                          : "OTHER";
      guint64 *n = g_hash_table_lookup (row->errors, code);
      if (n != NULL && *n > 0)
        g_string_append_printf (errors, "%s%s=%" G_GUINT64_FORMAT, errors->len > 0 ? "," : "", code,
                                *n);
    }
  if (errors->len == 0)
    g_string_append (errors, "-");
  if (header)
    g_print ("# %-14s %9s %6s %8s %8s %6s %8s %6s %8s %6s %8s %8s %7s  %s\n", "scenario",
             "sections", "interr", "overlaps", "exp-ovl", "lost", "exp-lost", "lease", "timeouts",
             "kills", "max-acq", "max-unl", "secs", "errors by code");
  g_print ("# %-14s %9" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT
           " %8" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT
           " %6" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT
           " %6" G_GINT64_FORMAT "ms %6" G_GINT64_FORMAT "ms %6.1f  %s%s\n",
           row->name, row->sections, row->interrupted, row->overlaps, row->expired_overlaps,
           row->lost, row->expired_lost, row->lease_lost, row->timeouts, row->kills,
           row->max_acquire_ms, row->max_unlock_ms, row->duration_ms / 1000.0, errors->str,
           row->passed ? "" : "  FAILED");
}

static void
row_free (gpointer data)
{
  Row *row = data;

  g_free (row->name);
  g_hash_table_unref (row->errors);
  g_free (row);
}

static void
on_alarm (int signum)
{
  static const char message[] = "stress: scenario exceeded its time cap; aborting\n";

  if (write (STDERR_FILENO, message, sizeof message - 1) < 0)
    _exit (99);
  _exit (99);
}

static double
scale_factor (void)
{
  const char *env = g_getenv ("REDISLOCK_STRESS_SCALE");
  double scale = env != NULL ? g_ascii_strtod (env, NULL) : 1.0;

  return scale > 0 && scale <= 1 ? scale : 1.0;
}

/* The progress file the workers count their sections in, in a temporary directory and
 * mapped shared, then the workers themselves. */
static void
start_workers (Controller *c)
{
  const Scenario *s = c->s;
  g_autoptr (GError) error = NULL;
  int fd;

  c->dir = g_dir_make_tmp ("redislock-stress-XXXXXX", &error);
  g_assert_no_error (error);
  c->progress_path = g_build_filename (c->dir, "progress", NULL);
  fd = open (c->progress_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, 4096), ==, 0);
  c->progress = mmap (NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  g_assert_true (c->progress != MAP_FAILED);
  close (fd);
  g_assert_cmpuint (s->procs, <=, 4096 / sizeof (guint64));

  c->children = g_new0 (Child, s->procs);
  c->start_us = g_get_monotonic_time ();
  for (guint i = 0; i < s->procs; i++)
    {
      g_assert_true (spawn_worker (c, i, &error));
      g_assert_no_error (error);
    }
}

/* The scenario's faults, one kind after the other, each followed by some progress;
 * CLIENT KILL runs in a thread of its own from the first fault for at least kill_ms.
 * Frozen workers are added to @victims ("p<index>"); the row gets the kill count. */
static void
inject_faults (Controller *c, GHashTable *victims, Row *row)
{
  const Scenario *s = c->s;
  Killer killer = { 0 };
  gint64 kill_until = g_get_monotonic_time () + s->kill_ms * 1000;

  if (s->kill_ms > 0)
    {
      killer.server = c->server;
      killer.thread = g_thread_new ("stress-killer", killer_main, &killer);
    }
  for (guint i = 0; i < s->pauses; i++)
    {
      guint victim = i % s->procs;
      g_hash_table_add (victims, g_strdup_printf ("p%u", victim));
      pause_worker (c, victim);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after worker %u resumed", victim);
    }
  for (guint i = 0; i < s->restarts; i++)
    {
      restart_server (c);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after restart %u", i + 1);
    }
  for (guint i = 0; i < s->outages; i++)
    {
      outage (c);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after outage %u", i + 1);
    }
  if (s->kill_ms > 0)
    {
      gint64 left = kill_until - g_get_monotonic_time ();
      if (left > 0)
        g_usleep (left); /* fault timing: keep killing for kill_ms */
      g_atomic_int_set (&killer.stop, 1);
      g_thread_join (killer.thread);
      row->kills = killer.kills;
      g_test_message ("%s: %" G_GUINT64_FORMAT " connections killed (%" G_GUINT64_FORMAT
                      " subscriptions) in %" G_GUINT64_FORMAT " rounds",
                      s->name, killer.kills, killer.pubsub_kills, killer.rounds);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after the kills stopped");
    }
}

/* Once every worker has got going: the faults, then work until at least @min_sections
 * sections are done and POST_FAULT_SECTIONS more after the last fault, within the
 * scenario's time cap. */
static void
run_workload (Controller *c, GHashTable *victims, Row *row, guint64 min_sections)
{
  const Scenario *s = c->s;
  guint64 after;

  if (!wait_started (c, 10, 60000))
    {
      problem (c, "the workers did not all get going: %" G_GUINT64_FORMAT " sections in 60 s",
               progress_total (c));
      return;
    }
  inject_faults (c, victims, row);
  after = MAX (
      min_sections,
      progress_total (c)
          + (s->kill_ms + s->pauses + s->restarts + s->outages > 0 ? POST_FAULT_SECTIONS : 0));
  if (!wait_progress (c, after,
                      MAX (1000, s->cap_ms - (g_get_monotonic_time () - c->start_us) / 1000)))
    problem (c, "%" G_GUINT64_FORMAT " sections by the time cap, wanted %" G_GUINT64_FORMAT,
             progress_total (c), after);
}

static void
collected_init (Collected *col)
{
  col->victims = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  col->lease_lost = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  col->stops = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  col->overlaps = g_ptr_array_new_with_free_func (g_free);
  col->clobbers = g_ptr_array_new_with_free_func (g_free);
  col->failures = g_ptr_array_new_with_free_func (g_free);
  tally_init (&col->tally);
}

static void
collected_clear (Collected *col)
{
  tally_clear (&col->tally);
  g_hash_table_unref (col->lease_lost);
  g_hash_table_unref (col->stops);
  g_hash_table_unref (col->victims);
  g_ptr_array_unref (col->overlaps);
  g_ptr_array_unref (col->clobbers);
  g_ptr_array_unref (col->failures);
}

/* The scenario's row, printed and kept for the summary table; its problems as test
 * messages, the first one in the failure. */
static void
report_scenario (Controller *c, Row *row)
{
  const char *name = c->s->name;

  row->passed = c->problems->len == 0;
  print_row (row, TRUE);
  g_ptr_array_add (summary_rows, row);
  for (guint i = 0; i < c->problems->len; i++)
    g_test_message ("%s: %s", name, (const char *)g_ptr_array_index (c->problems, i));
  if (c->problems->len > 0)
    g_test_fail_printf ("%s: %u problems, the first: %s", name, c->problems->len,
                        (const char *)g_ptr_array_index (c->problems, 0));
}

static void
controller_clear (Controller *c)
{
  g_clear_pointer (&c->redis, redisFree);
  munmap (c->progress, 4096);
  g_unlink (c->progress_path);
  g_rmdir (c->dir);
  g_free (c->progress_path);
  g_free (c->dir);
  g_free (c->children);
  g_ptr_array_unref (c->problems);
  redis_lock_test_server_free (c->server);
}

/* One scenario: its own server and workers, the faults, the workers' reports, the
 * verdicts (against the minimum number of sections scaled by REDISLOCK_STRESS_SCALE),
 * and its row; all within the scenario's time cap plus 3 minutes, or the alarm ends
 * the program. */
static void
run_scenario (gconstpointer data)
{
  const Scenario *s = data;
  Controller c = { 0 };
  Collected col = { 0 };
  Row *row = g_new0 (Row, 1);
  guint64 min_sections = (guint64)(s->min_sections * scale_factor ());
  Scenario scaled = *s;

  g_test_summary (s->summary);
  c.s = s;
  c.problems = g_ptr_array_new_with_free_func (g_free);
  c.server = redis_lock_test_server_new_or_skip (NULL);
  if (c.server == NULL)
    {
      g_ptr_array_unref (c.problems);
      g_free (row);
      return;
    }
  alarm ((unsigned)(s->cap_ms / 1000 + 180));

  start_workers (&c);
  collected_init (&col);
  run_workload (&c, col.victims, row, min_sections);
  collect_children (&c, &col);
  row->duration_ms = (g_get_monotonic_time () - c.start_us) / 1000;
  row->name = g_strdup (s->name);
  row->errors = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  scaled.min_sections = min_sections;
  c.s = &scaled;
  check_scenario (&c, &col, row);
  c.s = s;
  alarm (0);

  report_scenario (&c, row);
  collected_clear (&col);
  controller_clear (&c);
}

/* A holder frozen past its TTL while another thread of its registry waits for the
 * lock: once resumed, its unlock must report LEASE_LOST and the waiter must not be
 * handed a lease another registry now owns. Three rounds, since the outcome can depend
 * on whether the holder or its registry's watchdog runs first after the freeze. */
static void
test_frozen_holder_waiter (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GPtrArray) failures = g_ptr_array_new_with_free_func (g_free);

  g_test_summary (
      "A holder frozen (SIGSTOP) past its lease while a thread of its registry waits "
      "for the lock: after another registry takes the key, the holder's unlock reports "
      "LEASE_LOST and the waiter never holds the lock while the key is someone else's.");
  server = redis_lock_test_server_new_or_skip (NULL);
  if (server == NULL)
    return;

  for (guint round = 0; round < 3; round++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (RedisLockRegistry) other = NULL;
      g_autoptr (RedisLock) lock = NULL;
      g_autofree char *url_arg
          = g_strdup_printf ("--url=%s", redis_lock_test_server_get_url (server));
      g_autofree char *socket_arg
          = g_strdup_printf ("--socket=%s", redis_lock_test_server_get_socket_path (server));
      const char *argv[] = { self_exe, "--probe", url_arg, socket_arg, "--stop-ttl=150", NULL };
      g_autoptr (GString) output = g_string_new (NULL);
      gboolean stopped = FALSE, taken;
      gint64 deadline;
      Child child = { 0 };
      char buf[1024];
      ssize_t n;
      int status;

      g_assert_true (g_spawn_async_with_pipes (NULL, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                               NULL, NULL, &child.pid, NULL, &child.stdout_fd, NULL,
                                               &error));
      g_assert_no_error (error);
      deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
      while (!stopped && g_get_monotonic_time () < deadline)
        {
          pid_t r = waitpid (child.pid, &status, WNOHANG | WUNTRACED);
          if (r == child.pid && !WIFSTOPPED (status))
            break;
          stopped = r == child.pid;
          if (!stopped)
            g_usleep (2 * 1000);
        }
      if (!stopped)
        {
          kill (child.pid, SIGKILL);
          g_error ("the probe process did not freeze");
        }
      g_usleep (500 * 1000); /* fault timing: frozen well past the 150 ms lease */
      other = redis_lock_registry_new (redis_lock_test_server_get_url (server), STRESS_REGISTRY_KEY,
                                       &error);
      g_assert_no_error (error);
      lock = test_obtain (other, "probe");
      taken = redis_lock_try_lock_for (lock, 2000, NULL, &error);
      g_assert_no_error (error);
      g_assert_true (taken);
      kill (child.pid, SIGCONT);
      g_usleep (300 * 1000); /* fault timing: the other owner keeps the key a while */
      g_assert_true (redis_lock_unlock (lock, &error));
      g_assert_no_error (error);

      while ((n = read (child.stdout_fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
          g_string_append_len (output, buf, n);
      close (child.stdout_fd);
      waitpid (child.pid, &status, 0);
      g_spawn_close_pid (child.pid);
      g_test_message ("round %u: %s", round + 1, output->str);
      g_assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
      g_assert_nonnull (strstr (output->str, "end\n"));
      if (strstr (output->str, "holder unlock LEASE_LOST\n") == NULL)
        g_ptr_array_add (failures,
                         g_strdup_printf ("round %u: the frozen holder's unlock did not report "
                                          "LEASE_LOST",
                                          round + 1));
      if (strstr (output->str, "key owner OTHER") != NULL)
        g_ptr_array_add (failures, g_strdup_printf ("round %u: the waiter was given the lock while "
                                                    "another registry owned the key",
                                                    round + 1));
    }
  for (guint i = 0; i < failures->len; i++)
    g_test_message ("%s", (const char *)g_ptr_array_index (failures, i));
  if (failures->len > 0)
    g_test_fail_printf ("%s (and %u more)", (const char *)g_ptr_array_index (failures, 0),
                        failures->len - 1);
}

/* The outermost unlock whose release ran in Redis but whose reply was lost (its
 * connection killed right after): the lease was released by this very unlock, nobody
 * else owned the key, so LEASE_LOST ("the data may have been changed concurrently")
 * would be a false alarm. CONNECTION (outcome unknown) or success are both honest.
 * The server is frozen while the release and then the CLIENT KILL are queued, so on
 * resume it usually runs the release first; ten rounds. */
typedef struct
{
  RedisLock *lock;
  TestSync sync;
  gint stage; /* 1: locked, 2: unlock now, 3: unlocked; under sync */
  gint tid;   /* atomic */
  gboolean ok;
  GError *error;
} KilledRelease;

static gpointer
killed_release_main (gpointer data)
{
  KilledRelease *k = data;
  GError *error = NULL;

  g_assert_true (redis_lock_lock (k->lock, &error));
  g_assert_no_error (error);
  test_sync_lock (&k->sync);
  k->stage = 1;
  test_sync_broadcast (&k->sync);
  while (k->stage < 2)
    test_sync_wait (&k->sync);
  test_sync_unlock (&k->sync);
  g_atomic_int_set (&k->tid, test_thread_id ());
  k->ok = redis_lock_unlock (k->lock, &k->error);
  test_sync_lock (&k->sync);
  k->stage = 3;
  test_sync_broadcast (&k->sync);
  test_sync_unlock (&k->sync);
  return NULL;
}

static void
test_killed_release_reply (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  guint false_alarms = 0;

  g_test_summary (
      "An unlock whose release ran but whose reply was lost to CLIENT KILL never "
      "reports LEASE_LOST: the lease was released by that unlock, nobody else owned it.");
  server = redis_lock_test_server_new_or_skip (NULL);
  if (server == NULL)
    return;

  for (guint round = 0; round < 10; round++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (RedisLockRegistry) registry = redis_lock_registry_new (
          redis_lock_test_server_get_url (server), STRESS_REGISTRY_KEY, &error);
      redisContext *c = named_connection (server, "stress-controller");
      KilledRelease k = { 0 };
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (long long));
      g_auto (GStrv) lines = NULL;
      redisReply *reply;
      GThread *thread;
      long long self;
      int done = 0;

      g_assert_no_error (error);
      g_assert_nonnull (c);
      k.lock = test_obtain (registry, "released");
      test_sync_init (&k.sync);
      thread = g_thread_new ("killed-release", killed_release_main, &k);
      test_sync_lock (&k.sync);
      while (k.stage < 1)
        test_sync_wait (&k.sync);
      test_sync_unlock (&k.sync);

      /* The registry's only connection now: the pooled one the release will reuse. */
      reply = redisCommand (c, "CLIENT ID");
      self = reply->integer;
      freeReplyObject (reply);
      reply = redisCommand (c, "CLIENT LIST");
      lines = g_strsplit (reply->str, "\n", -1);
      freeReplyObject (reply);
      for (guint i = 0; lines[i] != NULL; i++)
        if (g_str_has_prefix (lines[i], "id="))
          {
            long long id = g_ascii_strtoll (lines[i] + 3, NULL, 10);
            if (id != self)
              g_array_append_val (ids, id);
          }
      g_assert_cmpuint (ids->len, ==, 1);

      redis_lock_test_server_pause (server);
      test_sync_lock (&k.sync);
      k.stage = 2;
      test_sync_broadcast (&k.sync);
      test_sync_unlock (&k.sync);
      while (g_atomic_int_get (&k.tid) == 0)
        g_usleep (1000);
      /* The release is written and the thread waits for its reply. */
      g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&k.tid), 10000));
      redisAppendCommand (c, "CLIENT KILL ID %lld", g_array_index (ids, long long, 0));
      while (!done)
        g_assert_cmpint (redisBufferWrite (c, &done), ==, REDIS_OK);
      redis_lock_test_server_resume (server);
      g_thread_join (thread);
      g_assert_cmpint (redisGetReply (c, (void **)&reply), ==, REDIS_OK);
      freeReplyObject (reply);
      g_assert_cmpint (test_redis_integer (c, "EXISTS " STRESS_REGISTRY_KEY ":released"), ==, 0);
      g_test_message ("round %u: unlock %s", round + 1, k.ok ? "succeeded" : k.error->message);
      if (g_error_matches (k.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST))
        false_alarms++;
      g_clear_error (&k.error);
      redis_lock_unref (k.lock);
      test_sync_clear (&k.sync);
      redisFree (c);
    }
  if (false_alarms > 0)
    g_test_fail_printf (
        "%u of 10 unlocks reported LEASE_LOST for a lease they had released themselves",
        false_alarms);
}

/* ------------------------------------------------------------------------------------- */
/* Profiles. */

/* make check: about 20 s on two cores, >= 5 000 sections, every fault once, small. */
static const Scenario quick_scenarios[] = {
  { .name = "baseline",
    .summary = "3 processes x 2 registries x 3 threads on 4 names, 10 000 sections, no fault: "
               "no overlap, no lost update, no error, no timeout, counters exact, no lock key "
               "left.",
    .procs = 3,
    .registries = 2,
    .threads = 3,
    .names = 4,
    .ttl_ms = 10000,
    .wait_ms = 10000,
    .use_lock = TRUE,
    .min_sections = 10000,
    .cap_ms = 60000 },
  { .name = "client-kill",
    .summary = "CLIENT KILL of random library connections (data and subscription) every 100 ms "
               "for 2 s: calls may fail with CONNECTION, exclusion holds, work goes on.",
    .procs = 2,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 600,
    .kill_ms = 2000,
    .cap_ms = 60000 },
  { .name = "pause-worker",
    .summary = "A worker frozen (SIGSTOP) inside a section for 6x its lease TTL, until another "
               "worker enters: its unlock reports LEASE_LOST, the overlap it causes is an "
               "expired-lease one, nobody else loses a lease.",
    .procs = 3,
    .registries = 1,
    .threads = 2,
    .names = 3,
    .ttl_ms = 20000,
    .wait_ms = 1000,
    .use_lock = FALSE,
    .min_sections = 500,
    .pauses = 1,
    .stop_ms = 1200,
    .stop_ttl_ms = 200,
    .cap_ms = 60000 },
  { .name = "restart",
    .summary
    = "redis-server killed and restarted 3 times while locks are held: holders see "
      "LEASE_LOST or CONNECTION, waiters recover, no overlap, counters exact per server run.",
    .procs = 2,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 2000,
    .restarts = 3,
    .cap_ms = 60000 },
  { .name = "unreachable",
    .summary
    = "redis-server frozen for 2 s with 500 ms timeouts: calls fail with CONNECTION within "
      "their bound, nothing hangs, work resumes.",
    .procs = 2,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 500,
    .outages = 1,
    .outage_ms = 2000,
    .cap_ms = 60000 },
  { .name = "combined",
    .summary = "Every fault at once: kills throughout, a frozen worker, a restart and an outage.",
    .procs = 3,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 800,
    .kill_ms = 2000,
    .pauses = 1,
    .stop_ms = 1200,
    .stop_ttl_ms = 200,
    .restarts = 1,
    .outages = 1,
    .outage_ms = 1500,
    .cap_ms = 90000 },
};

/* make stress: >= 100 000 sections, every fault several times. */
static const Scenario long_scenarios[] = {
  { .name = "baseline",
    .summary = "4 processes x 2 registries x 4 threads on 8 names, no fault, 60 000 sections.",
    .procs = 4,
    .registries = 2,
    .threads = 4,
    .names = 8,
    .ttl_ms = 10000,
    .wait_ms = 10000,
    .use_lock = TRUE,
    .min_sections = 60000,
    .cap_ms = 600000 },
  { .name = "client-kill",
    .summary = "CLIENT KILL every 100 ms for 20 s.",
    .procs = 3,
    .registries = 2,
    .threads = 3,
    .names = 6,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 10000,
    .kill_ms = 20000,
    .cap_ms = 600000 },
  { .name = "pause-worker",
    .summary = "Three workers frozen in turn, 2 s each, inside sections with a 300 ms TTL.",
    .procs = 4,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 20000,
    .wait_ms = 1000,
    .use_lock = FALSE,
    .min_sections = 6000,
    .pauses = 3,
    .stop_ms = 2000,
    .stop_ttl_ms = 300,
    .cap_ms = 600000 },
  { .name = "restart",
    .summary = "redis-server killed and restarted 5 times while locks are held.",
    .procs = 3,
    .registries = 2,
    .threads = 3,
    .names = 6,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 10000,
    .restarts = 5,
    .cap_ms = 600000 },
  { .name = "unreachable",
    .summary = "redis-server frozen twice for 3 s with 500 ms timeouts.",
    .procs = 3,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 6000,
    .outages = 2,
    .outage_ms = 3000,
    .cap_ms = 600000 },
  { .name = "combined",
    .summary = "Kills for 20 s, two frozen workers, three restarts and two outages.",
    .procs = 4,
    .registries = 2,
    .threads = 3,
    .names = 6,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 15000,
    .kill_ms = 20000,
    .pauses = 2,
    .stop_ms = 2000,
    .stop_ttl_ms = 300,
    .restarts = 3,
    .outages = 2,
    .outage_ms = 2500,
    .cap_ms = 900000 },
};

static void
print_summary (const char *profile)
{
  Row total = { 0 };
  GHashTableIter iter;
  gpointer key, value;

  if (summary_rows->len == 0)
    return;
  total.name = (char *)"TOTAL";
  total.errors = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  total.passed = TRUE;
  g_print ("#\n# redislock stress, %s profile\n", profile);
  for (guint i = 0; i < summary_rows->len; i++)
    {
      Row *row = g_ptr_array_index (summary_rows, i);

      print_row (row, i == 0);
      total.sections += row->sections;
      total.interrupted += row->interrupted;
      total.overlaps += row->overlaps;
      total.expired_overlaps += row->expired_overlaps;
      total.lost += row->lost;
      total.expired_lost += row->expired_lost;
      total.lease_lost += row->lease_lost;
      total.timeouts += row->timeouts;
      total.kills += row->kills;
      total.max_acquire_ms = MAX (total.max_acquire_ms, row->max_acquire_ms);
      total.max_unlock_ms = MAX (total.max_unlock_ms, row->max_unlock_ms);
      total.duration_ms += row->duration_ms;
      total.passed &= row->passed;
      g_hash_table_iter_init (&iter, row->errors);
      while (g_hash_table_iter_next (&iter, &key, &value))
        {
          guint64 *sum = g_hash_table_lookup (total.errors, key);
          if (sum == NULL)
            {
              sum = g_new0 (guint64, 1);
              g_hash_table_insert (total.errors, g_strdup (key), sum);
            }
          *sum += *(guint64 *)value;
        }
    }
  print_row (&total, FALSE);
  g_print (
      "# (interr: sections cut short by a broken connection; exp-ovl / exp-lost: overlaps and\n"
      "#  lost updates involving a section whose lease expired while its worker was frozen;\n"
      "#  lease: unlocks that reported LEASE_LOST; max-acq / max-unl: longest bounded call)\n");
  g_hash_table_unref (total.errors);
}

/* The hidden modes this program is run again in: a worker process of a scenario
 * (--worker) or the frozen-holder probe (--probe), with the options the controller
 * passed. */
static int
hidden_mode_main (WorkerOptions *opt, gboolean probe)
{
  int rc;

  if (probe)
    {
      if (opt->url == NULL || opt->socket_path == NULL || opt->stop_ttl_ms <= 0)
        {
          g_printerr ("stress: incomplete probe options\n");
          return 2;
        }
      rc = probe_main (opt);
      g_free (opt->url);
      g_free (opt->socket_path);
      return rc;
    }
  if (opt->url == NULL || opt->socket_path == NULL || opt->progress_path == NULL
      || opt->registries <= 0 || opt->threads <= 0 || opt->names <= 0 || opt->ttl_ms <= 0
      || opt->max_ms <= 0)
    {
      g_printerr ("stress: incomplete worker options\n");
      return 2;
    }
  if (opt->stop_ttl_ms <= 0)
    opt->stop_ttl_ms = opt->ttl_ms;
  rc = worker_main (opt);
  g_free (opt->url);
  g_free (opt->socket_path);
  g_free (opt->progress_path);
  return rc;
}

int
main (int argc, char **argv)
{
  gboolean long_profile = FALSE, worker = FALSE, probe = FALSE;
  WorkerOptions opt = { 0 };
  const GOptionEntry entries[] = {
    { "long", 0, 0, G_OPTION_ARG_NONE, &long_profile,
      "Run the long profile (>= 100 000 sections, every fault several times)", NULL },
    { "worker", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &worker, NULL, NULL },
    { "probe", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &probe, NULL, NULL },
    { "index", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.index, NULL, NULL },
    { "url", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &opt.url, NULL, NULL },
    { "socket", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &opt.socket_path, NULL, NULL },
    { "progress", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &opt.progress_path, NULL, NULL },
    { "registries", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.registries, NULL, NULL },
    { "threads", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.threads, NULL, NULL },
    { "names", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.names, NULL, NULL },
    { "ttl", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.ttl_ms, NULL, NULL },
    { "timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.timeout_ms, NULL, NULL },
    { "wait", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.wait_ms, NULL, NULL },
    { "stop-ttl", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.stop_ttl_ms, NULL, NULL },
    { "stop-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.stop_ms, NULL, NULL },
    { "max-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.max_ms, NULL, NULL },
    { "use-lock", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &opt.use_lock, NULL, NULL },
    { NULL },
  };
  GOptionContext *context = g_option_context_new (NULL);
  g_autoptr (GError) error = NULL;
  const Scenario *scenarios;
  gsize n_scenarios;
  char **args = NULL;
  int rc;

  g_option_context_set_summary (context,
                                "Stress and fault harness for redislock. Without --long, "
                                "runs the quick profile; GLib test options (-p, --tap, -v) apply.");
  g_option_context_set_ignore_unknown_options (context, TRUE);
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("stress: %s\n", error->message);
      return 2;
    }
  g_option_context_free (context);

  if (probe || worker)
    return hidden_mode_main (&opt, probe);

  /* The controller writes to workers' pipes; a worker that died must not kill it. */
  signal (SIGPIPE, SIG_IGN);
  signal (SIGALRM, on_alarm);
  self_exe = g_file_read_link ("/proc/self/exe", NULL);
  if (self_exe == NULL)
    self_exe = g_strdup (argv[0]);

  /* The long profile reports every scenario and the summary table even when one fails. */
  if (long_profile)
    {
      args = g_new0 (char *, argc + 2);
      memcpy (args, argv, sizeof (char *) * argc);
      args[argc++] = (char *)"--keep-going";
      argv = args;
    }
  g_test_init (&argc, &argv, NULL);
  summary_rows = g_ptr_array_new_with_free_func (row_free);
  scenarios = long_profile ? long_scenarios : quick_scenarios;
  n_scenarios = long_profile ? G_N_ELEMENTS (long_scenarios) : G_N_ELEMENTS (quick_scenarios);
  for (gsize i = 0; i < n_scenarios; i++)
    {
      g_autofree char *path
          = g_strdup_printf ("/stress/%s/%s", long_profile ? "long" : "quick", scenarios[i].name);
      g_test_add_data_func (path, &scenarios[i], run_scenario);
    }
  g_test_add_func (long_profile ? "/stress/long/frozen-holder-waiter"
                                : "/stress/quick/frozen-holder-waiter",
                   test_frozen_holder_waiter);
  g_test_add_func (long_profile ? "/stress/long/killed-release-reply"
                                : "/stress/quick/killed-release-reply",
                   test_killed_release_reply);
  rc = g_test_run ();
  print_summary (long_profile ? "long" : "quick");
  g_ptr_array_unref (summary_rows);
  g_free (self_exe);
  g_free (args);
  return rc;
}
