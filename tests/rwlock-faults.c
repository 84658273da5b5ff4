/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock-faults.c: the read-write lock when its server fails (tests/rwlock.c registers
 * these with rwlock_add_fault_tests()).
 *
 * A server stopped under a reader lease (the lease is not shared until confirmed, and
 * reported lost when the server comes back empty); a server frozen while a writer
 * waits (the call still ends within its wait, blocking or asynchronous, and the mark
 * it leaves is removed once the server answers again); a server frozen under many
 * asynchronous calls (a call of a registry on another server is not held up); the
 * subscriptions reset just before a writer marks the lock (the registry that missed the
 * mark stops sharing its reader lease, so the writer is not starved); a read or write
 * attempt whose answer a proxy kept back (the lease it took is released in the
 * background). Redis only: the faults are a real server's. And an operator's forced
 * unlock, on every store that has read-write locks: the readers set and the waiting
 * mark are refused, a reader lease forced open is told to its readers and shared with
 * no new one.
 */
#include <string.h>

#include "proxy.h"
#include "rwlock-helpers.h"

static void
test_outage_no_join (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  guint64 before;

  g_test_summary ("Once the registry saw its connection break, a reader lease it has not "
                  "confirmed since is not shared with a new reading thread: with the server "
                  "down the thread does not get in; back (empty), the lease is reported lost "
                  "and a new reading thread takes a fresh one");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (fx->registry, 30000);
  lock = obtain_rw (fx->registry, NAME);
  read_ok (lock);
  g_assert_true (other_thread_reads (lock));
  before = test_stats (fx->registry).audits;
  redis_lock_test_server_stop (fx->server);
  TEST_WAIT_UNTIL (test_stats (fx->registry).audits > before, 10000);
  g_assert_false (other_thread_reads (lock));

  g_assert_true (redis_lock_test_server_start (fx->server, &error));
  g_assert_no_error (error);
  /* The fixture's own connection went with the old server. */
  redisFree (fx->redis);
  fx->redis = test_redis_connect (fx->server);
  TEST_WAIT_UNTIL (redis_rw_lock_is_lease_lost (lock), 10000);
  g_assert_false (other_thread_reads (lock));
  g_assert_false (redis_rw_lock_read_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  read_ok (lock);
  g_assert_false (redis_rw_lock_is_lease_lost (lock));
  read_unlock_ok (lock);
}

/* A writer of @writer_registry waiting on @wlock (a read of fx->registry holds it), its
 * mark in the store, when the server is frozen; the server goes on again once the call
 * has ended. Blocking (@async FALSE) or asynchronous; returns the call's time. */
static gint64
write_given_up_on_frozen_server (TestFixture *fx, RedisRWLock *wlock, gboolean async)
{
  g_autofree char *mark = rw_key (NAME, "ww");
  gint64 start = test_now_ms (), took;

  if (!async)
    {
      RwTaker writer;
      GThread *thread = rw_taker_start (&writer, wlock, TRUE, 1000, TRUE, NULL);

      TEST_WAIT_UNTIL (test_store_exists (fx, mark), 10000);
      redis_lock_test_server_pause (fx->server);
      g_assert_true (test_sync_wait_flag (&writer.sync, &writer.returned, 20000));
      took = writer.returned_ms - start;
      g_assert_false (writer.result);
      rw_taker_release_join (&writer, thread);
    }
  else
    {
      AsyncResult r = { .lock = wlock, .write = TRUE };

      redis_rw_lock_write_lock_async (wlock, 1000, NULL, on_async_done, &r);
      TEST_WAIT_UNTIL (test_store_exists (fx, mark), 10000);
      redis_lock_test_server_pause (fx->server);
      async_wait (&r);
      took = test_now_ms () - start;
      g_assert_false (r.result);
      g_clear_error (&r.error);
    }
  redis_lock_test_server_resume (fx->server);
  return took;
}

static void
test_frozen_server_write_gives_up (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) writer_registry = NULL, late_registry = NULL;
  g_autoptr (RedisRWLock) lock = NULL, wlock = NULL, late = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autofree char *mark = rw_key (NAME, "ww");
  gboolean async = GPOINTER_TO_INT (data);
  gint64 took;

  g_test_summary ("A write that waits behind a reader and gives up (wait 1000 ms) while the "
                  "server is frozen returns within its wait, not after the command timeout "
                  "(5 s); its waiting mark, which the frozen server could not remove then, is "
                  "removed once the server answers again, long before its TTL (a minute), so "
                  "readers of other registries are not held back by it");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_main_context_push_thread_default (context);
  writer_registry = test_registry_new (fx);
  late_registry = test_registry_new (fx);
  redis_lock_registry_set_command_timeout_ms (writer_registry, 5000);
  lock = obtain_rw (fx->registry, NAME);
  wlock = obtain_rw (writer_registry, NAME);
  late = obtain_rw (late_registry, NAME);
  read_ok (lock);

  took = write_given_up_on_frozen_server (fx, wlock, async);
  g_test_message ("the write returned after %" G_GINT64_FORMAT " ms", took);
  g_assert_cmpint (took, <, 2000);

  TEST_WAIT_UNTIL (!test_store_exists (fx, mark), 10000);
  read_ok (late);
  read_unlock_ok (late);
  read_unlock_ok (lock);
  g_main_context_pop_thread_default (context);
}

