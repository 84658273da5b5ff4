/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock.c: tests of the read-write lock (RedisRWLock): many readers or one writer,
 * across threads, registries and processes.
 *
 * Each behaviour runs on every store that holds read-write locks (`/redis/...`,
 * `/memory/...`, `/cluster/...`, `/tls/...`); a quorum registry refuses them with a
 * clear error (`/quorum/rwlock/...`), and the two-process case runs on Redis only.
 * Exclusion is checked with counters of the threads inside (readers together, a
 * writer alone), "one Redis request for the readers of a registry" with the
 * registry's acquisition count, "woken by notification" with a lease TTL far longer
 * than the wait allowed, and "a waiting writer blocks new readers" with the writer
 * provably waiting (its thread asleep in the kernel, or its mark in the store). The
 * server's faults (stopped, frozen) are rwlock-faults.c's.
 */
#include <string.h>
#include <unistd.h>

#include "rwlock-helpers.h"

/* ---- readers together, a writer alone ---- */

typedef struct
{
  RedisRWLock *lock;   /* all_readers_main() */
  RedisRWLock *locks[2]; /* mixed_main(): threads 0-2 use the first, 3-5 the second */
  guint readers;
  gint inside_readers; /* atomic */
  gint inside_writers; /* atomic */
  gint max_readers;    /* atomic */
  gint overlaps;       /* atomic: a writer saw anyone else inside, or a reader a writer */
  TestCounter **counters;
  guint rounds;
} Contention;

static void
note_max (gint *max, gint value)
{
  gint old;

  while ((old = g_atomic_int_get (max)) < value)
    if (g_atomic_int_compare_and_exchange (max, old, value))
      break;
}

static void
all_readers_main (guint index, gpointer data)
{
  Contention *c = data;

  read_ok (c->lock);
  note_max (&c->max_readers, g_atomic_int_add (&c->inside_readers, 1) + 1);
  /* Stay until every reader is inside: only possible if they read at once. */
  TEST_WAIT_UNTIL (g_atomic_int_get (&c->max_readers) == (gint) c->readers, 10000);
  g_atomic_int_add (&c->inside_readers, -1);
  read_unlock_ok (c->lock);
}

static void
test_readers_share (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autofree char *rkey = NULL;
  Contention c = { 0 };
  guint64 before;

  g_test_summary ("Threads of one registry read at once and share one reader lease: one "
                  "acquisition in the store for all of them, released by the last");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = obtain_rw (fx->registry, NAME);
  rkey = reader_key (fx->registry, NAME);
  c.lock = lock;
  c.readers = 6;
  before = test_stats (fx->registry).acquisitions;
  test_run_threads (c.readers, all_readers_main, &c);
  g_assert_cmpint (g_atomic_int_get (&c.max_readers), ==, 6);
  g_assert_cmpuint (test_stats (fx->registry).acquisitions - before, ==, 1);
  g_assert_false (test_store_exists (fx, rkey));
}

static void
mixed_main (guint index, gpointer data)
{
  Contention *c = data;
  RedisRWLock *lock = c->locks[index / 3];

  for (guint i = 0; i < c->rounds; i++)
    {
      if (index % 3 == 0)
        {
          gint64 value;
          write_ok (lock);
          if (g_atomic_int_add (&c->inside_writers, 1) != 0
              || g_atomic_int_get (&c->inside_readers) != 0)
            g_atomic_int_inc (&c->overlaps);
          value = test_counter_get (c->counters[index]);
          g_thread_yield ();
          test_counter_set (c->counters[index], value + 1);
          g_atomic_int_add (&c->inside_writers, -1);
          write_unlock_ok (lock);
        }
      else
        {
          read_ok (lock);
          note_max (&c->max_readers, g_atomic_int_add (&c->inside_readers, 1) + 1);
          if (g_atomic_int_get (&c->inside_writers) != 0)
            g_atomic_int_inc (&c->overlaps);
          g_thread_yield ();
          g_atomic_int_add (&c->inside_readers, -1);
          read_unlock_ok (lock);
        }
    }
}

