/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pretake.c: the attempt a release notification sends for a lock's sleeping owner.
 *
 * A thread that waits for a lease held elsewhere sleeps until the release's
 * notification; the registry's notification thread then sends the thread's SET NX PX
 * itself and wakes it, which reads the reply. These tests check what that must not
 * change: the lease so taken is the waiter's own (its value, renewed by the watchdog);
 * a fenced acquisition still moves the counter (it is not sent that way); and a lease
 * that the request takes for a waiter that gave up meanwhile (its deadline, a cancel,
 * close) is released, never left to its TTL. Each race is made certain, not likely:
 * the release is made by hand (DEL, PUBLISH), followed in the same write by CLIENT
 * PAUSE WRITE, so the notification goes out and the SET it triggers waits in the
 * server while the waiter gives up. The waiters' registries have the wait queue off
 * (redis_lock_registry_set_wait_queue()): a waiter in line is granted the lock by the
 * release instead, and no attempt is sent for it. Redis only: the memory store answers at once
 * (and the quorum store spans several servers), so no attempt is sent for a waiter
 * there.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define LONG_TTL_MS 30000
/* How long the server holds writes back after a release made by hand: longer than the
 * waiter's deadline in the deadline case, shorter than the command timeout (3 s). */
#define PAUSE_MS 1500
/* The waiter's wait in the deadline case. */
#define WAIT_MS 700

/* A thread that takes a lock (try_lock_full) and keeps it until told to unlock. */
typedef struct
{
  RedisLock *lock;
  gint64 wait_ms;
  GCancellable *cancellable;
  gint tid;
  TestSync sync;
  gboolean returned;
  gboolean result;
  GError *error;
  char *value;   /* the lease's value while held */
  guint64 token; /* the fencing token while held */
  gint64 called_ms;
  gint64 returned_ms;
  gboolean go; /* the test says: unlock */
} Holder;

static gpointer
holder_main (gpointer data)
{
  Holder *h = data;
  GError *error = NULL;
  gboolean result;

  g_atomic_int_set (&h->tid, test_thread_id ());
  h->called_ms = test_now_ms ();
  result = redis_lock_try_lock_for (h->lock, h->wait_ms, h->cancellable, &error);
  test_sync_lock (&h->sync);
  h->returned_ms = test_now_ms ();
  h->result = result;
  h->error = error;
  if (result)
    {
      h->value = redis_lock_dup_lease_value (h->lock);
      h->token = redis_lock_get_fencing_token (h->lock);
    }
  h->returned = TRUE;
  test_sync_broadcast (&h->sync);
  while (result && !h->go)
    test_sync_wait (&h->sync);
  test_sync_unlock (&h->sync);
  if (result)
    test_unlock_ok (h->lock);
  return NULL;
}

static GThread *
holder_start (Holder *h, RedisLock *lock, gint64 wait_ms)
{
  test_sync_init (&h->sync);
  h->lock = lock;
  h->wait_ms = wait_ms;
  return g_thread_new ("holder", holder_main, h);
}

static void
holder_wait_returned (Holder *h)
{
  g_assert_true (test_sync_wait_flag (&h->sync, &h->returned, 20000));
}

static void
holder_finish (Holder *h, GThread *thread)
{
  test_sync_lock (&h->sync);
  h->go = TRUE;
  test_sync_broadcast (&h->sync);
  test_sync_unlock (&h->sync);
  g_thread_join (thread);
  g_clear_error (&h->error);
  g_free (h->value);
  test_sync_clear (&h->sync);
}

/* Whether the thread @tid is in a timed condition wait (a futex FUTEX_WAIT_BITSET,
 * private), not blocked on a mutex (FUTEX_WAIT) nor in poll(): read from
 * /proc/self/task/TID/syscall (number and arguments). */
static gboolean
in_timed_wait (gint tid)
{
  g_autofree char *path = g_strdup_printf ("/proc/self/task/%d/syscall", tid);
  g_autofree char *text = NULL;
  g_auto (GStrv) fields = NULL;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return FALSE;
  fields = g_strsplit (g_strstrip (text), " ", -1);
  /* 202: futex on x86-64, 98 on arm64; op 0x89: FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG. */
  return g_strv_length (fields) >= 3
         && (strcmp (fields[0], "202") == 0 || strcmp (fields[0], "98") == 0)
         && (g_ascii_strtoull (fields[2], NULL, 16) & 0x7f) == 9;
}