static void
test_async_frozen_other_registry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisRWLock) free_lock = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autoptr (GError) error = NULL;
  const guint n = 2 * POOL_THREADS + 1;
  RedisRWLock *stuck_locks[2 * POOL_THREADS + 1];
  RwMany stuck[2 * POOL_THREADS + 1];
  RwManyCall calls[2 * POOL_THREADS + 1];
  AsyncResult r = { 0 };
  gint64 t0, took;
  guint done = 0;

  g_test_summary ("With one registry's server frozen and more write calls stuck on it than a "
                  "pool has workers, a write call (wait 2000 ms) on a free lock of a registry "
                  "on another server takes it within its wait");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_main_context_push_thread_default (context);
  server = redis_lock_test_server_new (NULL, &error);
  g_assert_no_error (error);
  rb = test_registry_new_on (redis_lock_test_server_get_url (server));
  free_lock = obtain_rw (rb, NAME);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *name = g_strdup_printf ("frozen-%u", i);
      stuck_locks[i] = obtain_rw (fx->registry, name);
      stuck[i] = (RwMany){ .lock = stuck_locks[i], .expected_writes = 1 };
      calls[i] = (RwManyCall){ &stuck[i], TRUE };
    }
  write_ok (stuck_locks[0]);
  write_unlock_ok (stuck_locks[0]);
  write_ok (free_lock);
  write_unlock_ok (free_lock);
  redis_lock_registry_set_command_timeout_ms (fx->registry, 5000);

  redis_lock_test_server_pause (fx->server);
  for (guint i = 0; i < n; i++)
    redis_rw_lock_write_lock_async (stuck_locks[i], 8000, NULL, on_many_done, &calls[i]);
  t0 = test_now_ms ();
  r = (AsyncResult){ .lock = free_lock, .write = TRUE };
  redis_rw_lock_write_lock_async (free_lock, 2000, NULL, on_async_done, &r);
  async_wait (&r);
  took = test_now_ms () - t0;
  g_test_message ("the call on the other server completed after %" G_GINT64_FORMAT " ms", took);
  g_assert_no_error (r.error);
  g_assert_true (r.result);
  g_assert_cmpint (took, <, 2000);
  write_unlock_ok (free_lock);

  redis_lock_test_server_resume (fx->server);
  for (guint i = 0; i < n; i++)
    {
      g_assert_true (test_iterate_until (&stuck[i].done, 1, 30000));
      done += stuck[i].done;
      g_clear_error (&stuck[i].first_error);
      redis_rw_lock_unref (stuck_locks[i]);
    }
  g_assert_cmpuint (done, ==, n);
  g_main_context_pop_thread_default (context);
}

/* A reading thread of test_subscription_blip(): reads in a loop, each read section
 * @hold_ms long, until told to stop. */
typedef struct
{
  RedisRWLock *lock;
  gint64 hold_ms;
  TestSync *sync;
  gint *stop;
  gint sections;
} LoopReader;

static gpointer
loop_reader_main (gpointer data)
{
  LoopReader *r = data;

  while (!g_atomic_int_get (r->stop))
    {
      g_autoptr (GError) error = NULL;

      if (!redis_rw_lock_try_read_lock_for (r->lock, 200, NULL, &error))
        {
          g_assert_no_error (error);
          continue; /* held back by the writer: ask again */
        }
      /* The reader's work: a section of about hold_ms. */
      g_usleep (r->hold_ms * 1000);
      g_assert_true (redis_rw_lock_read_unlock (r->lock, &error));
      g_assert_no_error (error);
      test_sync_lock (r->sync);
      r->sections++;
      test_sync_broadcast (r->sync);
      test_sync_unlock (r->sync);
    }
  return NULL;
}

