/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* family-async.c: a set of locks taken without blocking (redis_lock_try_lock_all_async()),
 * a forced unlock that can be cancelled (redis_lock_registry_force_unlock_full()) and a
 * registry made without blocking (redis_lock_registry_new_async()).
 *
 * The set's call completes in the caller's main context with the holds the calling
 * thread's: all taken (then unlocked from that thread), none taken when one is held
 * elsewhere (the locks it held already keep their count), or cancelled. Against a
 * frozen server, the loop of the caller's context keeps running while the call waits:
 * a timer of the loop keeps firing, and resumes the server itself, after which the
 * call completes. A forced unlock whose server froze ends with G_IO_ERROR_CANCELLED as
 * soon as a timer of the loop cancels it, long before the command timeout. A registry
 * made against a frozen server completes once the loop's timer resumed the server.
 */
#include "common.h"

#define TICK_MS 20
/* Ticks of the loop, while the call is pending, before the timer resumes the server. */
#define RESUME_AFTER 10
/* Ticks before the timer cancels a call. */
#define CANCEL_AFTER 5

typedef struct
{
  GMainLoop *loop;
  RedisLockTestServer *frozen; /* resumed by the timer */
  GCancellable *cancellable;   /* cancelled by the timer, when set */
  guint ticks;
  guint ticks_at_start;
  guint ticks_at_done;
  gint64 cancelled_at_ms;
  gboolean done;
  gboolean ok;
  GError *error;
} Call;

static gboolean
on_tick (gpointer data)
{
  Call *c = data;

  c->ticks++;
  if (c->frozen != NULL && c->ticks - c->ticks_at_start == RESUME_AFTER)
    redis_lock_test_server_resume (g_steal_pointer (&c->frozen));
  if (c->cancellable != NULL && c->ticks - c->ticks_at_start == CANCEL_AFTER)
    {
      c->cancelled_at_ms = test_now_ms ();
      g_cancellable_cancel (c->cancellable);
    }
  return G_SOURCE_CONTINUE;
}

static void
on_set (GObject *source, GAsyncResult *result, gpointer data)
{
  Call *c = data;

  g_assert_null (source);
  c->ok = redis_lock_try_lock_all_finish (result, &c->error);
  c->done = TRUE;
  c->ticks_at_done = c->ticks;
  g_main_loop_quit (c->loop);
}

/* Runs the set's call on @locks in a loop of a context of this thread, with @frozen
 * paused meanwhile when not NULL, until it completes. */
static void
run_set (Call *c, RedisLock **locks, guint n, gint64 wait_ms, RedisLockTestServer *frozen)
{
  g_autoptr (GMainContext) context = g_main_context_new ();
  GSource *tick;

  g_main_context_push_thread_default (context);
  c->loop = g_main_loop_new (context, FALSE);
  tick = g_timeout_source_new (TICK_MS);
  g_source_set_callback (tick, on_tick, c, NULL);
  g_source_attach (tick, context);
  if (frozen != NULL)
    redis_lock_test_server_pause (frozen);
  c->frozen = frozen;
  c->ticks_at_start = c->ticks;
  redis_lock_try_lock_all_async (locks, n, wait_ms, c->cancellable, on_set, c);
  /* Completion comes from the loop, never from within the call. */
  g_assert_false (c->done);
  g_main_loop_run (c->loop);
  if (c->frozen != NULL)
    redis_lock_test_server_resume (g_steal_pointer (&c->frozen));
  g_source_destroy (tick);
  g_source_unref (tick);
  g_main_loop_unref (c->loop);
  g_main_context_pop_thread_default (context);
  g_assert_true (c->done);
}

static void
unlock_ok (RedisLock *lock)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (redis_lock_unlock (lock, &error));
  g_assert_no_error (error);
}

