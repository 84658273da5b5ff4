/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify-down.c: waiters of the whole lock family while the subscription is down
 * (tests/notify.c registers these with notify_add_down_tests()).
 *
 * registry.h promises SPIN timing while notifications are down: a waiter retries every
 * idle_between_tries_ms instead of waiting for a subscription that may be slow to come
 * back. And a subscription killed on a healthy server comes back at once, however many
 * times it was killed before: the reconnection backs off only while the server cannot
 * be reached. Each test runs for a plain lock, a semaphore, a read and a write of a
 * read-write lock, each with its blocking and its asynchronous call: a holder in one
 * registry, a waiter in another (as in another process), and a release the waiter
 * must notice in time. And a subscription answered BUSY (a long script) is made again,
 * not taken for a refusal. Redis only: the subscription is a real server's.
 */
#include "notify-helpers.h"
#include "proxy.h"

#define NAME "blind"
#define KILLS 8

/* What the waiter takes (the holder takes what keeps it out). */
typedef enum
{
  KIND_LOCK,      /* the holder holds the lock */
  KIND_SEMAPHORE, /* the holder holds the one permit */
  KIND_READ,      /* the holder writes */
  KIND_WRITE,     /* the holder reads */
} Kind;

typedef struct
{
  Kind kind;
  gboolean async;
} Variant;

/* One registry's handle on the contended object, and what it holds of it. */
typedef struct
{
  Kind kind;
  RedisLock *lock;
  RedisSemaphore *semaphore;
  RedisRWLock *rw;
  RedisPermit *permit;
} Side;

static void
side_init (Side *side, RedisLockRegistry *registry, Kind kind)
{
  g_autoptr (GError) error = NULL;

  *side = (Side){ .kind = kind };
  if (kind == KIND_LOCK)
    side->lock = test_obtain (registry, NAME);
  else if (kind == KIND_SEMAPHORE)
    side->semaphore = redis_lock_registry_obtain_semaphore (registry, NAME, 1, &error);
  else
    side->rw = redis_lock_registry_obtain_rw (registry, NAME, &error);
  g_assert_no_error (error);
}

static void
side_clear (Side *side)
{
  g_assert_null (side->permit);
  g_clear_pointer (&side->lock, redis_lock_unref);
  g_clear_pointer (&side->semaphore, redis_semaphore_unref);
  g_clear_pointer (&side->rw, redis_rw_lock_unref);
}

/* The holder takes what keeps a waiter of its kind out. */
static void
holder_take (Side *side)
{
  g_autoptr (GError) error = NULL;

  switch (side->kind)
    {
    case KIND_LOCK:
      test_lock_ok (side->lock);
      return;
    case KIND_SEMAPHORE:
      side->permit = redis_semaphore_try_acquire_for (side->semaphore, 5000, NULL, &error);
      g_assert_no_error (error);
      g_assert_nonnull (side->permit);
      return;
    case KIND_READ:
      TEST_ASSERT_OK (redis_rw_lock_try_write_lock_for (side->rw, 5000, NULL, &error));
      return;
    case KIND_WRITE:
    default:
      TEST_ASSERT_OK (redis_rw_lock_try_read_lock_for (side->rw, 5000, NULL, &error));
      return;
    }
}

static void
holder_release (Side *side)
{
  g_autoptr (GError) error = NULL;

  switch (side->kind)
    {
    case KIND_LOCK:
      test_unlock_ok (side->lock);
      return;
    case KIND_SEMAPHORE:
      TEST_ASSERT_OK (redis_permit_release (g_steal_pointer (&side->permit), &error));
      return;
    case KIND_READ:
      TEST_ASSERT_OK (redis_rw_lock_write_unlock (side->rw, &error));
      return;
    case KIND_WRITE:
    default:
      TEST_ASSERT_OK (redis_rw_lock_read_unlock (side->rw, &error));
      return;
    }
}

/* The waiter gives back what it took. */
static void
waiter_release (Side *side)
{
  g_autoptr (GError) error = NULL;

  switch (side->kind)
    {
    case KIND_READ:
      TEST_ASSERT_OK (redis_rw_lock_read_unlock (side->rw, &error));
      return;
    case KIND_WRITE:
      TEST_ASSERT_OK (redis_rw_lock_write_unlock (side->rw, &error));
      return;
    case KIND_LOCK:
    case KIND_SEMAPHORE:
    default:
      holder_release (side);
      return;
    }
}

/* ---- a thread that waits, blocking or asynchronous ---- */

typedef struct
{
  Side *side;
  gboolean async;

  TestSync sync;
  gboolean returned;
  gboolean acquired;
  GError *error;
  gint64 returned_ms;
  GThread *thread;
  /* The asynchronous call's own. */
  gboolean done;
} BlindWaiter;