static void
test_subscription_blip (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisRWLock) lock = NULL, rlock = NULL;
  g_autoptr (GError) error = NULL;
  static const gint64 holds[] = { 30, 37, 43 };
  LoopReader readers[G_N_ELEMENTS (holds)];
  GThread *threads[G_N_ELEMENTS (holds)];
  TestSync sync;
  gint stop = 0;
  gint64 start, took;
  gboolean ok;

  g_test_summary ("A registry whose subscription was reset just before a writer of another "
                  "registry marked the lock (so the mark's notification was missed) lets no "
                  "new reading thread join its reader lease unasked: with three overlapping "
                  "readers there, the writer (wait 8000 ms, reader TTL 30 s) gets in within "
                  "about their section times, not at the end of its wait");
  TEST_SKIP_IF_NO_SERVER (fx);

  test_sync_init (&sync);
  rb = test_registry_new (fx);
  redis_lock_registry_set_expire_after_ms (rb, 30000);
  redis_lock_registry_set_expire_after_ms (fx->registry, 30000);
  lock = obtain_rw (fx->registry, NAME);
  rlock = obtain_rw (rb, NAME);
  for (guint i = 0; i < G_N_ELEMENTS (holds); i++)
    {
      readers[i] = (LoopReader){ rlock, holds[i], &sync, &stop, 0 };
      threads[i] = g_thread_new ("reader", loop_reader_main, &readers[i]);
    }
  /* Every reader has read a few sections: they overlap on the one reader lease. */
  test_sync_lock (&sync);
  for (guint i = 0; i < G_N_ELEMENTS (holds); i++)
    while (readers[i].sections < 3)
      g_assert_true (test_sync_wait_until (&sync, g_get_monotonic_time () + 20 * G_USEC_PER_SEC));
  test_sync_unlock (&sync);

  freeReplyObject (test_redis_command (fx->redis, "CLIENT KILL TYPE pubsub"));
  start = test_now_ms ();
  ok = redis_rw_lock_try_write_lock_for (lock, 8000, NULL, &error);
  took = test_now_ms () - start;
  g_test_message ("the writer got in after %" G_GINT64_FORMAT " ms", took);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_cmpint (took, <, 3000);
  write_unlock_ok (lock);

  g_atomic_int_set (&stop, 1);
  for (guint i = 0; i < G_N_ELEMENTS (holds); i++)
    g_thread_join (threads[i]);
  test_sync_clear (&sync);
}

/* ---- forced unlocks ---- */

static void
test_forced_set_and_mark_refused (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (RedisRWLock) wlock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *mark = rw_key (NAME, "ww");
  g_autofree char *readers = rw_key (NAME, "readers");
  const char *names[] = { "{" NAME "}:rw:readers", "{" NAME "}:rw:ww" };
  gboolean returned;
  RwTaker w;
  GThread *thread;

  g_test_summary ("force_unlock refuses a read-write lock's readers set and a waiting "
                  "writer's mark (INVALID): both stay, and the writer of another registry "
                  "still waits for the live reader; the reader's release lets it in");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = obtain_rw (fx->registry, NAME);
  wlock = obtain_rw (other, NAME);
  read_ok (lock);
  thread = rw_taker_start (&w, wlock, TRUE, 20000, FALSE, NULL);
  TEST_WAIT_UNTIL (test_store_exists (fx, mark), 10000);
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      g_assert_false (redis_lock_registry_force_unlock (fx->registry, names[i], &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_test_message ("%s", error->message);
      g_clear_error (&error);
    }
  g_assert_true (test_store_exists (fx, mark));
  /* The memory store finds readers by key prefix: it has no set. */
  if (fx->store != TEST_STORE_MEMORY)
    g_assert_true (test_store_exists (fx, readers));
  test_sync_lock (&w.sync);
  returned = w.returned;
  test_sync_unlock (&w.sync);
  g_assert_false (returned);
  read_unlock_ok (lock);
  rw_taker_release_join (&w, thread);
  g_assert_true (w.result);
}

static void
test_forced_reader_lease_told (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *key = reader_key (fx->registry, NAME);
  const char *name = key + strlen (TEST_REGISTRY_KEY ":");
  GCancellable *cancellable;
  TestLeaseLost ll;
  gint64 t0;
  guint64 before;

  g_test_summary ("A reader lease forced open (force_unlock of `{name}:rw:r:CLIENT_ID`): "
                  "once its registry has heard it, a new reading thread does not join it, "
                  "and its readers are told within a second (60 s lease): callback with "
                  "NULL, cancellable, is_lease_lost, read_unlock LEASE_LOST; then a fresh "
                  "lease is taken");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&ll);
  redis_lock_registry_set_lease_lost_callback (fx->registry, test_lease_lost_cb, &ll, NULL);
  lock = obtain_rw (fx->registry, NAME);
  read_ok (lock);
  cancellable = redis_rw_lock_get_lease_cancellable (lock);
  test_lease_lost_set_cancellable (&ll, cancellable);
  if (fx->store != TEST_STORE_MEMORY)
    TEST_WAIT_UNTIL (test_stats (fx->registry).subscriber_connections >= test_store_nodes (fx),
                     10000);

  before = test_stats (fx->registry).notifications;
  t0 = test_now_ms ();
  g_assert_true (redis_lock_registry_force_unlock (fx->registry, name, &error));
  g_assert_no_error (error);
  g_assert_true (test_wait_heard (fx->registry, before, 5000));
  g_assert_false (other_thread_reads (lock));

  g_assert_cmpuint (test_lease_lost_wait (&ll, 3000), ==, 1);
  g_test_message ("the reader was told %" G_GINT64_FORMAT " ms after the forced unlock",
                  ll.at_ms - t0);
  g_assert_null (ll.lock);
  g_assert_true (ll.cancelled_first);
  g_assert_true (redis_rw_lock_is_lease_lost (lock));
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_false (redis_rw_lock_read_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  read_ok (lock);
  g_assert_false (redis_rw_lock_is_lease_lost (lock));
  read_unlock_ok (lock);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&ll);
}

