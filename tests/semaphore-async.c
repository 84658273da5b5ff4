/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore-async.c: tests of redis_semaphore_acquire_async(), part of the semaphore
 * test program (semaphore.c has its main): the call waits without blocking the main
 * loop and completes in the caller's context, ends on cancellation and close, and its
 * pending calls hold no thread each; on Redis only, a frozen server ties up its own
 * registry's workers only, and a call whose attempt never reached Redis within its
 * wait fails with CONNECTION.
 */
#include "semaphore-helpers.h"

typedef struct
{
  GMainLoop *loop;
  RedisPermit *permit;
  GError *error;
  gboolean done;
} AsyncResult;

typedef struct
{
  AsyncResult *ar;
  RedisSemaphore *sem;
} AsyncCtx;

static void
on_acquired_ctx (GObject *source, GAsyncResult *result, gpointer data)
{
  AsyncCtx *ctx = data;

  (void) source;
  ctx->ar->permit = redis_semaphore_acquire_finish (ctx->sem, result, &ctx->ar->error);
  ctx->ar->done = TRUE;
  g_main_loop_quit (ctx->ar->loop);
}

static gboolean
release_later (gpointer data)
{
  release_ok (data);
  return G_SOURCE_REMOVE;
}

static void
test_async (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  AsyncResult ar = { 0 };
  AsyncCtx ctx = { &ar, NULL };
  RedisPermit *held;

  g_test_summary ("acquire_async waits without blocking the main loop and completes in the "
                  "calling thread's context when a permit is released; with none freed in "
                  "time, it completes with NULL and no error");
  TEST_SKIP_IF_NO_STORE (fx);

  g_main_context_push_thread_default (context);
  ar.loop = g_main_loop_new (context, FALSE);
  sem = obtain_semaphore (fx->registry, "async", 1);
  ctx.sem = sem;
  held = acquire_ok (sem, 0);

  redis_semaphore_acquire_async (sem, 200, NULL, on_acquired_ctx, &ctx);
  g_main_loop_run (ar.loop);
  g_assert_true (ar.done);
  g_assert_no_error (ar.error);
  g_assert_null (ar.permit);

  ar.done = FALSE;
  redis_semaphore_acquire_async (sem, 20000, NULL, on_acquired_ctx, &ctx);
  g_assert_true (test_wait_contended (fx->registry, 2, 10000));
  g_assert_false (ar.done);
  {
    GSource *idle = g_idle_source_new ();
    g_source_set_callback (idle, release_later, held, NULL);
    g_source_attach (idle, context);
    g_source_unref (idle);
  }
  g_main_loop_run (ar.loop);
  g_assert_true (ar.done);
  g_assert_no_error (ar.error);
  g_assert_nonnull (ar.permit);
  release_ok (ar.permit);
  g_main_loop_unref (ar.loop);
  g_main_context_pop_thread_default (context);
}

typedef struct
{
  RedisSemaphore *sem;
  guint done;
  guint taken;
  GError *first_error;
  GPtrArray *permits;
} ManyResult;

static void
on_many (GObject *source, GAsyncResult *result, gpointer data)
{
  ManyResult *mr = data;
  GError *error = NULL;
  RedisPermit *permit = redis_semaphore_acquire_finish (mr->sem, result, &error);

  (void) source;
  mr->done++;
  if (permit != NULL)
    {
      mr->taken++;
      g_ptr_array_add (mr->permits, permit);
    }
  if (error != NULL && mr->first_error == NULL)
    mr->first_error = error;
  else
    g_clear_error (&error);
}

static void
test_async_no_thread (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  ManyResult mr = { 0 };
  const guint n = 16;
  RedisPermit *held;
  guint threads_before;

  g_test_summary ("Sixteen pending acquire_async calls block no thread while they wait; a "
                  "release hands the permit to one of them, cancelling ends the others with "
                  "CANCELLED");
  TEST_SKIP_IF_NO_STORE (fx);

  g_main_context_push_thread_default (context);
  mr.permits = g_ptr_array_new ();
  sem = obtain_semaphore (fx->registry, "many", 1);
  mr.sem = sem;
  held = acquire_ok (sem, 0);
  threads_before = test_thread_count ();
  for (guint i = 0; i < n; i++)
    redis_semaphore_acquire_async (sem, 30000, cancellable, on_many, &mr);
  g_assert_true (test_wait_contended (fx->registry, n, 20000));
  /* Their attempts are done; the workers that made them may linger a moment. */
  TEST_WAIT_UNTIL (test_thread_count () < threads_before + n / 2, 20000);
  g_assert_cmpuint (mr.done, ==, 0);

  release_ok (held);
  g_assert_true (test_iterate_until (&mr.taken, 1, 10000));
  g_cancellable_cancel (cancellable);
  g_assert_true (test_iterate_until (&mr.done, n, 10000));
  g_assert_cmpuint (mr.taken, ==, 1);
  g_assert_error (mr.first_error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&mr.first_error);
  release_ok (g_ptr_array_index (mr.permits, 0));
  g_ptr_array_unref (mr.permits);
  g_main_context_pop_thread_default (context);
}