static void
test_writer_exclusive (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  TestCounter *counters[6];
  Contention c = { 0 };

  g_test_summary ("Writers and readers of two registries in many threads: a writer is alone "
                  "inside (no reader, no other writer), no increment of its counter is lost, "
                  "and readers of both registries are inside together");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  for (guint i = 0; i < G_N_ELEMENTS (counters); i++)
    counters[i] = test_counter_open (fx, "rw-counter");
  c = (Contention){ .locks = { lock, lock2 }, .counters = counters, .rounds = 15 };
  test_run_threads (6, mixed_main, &c);
  g_assert_cmpint (g_atomic_int_get (&c.overlaps), ==, 0);
  /* Threads 0 and 3 write 15 times each. */
  g_assert_cmpint (test_counter_get (counters[0]), ==, 30);
  for (guint i = 0; i < G_N_ELEMENTS (counters); i++)
    test_counter_free (counters[i]);
}

/* ---- re-entry, downgrade, upgrade ---- */

static void
test_reentry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *wkey = rw_key (NAME, "w");
  g_autofree char *owner = NULL;
  guint64 before;

  g_test_summary ("Reads and writes are re-entrant per thread without store requests; the "
                  "writing thread may read; unlock by a thread without a hold is NOT_OWNER");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = obtain_rw (fx->registry, NAME);
  g_assert_cmpstr (redis_rw_lock_get_name (lock), ==, NAME);
  g_assert_false (redis_rw_lock_read_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);
  g_assert_false (redis_rw_lock_write_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&error);

  before = test_stats (fx->registry).acquisitions + test_stats (fx->registry).releases;
  read_ok (lock);
  read_ok (lock);
  read_ok (lock);
  read_unlock_ok (lock);
  read_unlock_ok (lock);
  read_unlock_ok (lock);
  g_assert_cmpuint (test_stats (fx->registry).acquisitions + test_stats (fx->registry).releases
                        - before,
                    ==, 2);

  write_ok (lock);
  owner = test_store_get_owner (fx, wkey);
  test_assert_value_of (owner, fx->registry);
  before = test_stats (fx->registry).round_trips;
  write_ok (lock);
  read_ok (lock);
  read_unlock_ok (lock);
  write_unlock_ok (lock);
  g_assert_cmpuint (test_stats (fx->registry).round_trips - before, ==, 0);
  g_assert_true (test_store_exists (fx, wkey));
  write_unlock_ok (lock);
  g_assert_false (test_store_exists (fx, wkey));
}

static void
test_downgrade (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  g_autofree char *wkey = rw_key (NAME, "w");

  g_test_summary ("Write, read, write unlock leaves the thread reading: other registries may "
                  "read but not write until it stops");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  write_ok (lock);
  read_ok (lock);
  write_unlock_ok (lock);
  g_assert_false (test_store_exists (fx, wkey));
  g_assert_false (redis_rw_lock_is_lease_lost (lock));
  assert_not_acquired (lock2, TRUE, 100);
  read_ok (lock2);
  read_unlock_ok (lock2);
  read_unlock_ok (lock);
  write_ok (lock2);
  write_unlock_ok (lock2);
}