/* One read or write attempt of @lock (@async: the asynchronous call) with a 200 ms wait
 * whose answer @proxy keeps back: the request takes effect, and the caller gets no hold
 * (and at most CONNECTION). */
static void
attempt_answer_lost (TestProxy *proxy, RedisRWLock *lock, gboolean write, gboolean async)
{
  g_autoptr (GError) error = NULL;
  gboolean ok;

  test_proxy_hold_replies (proxy, "{" NAME "}:rw");
  if (async)
    {
      AsyncResult r = { .lock = lock, .write = write };

      if (write)
        redis_rw_lock_write_lock_async (lock, 200, NULL, on_async_done, &r);
      else
        redis_rw_lock_read_lock_async (lock, 200, NULL, on_async_done, &r);
      async_wait (&r);
      ok = r.result;
      error = r.error;
    }
  else if (write)
    ok = redis_rw_lock_try_write_lock_for (lock, 200, NULL, &error);
  else
    ok = redis_rw_lock_try_read_lock_for (lock, 200, NULL, &error);
  g_assert_true (test_proxy_wait_held (proxy, 0));
  g_assert_false (ok);
  if (error != NULL)
    g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
}

static void
test_lost_answer (TestFixture *fx, gconstpointer data)
{
  gboolean async = GPOINTER_TO_INT (data);
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisRWLock) lock = NULL, other = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autofree char *reader = NULL, *writer = rw_key (NAME, "w"), *mark = rw_key (NAME, "ww");

  g_test_summary ("A read or a write attempt whose answer was lost (the request took effect, "
                  "its answer came after the caller's wait) is released by value in the "
                  "background: its reader or writer lease is gone within a few seconds, not "
                  "after the TTL (a minute), and a writer of another registry gets in");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_main_context_push_thread_default (context);
  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (fx->server));
  r = test_registry_new_on (test_proxy_get_url (proxy));
  redis_lock_registry_set_expire_after_ms (r, 60000);
  lock = obtain_rw (r, NAME);
  other = obtain_rw (fx->registry, NAME);
  reader = reader_key (r, NAME);
  /* Scripts loaded and connections made. */
  read_ok (lock);
  read_unlock_ok (lock);
  write_ok (lock);
  write_unlock_ok (lock);

  attempt_answer_lost (proxy, lock, FALSE, async);
  TEST_WAIT_UNTIL (!test_store_exists (fx, reader), 5000);
  test_proxy_release_held (proxy);
  write_ok (other);
  write_unlock_ok (other);

  attempt_answer_lost (proxy, lock, TRUE, async);
  TEST_WAIT_UNTIL (!test_store_exists (fx, writer) && !test_store_exists (fx, mark), 5000);
  test_proxy_release_held (proxy);
  write_ok (other);
  write_unlock_ok (other);
  g_main_context_pop_thread_default (context);
}

void
rwlock_add_fault_tests (void)
{
  test_add_stores_but_quorum ("/rwlock/force-unlock/set-and-mark-refused", NULL,
                              test_forced_set_and_mark_refused);
  test_add_stores_but_quorum ("/rwlock/force-unlock/reader-lease-told", NULL,
                              test_forced_reader_lease_told);
  test_add_redis ("/rwlock/lease/outage-no-join", NULL, test_outage_no_join);
  test_add_redis ("/rwlock/wait/frozen-server/write", GINT_TO_POINTER (FALSE),
                  test_frozen_server_write_gives_up);
  test_add_redis ("/rwlock/wait/frozen-server/write-async", GINT_TO_POINTER (TRUE),
                  test_frozen_server_write_gives_up);
  test_add_redis ("/rwlock/async/frozen-other-registry", NULL, test_async_frozen_other_registry);
  test_add_redis ("/rwlock/wait/subscription-blip", NULL, test_subscription_blip);
  test_add_redis ("/rwlock/lost-answer/blocking", GINT_TO_POINTER (FALSE), test_lost_answer);
  test_add_redis ("/rwlock/lost-answer/async", GINT_TO_POINTER (TRUE), test_lost_answer);
}