static void
test_async_close (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) registry = test_registry_new (fx);
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  ManyResult mr = { 0 };
  RedisPermit *held;

  g_test_summary ("A pending acquire_async completes with CLOSED when its registry closes");
  TEST_SKIP_IF_NO_STORE (fx);

  g_main_context_push_thread_default (context);
  mr.permits = g_ptr_array_new ();
  sem = obtain_semaphore (registry, "async-close", 1);
  mr.sem = sem;
  held = acquire_ok (sem, 0);
  redis_semaphore_acquire_async (sem, 30000, NULL, on_many, &mr);
  g_assert_true (test_wait_contended (registry, 1, 10000));
  redis_lock_registry_close (registry);
  g_assert_true (test_iterate_until (&mr.done, 1, 10000));
  g_assert_cmpuint (mr.taken, ==, 0);
  g_assert_error (mr.first_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&mr.first_error);
  g_assert_false (redis_permit_release (held, NULL));
  g_ptr_array_unref (mr.permits);
  g_main_context_pop_thread_default (context);
}

/* The workers of a registry's asynchronous calls (async-pool.h). */
#define POOL_THREADS 4

static void
test_async_no_thread_per_call (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  ManyResult mr = { 0 };
  const guint n = 64;
  guint threads_before, threads_pending;

  g_test_summary ("64 acquire_async calls whose attempts are all stuck on a frozen server "
                  "create no thread per call: their attempts queue on the registry's few "
                  "workers, and all take their permits once the server answers again");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_main_context_push_thread_default (context);
  mr.permits = g_ptr_array_new ();
  sem = obtain_semaphore (fx->registry, "no-thread-per-call", n);
  mr.sem = sem;
  /* A first cycle starts what a registry starts with its first lease. */
  release_ok (acquire_ok (sem, 0));
  redis_lock_registry_set_command_timeout_ms (fx->registry, 20000);
  threads_before = test_thread_count ();
  redis_lock_test_server_pause (fx->server);
  for (guint i = 0; i < n; i++)
    redis_semaphore_acquire_async (sem, 30000, NULL, on_many, &mr);
  threads_pending = test_thread_count ();
  g_test_message ("threads: %u before, %u with %u calls pending", threads_before,
                  threads_pending, n);
  /* The registry's workers, and at most two other threads of the library (its watchdog,
   * its notification subscriber) that may start meanwhile: nothing that grows with n. */
  g_assert_cmpuint (threads_pending, <=, threads_before + POOL_THREADS + 2);
  g_assert_cmpuint (mr.done, ==, 0);
  redis_lock_test_server_resume (fx->server);
  g_assert_true (test_iterate_until (&mr.done, n, 20000));
  g_assert_no_error (mr.first_error);
  g_assert_cmpuint (mr.taken, ==, n);
  for (guint i = 0; i < mr.permits->len; i++)
    release_ok (g_ptr_array_index (mr.permits, i));
  g_ptr_array_unref (mr.permits);
  g_main_context_pop_thread_default (context);
}