static void
on_async_done (GObject *source, GAsyncResult *result, gpointer data)
{
  BlindWaiter *w = data;
  Side *side = w->side;

  switch (side->kind)
    {
    case KIND_LOCK:
      w->acquired = redis_lock_lock_finish (side->lock, result, &w->error);
      break;
    case KIND_SEMAPHORE:
      side->permit = redis_semaphore_acquire_finish (side->semaphore, result, &w->error);
      w->acquired = side->permit != NULL;
      break;
    case KIND_READ:
      w->acquired = redis_rw_lock_read_lock_finish (side->rw, result, &w->error);
      break;
    case KIND_WRITE:
    default:
      w->acquired = redis_rw_lock_write_lock_finish (side->rw, result, &w->error);
      break;
    }
  w->done = TRUE;
}

/* Takes what the waiter waits for within @wait_ms, in the calling thread's own main
 * context for an asynchronous call. */
static void
waiter_take (BlindWaiter *w, gint64 wait_ms)
{
  Side *side = w->side;
  g_autoptr (GMainContext) context = NULL;

  if (!w->async)
    {
      switch (side->kind)
        {
        case KIND_LOCK:
          w->acquired = redis_lock_try_lock_for (side->lock, wait_ms, NULL, &w->error);
          break;
        case KIND_SEMAPHORE:
          side->permit = redis_semaphore_try_acquire_for (side->semaphore, wait_ms, NULL,
                                                          &w->error);
          w->acquired = side->permit != NULL;
          break;
        case KIND_READ:
          w->acquired = redis_rw_lock_try_read_lock_for (side->rw, wait_ms, NULL, &w->error);
          break;
        case KIND_WRITE:
        default:
          w->acquired = redis_rw_lock_try_write_lock_for (side->rw, wait_ms, NULL, &w->error);
          break;
        }
      return;
    }
  context = g_main_context_new ();
  g_main_context_push_thread_default (context);
  switch (side->kind)
    {
    case KIND_LOCK:
      redis_lock_lock_async (side->lock, wait_ms, 0, NULL, on_async_done, w);
      break;
    case KIND_SEMAPHORE:
      redis_semaphore_acquire_async (side->semaphore, wait_ms, NULL, on_async_done, w);
      break;
    case KIND_READ:
      redis_rw_lock_read_lock_async (side->rw, wait_ms, NULL, on_async_done, w);
      break;
    case KIND_WRITE:
    default:
      redis_rw_lock_write_lock_async (side->rw, wait_ms, NULL, on_async_done, w);
      break;
    }
  while (!w->done)
    g_main_context_iteration (context, TRUE);
  g_main_context_pop_thread_default (context);
}

/* The waiter's thread: takes, reports when, and gives back what it got at once. */
static gpointer
blind_waiter_thread (gpointer data)
{
  BlindWaiter *w = data;

  waiter_take (w, 20000);
  test_sync_lock (&w->sync);
  w->returned = TRUE;
  w->returned_ms = test_now_ms ();
  test_sync_broadcast (&w->sync);
  test_sync_unlock (&w->sync);
  if (w->acquired)
    waiter_release (w->side);
  return NULL;
}

/* Starts a waiter of @side in @registry and returns once its first attempt found it
 * held. */
static BlindWaiter *
blind_waiter_start (RedisLockRegistry *registry, Side *side, gboolean async)
{
  BlindWaiter *w = g_new0 (BlindWaiter, 1);
  guint64 before = test_stats (registry).contended_attempts;

  w->side = side;
  w->async = async;
  test_sync_init (&w->sync);
  w->thread = g_thread_new ("blind-waiter", blind_waiter_thread, w);
  TEST_WAIT_UNTIL (test_stats (registry).contended_attempts > before, 10000);
  return w;
}

/* Asserts that the waiter acquired, within 20 s, and returns how long after @t0_ms. */
static gint64
blind_waiter_finish (BlindWaiter *w, gint64 t0_ms)
{
  gint64 took;

  g_assert_true (test_sync_wait_flag (&w->sync, &w->returned, 20000));
  g_thread_join (w->thread);
  g_assert_no_error (w->error);
  g_assert_true (w->acquired);
  took = w->returned_ms - t0_ms;
  test_sync_clear (&w->sync);
  g_free (w);
  return took;
}

/* ---- tests ---- */

/* The pattern subscriptions on the server: the waiter's registry's (the holder's
 * subscriber only guards its leases, with no pattern). */
static long long
pubsub_patterns (TestFixture *fx)
{
  return test_redis_integer (fx->redis, "PUBSUB NUMPAT");
}