/* The thread of @h, waiting in @registry, has found the lock held with notifications
 * confirmed and sleeps until a notification (the only timed condition wait after its
 * second attempt). */
static void
holder_wait_asleep (Holder *h, RedisLockRegistry *registry)
{
  TEST_WAIT_UNTIL (g_atomic_int_get (&h->tid) != 0, 10000);
  g_assert_true (test_wait_contended (registry, 2, 10000));
  TEST_WAIT_UNTIL (in_timed_wait (g_atomic_int_get (&h->tid)), 10000);
}

/* Releases @key as another client would (DEL, then its notification), and pauses
 * the server's writes for @pause_ms in the same write, so that the SET the
 * notification triggers waits in the server. */
static void
release_by_hand_and_pause (TestFixture *fx, const char *key, int pause_ms)
{
  g_autofree char *channel = g_strconcat (TEST_REGISTRY_KEY "-channel:", key, NULL);
  redisReply *reply;

  redisAppendCommand (fx->redis, "DEL %s", key);
  redisAppendCommand (fx->redis, "PUBLISH %s %s", channel, key);
  redisAppendCommand (fx->redis, "CLIENT PAUSE %d WRITE", pause_ms);
  for (int i = 0; i < 3; i++)
    {
      g_assert_cmpint (redisGetReply (fx->redis, (void **)&reply), ==, REDIS_OK);
      g_assert_true (reply->type != REDIS_REPLY_ERROR);
      freeReplyObject (reply);
    }
}

/* Clients whose command waits in the server (for the pause). */
static int
blocked_clients (TestFixture *fx)
{
  g_autofree char *info = test_redis_string (fx->redis, "INFO clients");
  const char *field = strstr (info, "blocked_clients:");

  g_assert_nonnull (field);
  return atoi (field + strlen ("blocked_clients:"));
}

static gboolean
key_exists (TestFixture *fx, const char *key)
{
  return test_redis_integer (fx->redis, "EXISTS %s", key) == 1;
}

static void
test_lease_is_the_waiters (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autofree char *key = test_lock_key ("pretake");
  g_autofree char *stored = NULL;
  Holder h = { 0 };
  GThread *thread;

  g_test_summary ("A lease taken for a waiter on the release's notification is the waiter's: "
                  "its value in the server, renewed by the watchdog while it holds it, "
                  "released by its unlock");
  TEST_SKIP_IF_NO_SERVER (fx);

  a = test_registry_new (fx);
  b = test_registry_new (fx);
  redis_lock_registry_set_wait_queue (b, FALSE);
  redis_lock_registry_set_expire_after_ms (b, 600);
  la = test_obtain (a, "pretake");
  lb = test_obtain (b, "pretake");
  test_lock_ok (la);
  thread = holder_start (&h, lb, 20000);
  holder_wait_asleep (&h, b);
  test_unlock_ok (la);
  holder_wait_returned (&h);
  g_assert_no_error (h.error);
  g_assert_true (h.result);
  test_assert_value_of (h.value, b);
  /* Time is the subject: three TTLs later the lease is still the holder's. */
  g_usleep (1800 * 1000);
  stored = test_redis_get (fx->redis, key);
  g_assert_cmpstr (stored, ==, h.value);
  holder_finish (&h, thread);
  g_assert_false (key_exists (fx, key));
}

static void
test_fencing_moves_counter (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  Holder h = { 0 };
  GThread *thread;
  guint64 first;

  g_test_summary ("With fencing on, a waiter woken by the release's notification still gets "
                  "a token greater than the previous holder's");
  TEST_SKIP_IF_NO_SERVER (fx);

  a = test_registry_new (fx);
  b = test_registry_new (fx);
  redis_lock_registry_set_wait_queue (b, FALSE);
  redis_lock_registry_set_fencing (a, TRUE);
  redis_lock_registry_set_fencing (b, TRUE);
  la = test_obtain (a, "fenced");
  lb = test_obtain (b, "fenced");
  test_lock_ok (la);
  first = redis_lock_get_fencing_token (la);
  g_assert_cmpuint (first, >, 0);
  thread = holder_start (&h, lb, 20000);
  holder_wait_asleep (&h, b);
  test_unlock_ok (la);
  holder_wait_returned (&h);
  g_assert_true (h.result);
  g_assert_cmpuint (h.token, >, first);
  holder_finish (&h, thread);
}