static void
test_upgrade_refused (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *rkey = NULL;

  g_test_summary ("A reading thread that asks to write fails at once with INVALID and keeps "
                  "reading");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = obtain_rw (fx->registry, NAME);
  rkey = reader_key (fx->registry, NAME);
  read_ok (lock);
  g_assert_false (redis_rw_lock_try_write_lock_for (lock, -1, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_true (test_store_exists (fx, rkey));
  read_unlock_ok (lock);
  g_assert_false (test_store_exists (fx, rkey));
  write_ok (lock);
  write_unlock_ok (lock);
}

/* ---- registries ---- */

static void
test_two_registries (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  g_autoptr (RedisLock) plain = NULL;

  g_test_summary ("Two registries read together; a writer of one excludes readers and "
                  "writers of the other; a plain lock of the same name is independent");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  g_assert_true (obtain_rw (fx->registry, NAME) == lock);
  redis_rw_lock_unref (lock);

  read_ok (lock);
  read_ok (lock2);
  read_unlock_ok (lock2);
  assert_not_acquired (lock2, TRUE, 0);
  read_unlock_ok (lock);

  write_ok (lock);
  assert_not_acquired (lock2, FALSE, 0);
  assert_not_acquired (lock2, TRUE, 100);
  plain = test_obtain (other, NAME);
  test_lock_ok (plain);
  test_unlock_ok (plain);
  write_unlock_ok (lock);
  write_ok (lock2);
  write_unlock_ok (lock2);
}

/* ---- waiting ---- */

static void
test_waiting_writer_blocks_local_readers (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  RwTaker writer;
  GThread *thread;

  g_test_summary ("A thread waiting to write keeps new readers of its registry out, though "
                  "only readers hold the lock, and gets it when they leave");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = obtain_rw (fx->registry, NAME);
  read_ok (lock);
  thread = rw_taker_start (&writer, lock, TRUE, 20000, FALSE, NULL);
  rw_taker_wait_blocked (&writer);
  {
    RwTaker reader;
    GThread *t = rw_taker_start (&reader, lock, FALSE, 150, FALSE, NULL);
    g_assert_true (test_sync_wait_flag (&reader.sync, &reader.returned, 10000));
    g_assert_false (reader.result);
    g_assert_no_error (reader.error);
    rw_taker_release_join (&reader, t);
  }
  read_unlock_ok (lock);
  g_assert_true (test_sync_wait_flag (&writer.sync, &writer.returned, 10000));
  g_assert_true (writer.result);
  rw_taker_release_join (&writer, thread);
}

static void
test_waiting_writer_blocks_remote_readers (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) writer_registry = NULL, late_registry = NULL;
  g_autoptr (RedisRWLock) lock = NULL, wlock = NULL, late = NULL;
  g_autofree char *mark = rw_key (NAME, "ww");
  RwTaker writer;
  GThread *thread;
  gint64 released_ms;

  g_test_summary ("A writer waiting in another registry keeps new readers of every registry "
                  "out (a registry whose reader lease is held lets no new thread join it), and "
                  "is woken by the readers' release (not their TTL)");
  TEST_SKIP_IF_NO_STORE (fx);

  writer_registry = test_registry_new (fx);
  late_registry = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  wlock = obtain_rw (writer_registry, NAME);
  late = obtain_rw (late_registry, NAME);
  read_ok (lock);
  thread = rw_taker_start (&writer, wlock, TRUE, 20000, TRUE, NULL);
  TEST_WAIT_UNTIL (test_store_exists (fx, mark), 10000);
  assert_not_acquired (late, FALSE, 150);
  /* Nor does a new thread of the registry whose reader lease is held join it, once the
   * mark is heard there; the threads reading already are not disturbed. */
  TEST_WAIT_UNTIL (!other_thread_reads (lock), 10000);
  g_assert_false (other_thread_reads (lock));
  read_ok (lock);
  read_unlock_ok (lock);
  released_ms = test_now_ms ();
  read_unlock_ok (lock);
  g_assert_true (test_sync_wait_flag (&writer.sync, &writer.returned, 10000));
  g_assert_true (writer.result);
  /* The TTL is a minute: only the notification could wake it this soon. */
  g_assert_cmpint (writer.returned_ms - released_ms, <, 5000);
  g_assert_false (test_store_exists (fx, mark));
  rw_taker_release_join (&writer, thread);
  read_ok (late);
  read_unlock_ok (late);
}

static void
test_woken_by_notification (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  RwTaker readers[2];
  GThread *threads[2];
  gint64 released_ms;

  g_test_summary ("Readers of another registry waiting for a writer are woken by its unlock "
                  "notification, long before the lease TTL");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  write_ok (lock);
  for (guint i = 0; i < 2; i++)
    {
      threads[i] = rw_taker_start (&readers[i], lock2, FALSE, 30000, TRUE, NULL);
      rw_taker_wait_blocked (&readers[i]);
    }
  TEST_WAIT_UNTIL (test_stats (other).contended_attempts >= 1, 10000);
  released_ms = test_now_ms ();
  write_unlock_ok (lock);
  for (guint i = 0; i < 2; i++)
    {
      g_assert_true (test_sync_wait_flag (&readers[i].sync, &readers[i].returned, 10000));
      g_assert_true (readers[i].result);
      g_assert_cmpint (readers[i].returned_ms - released_ms, <, 5000);
    }
  /* Both read at once now. */
  for (guint i = 0; i < 2; i++)
    rw_taker_release_join (&readers[i], threads[i]);
}

static void
test_timeout (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  gint64 start;

  g_test_summary ("A read or write that cannot be had within its wait returns FALSE without "
                  "an error after that wait, locally and across registries");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  write_ok (lock);
  start = test_now_ms ();
  assert_not_acquired (lock2, FALSE, 300);
  assert_not_acquired (lock2, TRUE, 300);
  g_assert_cmpint (test_now_ms () - start, <, 5000);
  {
    RwTaker local;
    GThread *t = rw_taker_start (&local, lock, FALSE, 200, FALSE, NULL);
    g_assert_true (test_sync_wait_flag (&local.sync, &local.returned, 10000));
    g_assert_false (local.result);
    g_assert_no_error (local.error);
    rw_taker_release_join (&local, t);
  }
  write_unlock_ok (lock);
}

static void
test_cancel (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  g_autoptr (GCancellable) remote_cancellable = g_cancellable_new ();
  g_autoptr (GCancellable) local_cancellable = g_cancellable_new ();
  RwTaker remote, local;
  GThread *t1, *t2;

  g_test_summary ("Cancelling a waiting write ends it with G_IO_ERROR_CANCELLED, in the "
                  "store's wait and in the local one");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  read_ok (lock);
  t1 = rw_taker_start (&remote, lock2, TRUE, 30000, FALSE, remote_cancellable);
  rw_taker_wait_blocked (&remote);
  TEST_WAIT_UNTIL (test_stats (other).contended_attempts >= 1, 10000);
  t2 = rw_taker_start (&local, lock, TRUE, 30000, FALSE, local_cancellable);
  rw_taker_wait_blocked (&local);
  g_cancellable_cancel (remote_cancellable);
  g_cancellable_cancel (local_cancellable);
  g_assert_true (test_sync_wait_flag (&remote.sync, &remote.returned, 10000));
  g_assert_true (test_sync_wait_flag (&local.sync, &local.returned, 10000));
  g_assert_false (remote.result);
  g_assert_error (remote.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_false (local.result);
  g_assert_error (local.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  rw_taker_release_join (&remote, t1);
  rw_taker_release_join (&local, t2);
  /* The cancelled writers no longer hold readers back. */
  read_ok (lock2);
  read_unlock_ok (lock2);
  read_unlock_ok (lock);
}

/* ---- lease loss ---- */

static void
lease_lost_case (TestFixture *fx, RedisRWLock *lock, gboolean write, TestLeaseLost *lost)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *key = write ? rw_key (NAME, "w") : reader_key (fx->registry, NAME);
  guint calls = test_lease_lost_calls (lost);
  GCancellable *cancellable;

  if (write)
    write_ok (lock);
  else
    read_ok (lock);
  cancellable = redis_rw_lock_get_lease_cancellable (lock);
  g_assert_nonnull (cancellable);
  g_assert_false (g_cancellable_is_cancelled (cancellable));
  g_assert_false (redis_rw_lock_is_lease_lost (lock));
  g_assert_true (test_store_delete (fx, key));
  TEST_WAIT_UNTIL (redis_rw_lock_is_lease_lost (lock), 10000);
  /* The loss is marked first, then reported: the cancellable follows. */
  TEST_WAIT_UNTIL (g_cancellable_is_cancelled (cancellable), 10000);
  TEST_WAIT_UNTIL (test_lease_lost_calls (lost) > calls, 10000);
  test_sync_lock (&lost->sync);
  g_assert_null (lost->lock);
  test_sync_unlock (&lost->sync);
  if (write)
    g_assert_false (redis_rw_lock_write_unlock (lock, &error));
  else
    g_assert_false (redis_rw_lock_read_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_assert_false (redis_rw_lock_is_lease_lost (lock));
  g_assert_null (redis_rw_lock_get_lease_cancellable (lock));
}

static void
test_lease_lost (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  TestLeaseLost lost;

  g_test_summary ("A reader or writer lease deleted behind its holder is reported: "
                  "is_lease_lost, the lease cancellable, the callback (with NULL); the unlock "
                  "fails LEASE_LOST and the lock stays usable");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&lost);
  redis_lock_registry_set_expire_after_ms (fx->registry, 1500);
  redis_lock_registry_set_lease_lost_callback (fx->registry, test_lease_lost_cb, &lost, NULL);
  lock = obtain_rw (fx->registry, NAME);
  lease_lost_case (fx, lock, FALSE, &lost);
  lease_lost_case (fx, lock, TRUE, &lost);
  read_ok (lock);
  read_unlock_ok (lock);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&lost);
}

/* ---- stores ---- */

static void
test_store_support (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  gboolean ok;

  g_test_summary ("Every store holds read-write locks but the quorum store, which refuses "
                  "them with INVALID naming the topology; a name whose keys could not share "
                  "a Cluster slot is INVALID");
  TEST_SKIP_IF_NO_STORE (fx);

  g_assert_null (redis_lock_registry_obtain_rw (fx->registry, "}x", &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_null (redis_lock_registry_obtain_rw (fx->registry, "", &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);

  lock = obtain_rw (fx->registry, NAME);
  ok = redis_rw_lock_try_read_lock_for (lock, 0, NULL, &error);
  if (fx->store == TEST_STORE_QUORUM)
    {
      g_assert_false (ok);
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_assert_nonnull (strstr (error->message, "quorum"));
      g_clear_error (&error);
      g_assert_false (redis_rw_lock_try_write_lock_for (lock, 0, NULL, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      return;
    }
  g_assert_no_error (error);
  g_assert_true (ok);
  read_unlock_ok (lock);
}

static void
test_close (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *rkey = NULL;
  RwTaker waiter;
  GThread *thread;

  g_test_summary ("close() wakes a waiting writer with CLOSED, releases the reader lease and "
                  "tells its holder; the unlock fails CLOSED");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  rkey = reader_key (fx->registry, NAME);
  read_ok (lock2);
  read_ok (lock);
  thread = rw_taker_start (&waiter, lock2, TRUE, 30000, FALSE, NULL);
  rw_taker_wait_blocked (&waiter);
  redis_lock_registry_close (other);
  g_assert_true (test_sync_wait_flag (&waiter.sync, &waiter.returned, 10000));
  g_assert_error (waiter.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  rw_taker_release_join (&waiter, thread);
  g_assert_true (redis_rw_lock_is_lease_lost (lock2));
  g_assert_false (redis_rw_lock_read_unlock (lock2, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  read_unlock_ok (lock);
  g_assert_false (test_store_exists (fx, rkey));
}

/* ---- asynchronous calls ---- */

static void
test_async (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  AsyncResult r = { 0 };
  guint64 contended;

  g_test_summary ("The asynchronous read and write calls complete in the caller's main "
                  "context with the hold the caller's thread's, wait for holders of other "
                  "registries without blocking it, and can be cancelled");
  TEST_SKIP_IF_NO_STORE (fx);

  g_main_context_push_thread_default (context);
  other = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);

  r = (AsyncResult){ .lock = lock, .write = FALSE };
  redis_rw_lock_read_lock_async (lock, 5000, NULL, on_async_done, &r);
  async_wait (&r);
  g_assert_no_error (r.error);
  g_assert_true (r.result);
  read_ok (lock); /* re-entry: the hold is this thread's */
  read_unlock_ok (lock);
  read_unlock_ok (lock);

  /* Pending while another registry reads; this thread goes on meanwhile. */
  read_ok (lock2);
  r = (AsyncResult){ .lock = lock, .write = TRUE };
  redis_rw_lock_write_lock_async (lock, 20000, NULL, on_async_done, &r);
  TEST_WAIT_UNTIL (test_stats (fx->registry).contended_attempts >= 1, 10000);
  g_main_context_iteration (context, FALSE);
  g_assert_false (r.done);
  read_unlock_ok (lock2);
  async_wait (&r);
  g_assert_no_error (r.error);
  g_assert_true (r.result);
  write_unlock_ok (lock);

  /* Cancelled while waiting. */
  write_ok (lock2);
  contended = test_stats (fx->registry).contended_attempts;
  r = (AsyncResult){ .lock = lock, .write = FALSE };
  redis_rw_lock_read_lock_async (lock, 20000, cancellable, on_async_done, &r);
  TEST_WAIT_UNTIL (test_stats (fx->registry).contended_attempts > contended, 10000);
  g_cancellable_cancel (cancellable);
  async_wait (&r);
  g_assert_false (r.result);
  g_assert_error (r.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&r.error);
  write_unlock_ok (lock2);
  g_main_context_pop_thread_default (context);
}

static void
test_async_no_thread_per_call (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  const guint writers = 48, readers = 16;
  RwManyCall *calls = g_new0 (RwManyCall, writers + readers);
  RwMany m = { 0 };
  AsyncResult r = { 0 };
  RwTaker holder;
  GThread *thread;
  guint threads_before, threads_pending;

  g_test_summary ("64 pending read and write calls (writers behind another thread's write "
                  "hold, readers behind them) create no thread per call; local waits end at "
                  "their deadline or when cancelled; every call then takes its hold in turn, "
                  "all writers before any reader");
  TEST_SKIP_IF_NO_STORE (fx);

  g_main_context_push_thread_default (context);
  lock = obtain_rw (fx->registry, NAME);
  m = (RwMany){ .lock = lock, .expected_writes = writers };
  /* A first cycle starts what a registry starts with its first lease and async call. */
  r = (AsyncResult){ .lock = lock, .write = TRUE };
  redis_rw_lock_write_lock_async (lock, 5000, NULL, on_async_done, &r);
  async_wait (&r);
  g_assert_true (r.result);
  write_unlock_ok (lock);
  thread = rw_taker_start (&holder, lock, TRUE, 5000, TRUE, NULL);
  g_assert_true (test_sync_wait_flag (&holder.sync, &holder.returned, 10000));
  g_assert_true (holder.result);

  threads_before = test_thread_count ();
  for (guint i = 0; i < writers + readers; i++)
    {
      calls[i] = (RwManyCall){ &m, i < writers };
      if (calls[i].write)
        redis_rw_lock_write_lock_async (lock, 30000, NULL, on_many_done, &calls[i]);
      else
        redis_rw_lock_read_lock_async (lock, 30000, NULL, on_many_done, &calls[i]);
    }
  threads_pending = test_thread_count ();
  g_test_message ("threads: %u before, %u with %u calls pending", threads_before,
                  threads_pending, writers + readers);
  /* At most two other threads of the library: nothing that grows with the calls. */
  g_assert_cmpuint (threads_pending, <=, threads_before + 2);

  /* A local wait ends at its deadline, and when cancelled. */
  r = (AsyncResult){ .lock = lock, .write = TRUE };
  redis_rw_lock_write_lock_async (lock, 150, NULL, on_async_done, &r);
  async_wait (&r);
  g_assert_no_error (r.error);
  g_assert_false (r.result);
  r = (AsyncResult){ .lock = lock, .write = FALSE };
  redis_rw_lock_read_lock_async (lock, 30000, cancellable, on_async_done, &r);
  g_main_context_iteration (context, FALSE);
  g_cancellable_cancel (cancellable);
  async_wait (&r);
  g_assert_false (r.result);
  g_assert_error (r.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&r.error);
  g_assert_cmpuint (m.done, ==, 0);

  rw_taker_release_join (&holder, thread);
  g_assert_true (test_iterate_until (&m.done, writers + readers, 60000));
  g_assert_no_error (m.first_error);
  g_assert_cmpuint (m.writes, ==, writers);
  g_assert_cmpuint (m.reads, ==, readers);
  g_assert_cmpuint (m.reads_before_last_write, ==, 0);
  for (guint i = 0; i < readers; i++)
    read_unlock_ok (lock);
  g_assert_false (redis_rw_lock_is_lease_lost (lock)); /* holds nothing any more */
  g_assert_true (other_thread_reads (lock));
  g_free (calls);
  g_main_context_pop_thread_default (context);
}

static void
test_async_own_calls (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  AsyncResult first = { 0 }, second = { 0 };

  g_test_summary ("A thread's second write call made while its first waits for the writer "
                  "lease is no re-entry of a hold not taken yet: it waits behind the first, "
                  "and ends at its deadline");
  TEST_SKIP_IF_NO_STORE (fx);

  g_main_context_push_thread_default (context);
  lock = obtain_rw (fx->registry, NAME);
  lock2 = obtain_rw (other, NAME);
  write_ok (lock2);
  first = (AsyncResult){ .lock = lock, .write = TRUE };
  second = (AsyncResult){ .lock = lock, .write = TRUE };
  redis_rw_lock_write_lock_async (lock, 20000, NULL, on_async_done, &first);
  redis_rw_lock_write_lock_async (lock, 150, NULL, on_async_done, &second);
  async_wait (&second);
  g_assert_no_error (second.error);
  g_assert_false (second.result);
  g_assert_false (first.done);
  write_unlock_ok (lock2);
  async_wait (&first);
  g_assert_no_error (first.error);
  g_assert_true (first.result);
  write_unlock_ok (lock);
  g_main_context_pop_thread_default (context);
}

static void
test_async_close (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) registry = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisRWLock) lock = NULL, lock2 = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  AsyncResult in_store = { 0 }, local = { 0 };

  g_test_summary ("Closing the registry ends both a call waiting in the store and one waiting "
                  "at the local level with CLOSED");
  TEST_SKIP_IF_NO_STORE (fx);

  g_main_context_push_thread_default (context);
  lock = obtain_rw (registry, NAME);
  lock2 = obtain_rw (other, NAME);
  write_ok (lock2);
  in_store = (AsyncResult){ .lock = lock, .write = TRUE };
  local = (AsyncResult){ .lock = lock, .write = FALSE };
  redis_rw_lock_write_lock_async (lock, 30000, NULL, on_async_done, &in_store);
  redis_rw_lock_read_lock_async (lock, 30000, NULL, on_async_done, &local);
  TEST_WAIT_UNTIL (test_stats (registry).contended_attempts >= 1, 10000);
  redis_lock_registry_close (registry);
  async_wait (&in_store);
  async_wait (&local);
  g_assert_error (in_store.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_assert_error (local.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&in_store.error);
  g_clear_error (&local.error);
  write_unlock_ok (lock2);
  g_main_context_pop_thread_default (context);
}

/* ---- two processes ---- */

static void
test_two_processes (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  Child reader, writer;
  RwTaker waiter;
  GThread *thread;
  gint64 released_ms;

  g_test_summary ("A reader in another process shares the lock with this one's readers and "
                  "keeps its writers out until it leaves; a writer there keeps readers here "
                  "out; each side is woken by the other's release");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = obtain_rw (fx->registry, NAME);
  child_start (&reader, fx->url, "read");
  read_ok (lock);
  read_unlock_ok (lock);
  assert_not_acquired (lock, TRUE, 100);
  thread = rw_taker_start (&waiter, lock, TRUE, 30000, FALSE, NULL);
  rw_taker_wait_blocked (&waiter);
  TEST_WAIT_UNTIL (test_stats (fx->registry).contended_attempts >= 2, 10000);
  released_ms = test_now_ms ();
  child_finish (&reader);
  g_assert_true (test_sync_wait_flag (&waiter.sync, &waiter.returned, 10000));
  g_assert_true (waiter.result);
  g_assert_cmpint (waiter.returned_ms - released_ms, <, 5000);
  rw_taker_release_join (&waiter, thread);

  child_start (&writer, fx->url, "write");
  assert_not_acquired (lock, FALSE, 100);
  child_finish (&writer);
  read_ok (lock);
  read_unlock_ok (lock);
}

/* ---- the boxed type ---- */

static void
test_boxed_type (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisRWLock) lock = NULL;
  g_autofree char *url = g_strdup_printf ("memory://rwlock-type-%d", (int) getpid ());
  RedisRWLock *copy;

  g_test_summary ("RedisRWLock is a boxed type whose copy is a reference to the same lock");
  g_assert_true (G_TYPE_IS_BOXED (REDIS_LOCK_TYPE_RW_LOCK));
  g_assert_cmpstr (g_type_name (REDIS_LOCK_TYPE_RW_LOCK), ==, "RedisRWLock");
  registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  lock = obtain_rw (registry, NAME);
  copy = g_boxed_copy (REDIS_LOCK_TYPE_RW_LOCK, lock);
  g_assert_true (copy == lock);
  g_boxed_free (REDIS_LOCK_TYPE_RW_LOCK, copy);
  read_ok (lock);
  read_unlock_ok (lock);
}

int
main (int argc, char **argv)
{
  if (argc == 5 && strcmp (argv[1], "--rw-child") == 0)
    return child_main (argv);

  g_test_init (&argc, &argv, NULL);
  test_add_stores ("/rwlock/stores/support", NULL, test_store_support);
  test_add_stores_but_quorum ("/rwlock/read/shared-one-lease", NULL, test_readers_share);
  test_add_stores_but_quorum ("/rwlock/write/exclusive", NULL, test_writer_exclusive);
  test_add_stores_but_quorum ("/rwlock/holds/reentry", NULL, test_reentry);
  test_add_stores_but_quorum ("/rwlock/holds/downgrade", NULL, test_downgrade);
  test_add_stores_but_quorum ("/rwlock/holds/upgrade-refused", NULL, test_upgrade_refused);
  test_add_stores_but_quorum ("/rwlock/registries/two", NULL, test_two_registries);
  test_add_stores_but_quorum ("/rwlock/wait/writer-blocks-local-readers", NULL,
                              test_waiting_writer_blocks_local_readers);
  test_add_stores_but_quorum ("/rwlock/wait/writer-blocks-remote-readers", NULL,
                              test_waiting_writer_blocks_remote_readers);
  test_add_stores_but_quorum ("/rwlock/wait/notification", NULL, test_woken_by_notification);
  test_add_stores_but_quorum ("/rwlock/wait/timeout", NULL, test_timeout);
  test_add_stores_but_quorum ("/rwlock/wait/cancel", NULL, test_cancel);
  test_add_stores_but_quorum ("/rwlock/lease/lost", NULL, test_lease_lost);
  test_add_stores_but_quorum ("/rwlock/registry/close", NULL, test_close);
  test_add_stores_but_quorum ("/rwlock/async/read-write-cancel", NULL, test_async);
  test_add_stores_but_quorum ("/rwlock/async/no-thread-per-call", NULL,
                              test_async_no_thread_per_call);
  test_add_stores_but_quorum ("/rwlock/async/own-calls", NULL, test_async_own_calls);
  test_add_stores_but_quorum ("/rwlock/async/close", NULL, test_async_close);
  test_add_redis ("/rwlock/processes/two", NULL, test_two_processes);
  rwlock_add_fault_tests ();
  rwlock_add_index_tests ();
  g_test_add_func ("/rwlock/type/boxed", test_boxed_type);
  return g_test_run ();
}