static void
test_spin_while_unconfirmed (TestFixture *fx, gconstpointer data)
{
  const Variant *v = data;
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLockRegistry) a = NULL, b = NULL;
  Side holder, waiting;
  BlindWaiter *w;
  guint64 attempts;
  gint64 t0, took;

  g_test_summary ("While the subscription is down (its connection killed, and the new one's "
                  "subscription not answered), a waiter of a lock, a semaphore, a read or a "
                  "write retries every idle_between_tries_ms (100 ms), as registry.h promises, "
                  "and notices a release within about that interval, not after the connect "
                  "timeout (3 s) it waited for the subscription before");
  TEST_SKIP_IF_NO_SERVER (fx);

  /* The waiter's registry reaches the server through a proxy that can hold its new
   * subscription back; the holder's goes straight to it. Leases last a minute, so only
   * a retry (or a notification) can explain a fast hand-off. */
  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (fx->server));
  a = registry_new_slow_spin (fx);
  b = test_registry_new_on (test_proxy_get_url (proxy));
  redis_lock_registry_set_expire_after_ms (b, MINUTE_MS);
  redis_lock_registry_set_idle_between_tries_ms (b, 100);
  side_init (&holder, a, v->kind);
  side_init (&waiting, b, v->kind);

  holder_take (&holder);
  w = blind_waiter_start (b, &waiting, v->async);
  TEST_WAIT_UNTIL (pubsub_patterns (fx) == 1, 10000);

  /* The subscription breaks, and its successor's PSUBSCRIBE is held back. */
  attempts = test_stats (b).contended_attempts;
  test_proxy_hold_requests (proxy, "PSUBSCRIBE");
  g_assert_cmpint (test_redis_integer (fx->redis, "CLIENT KILL TYPE pubsub"), >=, 1);
  g_assert_true (test_proxy_wait_held (proxy, 10000));
  /* The break woke the waiter, whose attempt found it held with notifications down. */
  TEST_WAIT_UNTIL (test_stats (b).contended_attempts > attempts, 10000);

  t0 = test_now_ms ();
  holder_release (&holder);
  took = blind_waiter_finish (w, t0);
  g_test_message ("acquired %" G_GINT64_FORMAT " ms after the release", took);
  g_assert_cmpint (took, <, 100 + 500);

  /* The subscription is answered at last, and notifications are back. */
  test_proxy_release_held (proxy);
  TEST_WAIT_UNTIL (pubsub_patterns (fx) == 1, 10000);
  side_clear (&holder);
  side_clear (&waiting);
}

static void
test_kills_in_a_row (TestFixture *fx, gconstpointer data)
{
  const Variant *v = data;
  g_autoptr (RedisLockRegistry) a = NULL, b = NULL;
  Side holder, waiting;
  BlindWaiter *w;
  guint64 attempts;
  gint64 t0, took;

  g_test_summary ("A subscription killed many times in a row on a healthy server comes back "
                  "at once each time: after the eighth kill, a release is noticed within a "
                  "second by a waiter of a lock, a semaphore, a read or a write that only a "
                  "notification (or the resubscription) can wake, not after a reconnection "
                  "delay that doubled with each kill up to 5 s");
  TEST_SKIP_IF_NO_SERVER (fx);

  /* A minute between tries: the waiter is woken by notifications only, and by the
   * subscription coming back (which wakes every waiter). */
  a = registry_new_slow_spin (fx);
  b = registry_new_slow_spin (fx);
  side_init (&holder, a, v->kind);
  side_init (&waiting, b, v->kind);

  holder_take (&holder);
  w = blind_waiter_start (b, &waiting, v->async);
  TEST_WAIT_UNTIL (pubsub_patterns (fx) == 1, 10000);
  for (guint i = 1; i < KILLS; i++)
    {
      guint64 connections = test_stats (b).subscriber_connections;

      t0 = test_now_ms ();
      g_assert_cmpint (test_redis_integer (fx->redis, "CLIENT KILL TYPE pubsub"), >=, 1);
      TEST_WAIT_UNTIL (test_stats (b).subscriber_connections > connections
                           && pubsub_patterns (fx) == 1,
                       10000);
      g_test_message ("kill %u: resubscribed after %" G_GINT64_FORMAT " ms", i,
                      test_now_ms () - t0);
    }

  /* The last kill, and a release once the waiter found it held after the break. */
  attempts = test_stats (b).contended_attempts;
  g_assert_cmpint (test_redis_integer (fx->redis, "CLIENT KILL TYPE pubsub"), >=, 1);
  TEST_WAIT_UNTIL (test_stats (b).contended_attempts > attempts, 10000);
  t0 = test_now_ms ();
  holder_release (&holder);
  took = blind_waiter_finish (w, t0);
  g_test_message ("kill %u: acquired %" G_GINT64_FORMAT " ms after the release", KILLS, took);
  g_assert_cmpint (took, <, 1000);
  side_clear (&holder);
  side_clear (&waiting);
}