/* How the waiter gives up while the SET sent for it waits in the paused server. */
typedef enum
{
  GIVE_UP_DEADLINE,
  GIVE_UP_CANCEL,
  GIVE_UP_CLOSE,
} GiveUp;

static void
test_given_up_lease_released (TestFixture *fx, gconstpointer data)
{
  GiveUp how = GPOINTER_TO_INT (data);
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  g_autofree char *key = test_lock_key ("given-up");
  Holder h = { 0 };
  GThread *thread;

  g_test_summary ("A lease that the attempt sent on a release's notification takes for a "
                  "waiter that gave up meanwhile (its deadline, a cancel, close) is released "
                  "at once, not left to its TTL");
  TEST_SKIP_IF_NO_SERVER (fx);

  b = test_registry_new (fx);
  redis_lock_registry_set_wait_queue (b, FALSE);
  redis_lock_registry_set_expire_after_ms (b, LONG_TTL_MS);
  /* Its checks write to the server, which the pause holds back too: that wait is not
   * the subject here. */
  redis_lock_registry_set_deadlock_detection (b, FALSE);
  lb = test_obtain (b, "given-up");
  /* Held by a client of another kind, without expiry to speak of. */
  freeReplyObject (
      test_redis_command (fx->redis, "SET %s %s PX %d", key, "foreign-owner", LONG_TTL_MS));
  h.cancellable = cancellable;
  thread = holder_start (&h, lb, how == GIVE_UP_DEADLINE ? WAIT_MS : -1);
  holder_wait_asleep (&h, b);
  release_by_hand_and_pause (fx, key, PAUSE_MS);
  /* The SET sent on the notification is in the server, held back by the pause. */
  TEST_WAIT_UNTIL (blocked_clients (fx) == 1, 10000);
  switch (how)
    {
      case GIVE_UP_DEADLINE:
        break;
      case GIVE_UP_CANCEL:
        g_cancellable_cancel (cancellable);
        break;
      case GIVE_UP_CLOSE:
      default:
        redis_lock_registry_close (b);
        break;
    }
  holder_wait_returned (&h);
  /* At its deadline the acquisition makes one last attempt of its own, which the end
   * of the pause may let through: then it holds the lock, until holder_finish(). */
  if (how != GIVE_UP_DEADLINE)
    {
      g_assert_false (h.result);
      g_assert_nonnull (h.error);
    }
  else
    {
      /* Not acquired in time, or an error (the server did not answer in time), or
       * acquired by that last attempt; but within the total deadline: the waiter does
       * not wait for the paused reply. */
      g_assert_cmpint (h.returned_ms - h.called_ms, <, WAIT_MS + PAUSE_MS / 2);
    }
  holder_finish (&h, thread);
  /* A write of ours waits for the end of the pause, after the SET sent for the waiter
   * (the server resumes paused clients in order); the lease that SET takes is released
   * within moments, far from its 30 s TTL. */
  freeReplyObject (test_redis_command (fx->redis, "SET %s %s", "pretake-pause-over", "1"));
  TEST_WAIT_UNTIL (!key_exists (fx, key), 10000);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  test_add_redis ("/pretake/lease-is-the-waiters", NULL, test_lease_is_the_waiters);
  test_add_redis ("/pretake/fencing-moves-counter", NULL, test_fencing_moves_counter);
  test_add_redis ("/pretake/given-up/deadline", GINT_TO_POINTER (GIVE_UP_DEADLINE),
                  test_given_up_lease_released);
  test_add_redis ("/pretake/given-up/cancel", GINT_TO_POINTER (GIVE_UP_CANCEL),
                  test_given_up_lease_released);
  test_add_redis ("/pretake/given-up/close", GINT_TO_POINTER (GIVE_UP_CLOSE),
                  test_given_up_lease_released);
  return g_test_run ();
}