static void
test_async_frozen_other_registry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockTestServer) other = NULL;
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisSemaphore) stuck_sem = NULL, free_sem = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autoptr (GError) error = NULL;
  ManyResult stuck = { 0 }, mr = { 0 };
  const guint n = 2 * POOL_THREADS + 1;
  gint64 t0, took;

  g_test_summary ("With one registry's server frozen and more acquire_async calls stuck on it "
                  "than a pool has workers, acquire_async (wait 2000 ms) on a free semaphore "
                  "of a registry on another server takes a permit within its wait");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_main_context_push_thread_default (context);
  other = redis_lock_test_server_new (NULL, &error);
  g_assert_no_error (error);
  rb = test_registry_new_on (redis_lock_test_server_get_url (other));
  stuck.permits = g_ptr_array_new ();
  mr.permits = g_ptr_array_new ();
  stuck_sem = obtain_semaphore (fx->registry, "frozen", n);
  free_sem = obtain_semaphore (rb, "free", 1);
  stuck.sem = stuck_sem;
  mr.sem = free_sem;
  release_ok (acquire_ok (stuck_sem, 0));
  release_ok (acquire_ok (free_sem, 0));
  redis_lock_registry_set_command_timeout_ms (fx->registry, 5000);

  redis_lock_test_server_pause (fx->server);
  for (guint i = 0; i < n; i++)
    redis_semaphore_acquire_async (stuck_sem, 8000, NULL, on_many, &stuck);
  t0 = test_now_ms ();
  redis_semaphore_acquire_async (free_sem, 2000, NULL, on_many, &mr);
  g_assert_true (test_iterate_until (&mr.done, 1, 10000));
  took = test_now_ms () - t0;
  g_test_message ("the call on the other server completed after %" G_GINT64_FORMAT " ms", took);
  g_assert_no_error (mr.first_error);
  g_assert_cmpuint (mr.taken, ==, 1);
  g_assert_cmpint (took, <, 2000);
  release_ok (g_ptr_array_index (mr.permits, 0));

  redis_lock_test_server_resume (fx->server);
  g_assert_true (test_iterate_until (&stuck.done, n, 30000));
  for (guint i = 0; i < stuck.permits->len; i++)
    release_ok (g_ptr_array_index (stuck.permits, i));
  g_clear_error (&stuck.first_error);
  g_ptr_array_unref (stuck.permits);
  g_ptr_array_unref (mr.permits);
  g_main_context_pop_thread_default (context);
}

static void
test_async_never_reached_redis (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) stuck_sem = NULL, late_sem = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  ManyResult stuck = { 0 }, mr = { 0 };

  g_test_summary ("An acquire_async whose attempt could not even be sent within its wait "
                  "(every worker of its registry blocked on a frozen server) completes with "
                  "CONNECTION, not with NULL: it never learned that the permits were taken");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_main_context_push_thread_default (context);
  stuck.permits = g_ptr_array_new ();
  mr.permits = g_ptr_array_new ();
  stuck_sem = obtain_semaphore (fx->registry, "stuck", POOL_THREADS);
  late_sem = obtain_semaphore (fx->registry, "late", 1);
  stuck.sem = stuck_sem;
  mr.sem = late_sem;
  release_ok (acquire_ok (stuck_sem, 0));
  redis_lock_registry_set_command_timeout_ms (fx->registry, 1500);
  redis_lock_test_server_pause (fx->server);
  for (guint i = 0; i < POOL_THREADS; i++)
    redis_semaphore_acquire_async (stuck_sem, 8000, NULL, on_many, &stuck);
  redis_semaphore_acquire_async (late_sem, 300, NULL, on_many, &mr);
  g_assert_true (test_iterate_until (&mr.done, 1, 20000));
  redis_lock_test_server_resume (fx->server);
  g_assert_cmpuint (mr.taken, ==, 0);
  g_assert_error (mr.first_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_test_message ("%s", mr.first_error->message);
  g_clear_error (&mr.first_error);
  g_assert_true (test_iterate_until (&stuck.done, POOL_THREADS, 30000));
  for (guint i = 0; i < stuck.permits->len; i++)
    release_ok (g_ptr_array_index (stuck.permits, i));
  g_clear_error (&stuck.first_error);
  g_ptr_array_unref (stuck.permits);
  g_ptr_array_unref (mr.permits);
  g_main_context_pop_thread_default (context);
}

void
semaphore_add_async_tests (void)
{
  test_add_stores_but_quorum ("/semaphore/async/acquire", NULL, test_async);
  test_add_stores_but_quorum ("/semaphore/async/no-thread-blocked", NULL, test_async_no_thread);
  test_add_stores_but_quorum ("/semaphore/async/close", NULL, test_async_close);
  test_add_redis ("/semaphore/async/no-thread-per-call", NULL, test_async_no_thread_per_call);
  test_add_redis ("/semaphore/async/frozen-server/other-registry-unaffected", NULL,
                  test_async_frozen_other_registry);
  test_add_redis ("/semaphore/async/frozen-server/never-reached-redis", NULL,
                  test_async_never_reached_redis);
}