static void
test_set_completes (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) a = NULL;
  g_autoptr (RedisLock) b = NULL;
  g_autoptr (RedisLock) b_other = NULL;
  g_autoptr (GError) error = NULL;
  RedisLock *set[] = { NULL, NULL, NULL };
  Call c = { 0 };

  g_test_summary ("A set taken without blocking: completes in the caller's context with "
                  "every lock the calling thread's (a duplicate taken once); with one held "
                  "elsewhere, FALSE and none held, a lock held before keeping its count; "
                  "cancelled, CANCELLED");
  TEST_SKIP_IF_NO_STORE (fx);
  other = test_registry_new (fx);
  a = test_obtain (fx->registry, "set-a");
  b = test_obtain (fx->registry, "set-b");
  b_other = test_obtain (other, "set-b");
  set[0] = b;
  set[1] = a;
  set[2] = b;

  run_set (&c, set, 3, 5000, NULL);
  g_assert_no_error (c.error);
  g_assert_true (c.ok);
  g_assert_true (redis_lock_is_held_by_current_thread (a));
  g_assert_true (redis_lock_is_held_by_current_thread (b));
  g_assert_true (redis_lock_unlock_all (set, 2, &error));
  g_assert_no_error (error);
  g_assert_false (redis_lock_is_held_by_current_thread (a));
  g_assert_false (redis_lock_is_held_by_current_thread (b));

  /* b held by another registry: not within the wait, and a keeps its one hold. */
  g_assert_true (redis_lock_try_lock_for (b_other, 0, NULL, &error));
  g_assert_true (redis_lock_try_lock_for (a, 0, NULL, &error));
  g_assert_no_error (error);
  c = (Call){ 0 };
  run_set (&c, set, 2, 300, NULL);
  g_assert_no_error (c.error);
  g_assert_false (c.ok);
  g_assert_false (redis_lock_is_held_by_current_thread (b));
  unlock_ok (a);
  g_assert_false (redis_lock_is_held_by_current_thread (a));

  /* Cancelled while it waits for b. */
  c = (Call){ .cancellable = g_cancellable_new () };
  run_set (&c, set, 2, 20000, NULL);
  g_assert_error (c.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_false (c.ok);
  g_assert_cmpuint (c.ticks_at_done - c.ticks_at_start, >=, CANCEL_AFTER);
  g_assert_false (redis_lock_is_held_by_current_thread (a));
  g_assert_false (redis_lock_is_held_by_current_thread (b));
  g_clear_error (&c.error);
  g_clear_object (&c.cancellable);
  unlock_ok (b_other);
}

static void
test_set_frozen (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) a = NULL;
  g_autoptr (RedisLock) b = NULL;
  g_autoptr (GError) error = NULL;
  RedisLock *set[2];
  Call c = { 0 };

  g_test_summary ("Against a frozen server, the set's non-blocking call leaves its loop "
                  "running: a timer keeps firing while the call waits and resumes the "
                  "server itself; the call then completes with every lock held");
  TEST_SKIP_IF_NO_SERVER (fx);
  redis_lock_registry_set_command_timeout_ms (fx->registry, 10000);
  a = test_obtain (fx->registry, "frozen-a");
  b = test_obtain (fx->registry, "frozen-b");
  set[0] = a;
  set[1] = b;
  run_set (&c, set, 2, 20000, fx->server);
  g_test_message ("%u ticks of %d ms before it completed", c.ticks_at_done - c.ticks_at_start,
                  TICK_MS);
  g_assert_no_error (c.error);
  g_assert_true (c.ok);
  g_assert_cmpuint (c.ticks_at_done - c.ticks_at_start, >=, RESUME_AFTER);
  g_assert_true (redis_lock_is_held_by_current_thread (a));
  g_assert_true (redis_lock_is_held_by_current_thread (b));
  g_assert_true (redis_lock_unlock_all (set, 2, &error));
  g_assert_no_error (error);
}

/* The forced unlock ------------------------------------------------------------------ */

typedef struct
{
  Call *c;
  RedisLockRegistry *registry;
  GMainContext *context;
  gint64 returned_at_ms;
} Forcer;

static gboolean
on_forced (gpointer data)
{
  Forcer *f = data;

  f->c->done = TRUE;
  f->c->ticks_at_done = f->c->ticks;
  g_main_loop_quit (f->c->loop);
  return G_SOURCE_REMOVE;
}

static gpointer
force_thread (gpointer data)
{
  Forcer *f = data;

  f->c->ok = redis_lock_registry_force_unlock_full (f->registry, "forced", f->c->cancellable,
                                                    &f->c->error);
  f->returned_at_ms = test_now_ms ();
  g_main_context_invoke (f->context, on_forced, f);
  return NULL;
}