static const struct
{
  const char *name;
  Variant variant;
} variants[] = {
  { "lock", { KIND_LOCK, FALSE } },         { "lock-async", { KIND_LOCK, TRUE } },
  { "semaphore", { KIND_SEMAPHORE, FALSE } }, { "semaphore-async", { KIND_SEMAPHORE, TRUE } },
  { "read", { KIND_READ, FALSE } },         { "read-async", { KIND_READ, TRUE } },
  { "write", { KIND_WRITE, FALSE } },       { "write-async", { KIND_WRITE, TRUE } },
};

/* A script that keeps the server busy for ARGV[1] ms: meanwhile the server answers
 * every other client's command with BUSY (past busy-reply-threshold). */
static const char busy_script[]
    = "local t0 = redis.call('TIME')\n"
      "repeat\n"
      "  local t = redis.call('TIME')\n"
      "until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > tonumber(ARGV[1]) * 1000\n"
      "return 1\n";

static gpointer
busy_thread (gpointer data)
{
  redisContext *c = test_redis_connect (data);

  freeReplyObject (test_redis_command (c, "EVAL %s 0 800", busy_script));
  redisFree (c);
  return NULL;
}

/* Whether the server answers PING with BUSY now. */
static gboolean
server_busy (gpointer data)
{
  TestFixture *fx = data;
  redisReply *reply = redisCommand (fx->redis, "PING");
  gboolean busy = reply != NULL && reply->type == REDIS_REPLY_ERROR
                  && g_str_has_prefix (reply->str, "BUSY");

  if (reply != NULL)
    freeReplyObject (reply);
  return busy;
}

static void
test_busy_script (TestFixture *fx, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLockRegistry) a = NULL, b = NULL;
  Side holder, waiting;
  BlindWaiter *w;
  GThread *busy;
  gint64 t0, took;

  g_test_summary ("A subscription answered BUSY (a script runs long on the server) is no "
                  "refusal: no warning, no fall back to polling for good; the subscription "
                  "is made again once the script ends, and a waiter hears the next release");
  TEST_SKIP_IF_NO_SERVER (fx);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (fx->server));
  a = registry_new_slow_spin (fx);
  b = test_registry_new_on (test_proxy_get_url (proxy));
  redis_lock_registry_set_expire_after_ms (b, MINUTE_MS);
  redis_lock_registry_set_idle_between_tries_ms (b, MINUTE_MS);
  side_init (&holder, a, KIND_LOCK);
  side_init (&waiting, b, KIND_LOCK);
  holder_take (&holder);
  w = blind_waiter_start (b, &waiting, FALSE);
  TEST_WAIT_UNTIL (pubsub_patterns (fx) == 1, 10000);

  /* The subscription breaks; its successor's PSUBSCRIBE reaches the server only while
   * a script keeps it busy. */
  test_proxy_hold_requests (proxy, "PSUBSCRIBE");
  g_assert_cmpint (test_redis_integer (fx->redis, "CLIENT KILL TYPE pubsub"), >=, 1);
  g_assert_true (test_proxy_wait_held (proxy, 10000));
  freeReplyObject (test_redis_command (fx->redis, "CONFIG SET busy-reply-threshold 50"));
  busy = g_thread_new ("busy-script", busy_thread, fx->server);
  g_assert_true (test_wait_until (server_busy, fx, 5000));
  test_proxy_release_held (proxy);
  g_thread_join (busy);
  freeReplyObject (test_redis_command (fx->redis, "CONFIG SET busy-reply-threshold 5000"));

  /* Subscribed again: the release is heard (the spin interval is a minute). */
  TEST_WAIT_UNTIL (pubsub_patterns (fx) == 1, 10000);
  t0 = test_now_ms ();
  holder_release (&holder);
  took = blind_waiter_finish (w, t0);
  g_test_message ("acquired %" G_GINT64_FORMAT " ms after the release", took);
  g_assert_cmpint (took, <, 5000);
  side_clear (&holder);
  side_clear (&waiting);
}

void
notify_add_down_tests (void)
{
  for (gsize i = 0; i < G_N_ELEMENTS (variants); i++)
    {
      g_autofree char *spin = g_strconcat ("/notify/down/spin-while-unconfirmed/",
                                           variants[i].name, NULL);
      g_autofree char *kills = g_strconcat ("/notify/down/kills-in-a-row/", variants[i].name,
                                            NULL);

      test_add_redis (spin, &variants[i].variant, test_spin_while_unconfirmed);
      test_add_redis (kills, &variants[i].variant, test_kills_in_a_row);
    }
  test_add_redis ("/notify/down/busy-script", NULL, test_busy_script);
}