static void
test_force_frozen (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autoptr (GError) error = NULL;
  Call c = { 0 };
  Forcer f = { &c, fx->registry, context, 0 };
  GSource *tick;
  GThread *thread;

  g_test_summary ("A forced unlock with a cancellable against a frozen server: cancelled by "
                  "a timer of the loop, it returns CANCELLED at once, not at the command "
                  "timeout; with the server back, the same call deletes the key");
  TEST_SKIP_IF_NO_SERVER (fx);
  holder = test_registry_new (fx);
  lock = test_obtain (holder, "forced");
  g_assert_true (redis_lock_try_lock_for (lock, 0, NULL, &error));
  g_assert_no_error (error);
  redis_lock_registry_set_command_timeout_ms (fx->registry, 10000);

  c.loop = g_main_loop_new (context, FALSE);
  c.cancellable = g_cancellable_new ();
  tick = g_timeout_source_new (TICK_MS);
  g_source_set_callback (tick, on_tick, &c, NULL);
  g_source_attach (tick, context);
  redis_lock_test_server_pause (fx->server);
  thread = g_thread_new ("forcer", force_thread, &f);
  g_main_loop_run (c.loop);
  g_thread_join (thread);
  redis_lock_test_server_resume (fx->server);
  g_source_destroy (tick);
  g_source_unref (tick);
  g_main_loop_unref (c.loop);

  g_test_message ("returned %" G_GINT64_FORMAT " ms after the cancel",
                  f.returned_at_ms - c.cancelled_at_ms);
  g_assert_error (c.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_false (c.ok);
  g_assert_cmpint (c.cancelled_at_ms, >, 0);
  /* Far below the command timeout of 10 s that the frozen request would wait out. */
  g_assert_cmpint (f.returned_at_ms - c.cancelled_at_ms, <, 2000);
  g_clear_error (&c.error);
  g_clear_object (&c.cancellable);

  /* The server answers again: the call with a cancellable forces the lock (the
   * cancelled request may have deleted it already). */
  {
    g_autoptr (GCancellable) live = g_cancellable_new ();
    g_autoptr (RedisLockLeaseInfo) info = NULL;

    redis_lock_registry_force_unlock_full (fx->registry, "forced", live, &error);
    g_assert_no_error (error);
    info = redis_lock_registry_get_lease_info (fx->registry, "forced", &error);
    g_assert_no_error (error);
    g_assert_null (info);
  }
  /* The holder learns its lease is gone. */
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
}

/* The registry made without blocking ------------------------------------------------ */

typedef struct
{
  Call c;
  RedisLockRegistry *registry;
} Made;

static void
on_made (GObject *source, GAsyncResult *result, gpointer data)
{
  Made *m = data;

  g_assert_null (source);
  m->registry = redis_lock_registry_new_finish (result, &m->c.error);
  m->c.done = TRUE;
  m->c.ticks_at_done = m->c.ticks;
  g_main_loop_quit (m->c.loop);
}

/* Makes a registry on @url without blocking, in a loop of a context of this thread,
 * with @frozen paused meanwhile when not NULL, until the call completes. */
static void
run_new (Made *m, const char *url, const char *registry_key, RedisLockTestServer *frozen)
{
  g_autoptr (GMainContext) context = g_main_context_new ();
  GSource *tick;

  g_main_context_push_thread_default (context);
  m->c.loop = g_main_loop_new (context, FALSE);
  tick = g_timeout_source_new (TICK_MS);
  g_source_set_callback (tick, on_tick, &m->c, NULL);
  g_source_attach (tick, context);
  if (frozen != NULL)
    redis_lock_test_server_pause (frozen);
  m->c.frozen = frozen;
  m->c.ticks_at_start = m->c.ticks;
  redis_lock_registry_new_async (url, registry_key, m->c.cancellable, on_made, m);
  g_assert_false (m->c.done);
  g_main_loop_run (m->c.loop);
  if (m->c.frozen != NULL)
    redis_lock_test_server_resume (g_steal_pointer (&m->c.frozen));
  g_source_destroy (tick);
  g_source_unref (tick);
  g_main_loop_unref (m->c.loop);
  g_main_context_pop_thread_default (context);
  g_assert_true (m->c.done);
}

/* The registry @m made works: a lock of it is taken and released. */
static void
check_made (Made *m)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_assert_no_error (m->c.error);
  g_assert_nonnull (m->registry);
  lock = test_obtain (m->registry, "made");
  g_assert_true (redis_lock_try_lock_for (lock, 0, NULL, &error));
  g_assert_no_error (error);
  unlock_ok (lock);
  g_clear_pointer (&m->registry, redis_lock_registry_unref);
}

static void
test_new_completes (TestFixture *fx, gconstpointer data)
{
  Made m = { 0 };

  g_test_summary ("A registry made without blocking completes in the caller's context with "
                  "a working registry; a bad URL completes with INVALID and no registry");
  TEST_SKIP_IF_NO_STORE (fx);
  run_new (&m, fx->url, "made-async", NULL);
  check_made (&m);

  m = (Made){ 0 };
  run_new (&m, "nonsense://", "made-async", NULL);
  g_assert_error (m.c.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_null (m.registry);
  g_clear_error (&m.c.error);
}

static void
test_new_frozen (TestFixture *fx, gconstpointer data)
{
  Made m = { 0 };

  g_test_summary ("Against a frozen server, making a registry without blocking leaves the "
                  "loop running: a timer keeps firing while it connects and resumes the "
                  "server itself; the call then completes with a working registry");
  TEST_SKIP_IF_NO_SERVER (fx);
  run_new (&m, fx->url, "made-async", fx->server);
  g_test_message ("%u ticks of %d ms before it completed", m.c.ticks_at_done - m.c.ticks_at_start,
                  TICK_MS);
  g_assert_cmpuint (m.c.ticks_at_done - m.c.ticks_at_start, >=, RESUME_AFTER);
  check_made (&m);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  test_add_stores_but_quorum ("/family/lock-all-async/completes", NULL, test_set_completes);
  test_add_redis ("/family/lock-all-async/frozen-server", NULL, test_set_frozen);
  test_add_redis ("/family/force-unlock-full/frozen-server", NULL, test_force_frozen);
  test_add_stores_but_quorum ("/family/registry-new-async/completes", NULL, test_new_completes);
  test_add_redis ("/family/registry-new-async/frozen-server", NULL, test_new_frozen);
  return g_test_run ();
}
