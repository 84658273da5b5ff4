/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore.c: tests of the counting semaphore whose permits are leases.
 *
 * Most cases run on every store (`/redis/...`, `/memory/...`, `/cluster/...`,
 * `/tls/...`): at most N holders at once among threads and registries, the size
 * stored with the semaphore, a waiter woken by a release notification (with the spin
 * interval and the TTL far away, so nothing else could wake it), timeouts,
 * cancellation, close, and a lost permit reported the three ways (forced open too, told
 * within a second). The quorum refuses
 * semaphores with INVALID. What needs a server of its own runs on Redis only: the
 * round trips of an uncontended acquire and release, and other processes: this
 * program started again as a child (`--hold URL NAME PERMITS TTL`) that takes a
 * permit, says so on its standard output and gives it back when told on its standard
 * input, or is killed holding it, whose permit must then come back at its TTL; and
 * an attempt whose answer a proxy kept back, whose permit must come back at once.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proxy.h"
#include "semaphore-helpers.h"

char *
permit_key (const char *name, guint index)
{
  return g_strdup_printf ("%s:{%s}:sem:%u", TEST_REGISTRY_KEY, name, index);
}

RedisSemaphore *
obtain_semaphore (RedisLockRegistry *registry, const char *name, guint permits)
{
  g_autoptr (GError) error = NULL;
  RedisSemaphore *semaphore = redis_lock_registry_obtain_semaphore (registry, name, permits,
                                                                    &error);

  g_assert_no_error (error);
  g_assert_nonnull (semaphore);
  return semaphore;
}

RedisPermit *
acquire_ok (RedisSemaphore *semaphore, gint64 wait_ms)
{
  g_autoptr (GError) error = NULL;
  RedisPermit *permit = redis_semaphore_try_acquire_for (semaphore, wait_ms, NULL, &error);

  g_assert_no_error (error);
  g_assert_nonnull (permit);
  return permit;
}

void
release_ok (RedisPermit *permit)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (redis_permit_release (permit, &error));
  g_assert_no_error (error);
}

guint
available (RedisSemaphore *semaphore)
{
  g_autoptr (GError) error = NULL;
  guint n = redis_semaphore_get_available (semaphore, &error);

  g_assert_no_error (error);
  return n;
}

/* ---- basics ---- */

static void
test_permits_count (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;
  RedisPermit *a, *b;
  g_autofree char *key_a = NULL, *key_b = NULL, *owner_a = NULL, *size = NULL;
  g_autofree char *size_key = g_strdup_printf ("%s:{count}:sem", TEST_REGISTRY_KEY);

  g_test_summary ("A semaphore of 2 gives two permits, each its own lease holding the "
                  "registry's value with a TTL; a third attempt gets none (NULL, no error); "
                  "a release gives one back");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = obtain_semaphore (fx->registry, "count", 2);
  g_assert_cmpstr (redis_semaphore_get_name (sem), ==, "count");
  g_assert_cmpuint (redis_semaphore_get_permits (sem), ==, 2);
  g_assert_cmpuint (available (sem), ==, 2);
  a = acquire_ok (sem, 0);
  b = acquire_ok (sem, 0);
  g_assert_cmpuint (redis_permit_get_index (a), !=, redis_permit_get_index (b));
  g_assert_cmpuint (redis_permit_get_index (a), <, 2);
  g_assert_cmpuint (redis_permit_get_index (b), <, 2);
  key_a = permit_key ("count", redis_permit_get_index (a));
  key_b = permit_key ("count", redis_permit_get_index (b));
  owner_a = test_store_get_owner (fx, key_a);
  test_assert_value_of (owner_a, fx->registry);
  g_assert_cmpstr (redis_permit_get_key (a), ==, key_a);
  {
    g_autofree char *value = redis_permit_dup_lease_value (a);
    g_assert_cmpstr (value, ==, owner_a);
  }
  g_assert_cmpint (test_store_get_pttl (fx, key_a), >, 0);
  g_assert_cmpint (test_store_get_pttl (fx, key_a), <=, 60000);
  size = test_store_get_owner (fx, size_key);
  g_assert_cmpstr (size, ==, "2");
  g_assert_cmpuint (available (sem), ==, 0);

  g_assert_null (redis_semaphore_try_acquire_for (sem, 0, NULL, &error));
  g_assert_no_error (error);

  release_ok (a);
  g_assert_false (test_store_exists (fx, key_a));
  g_assert_true (test_store_exists (fx, key_b));
  g_assert_cmpuint (available (sem), ==, 1);
  a = acquire_ok (sem, 0);
  release_ok (a);
  release_ok (b);
  g_assert_cmpuint (available (sem), ==, 2);
}

static void
test_invalid_arguments (TestFixture *fx, gconstpointer data)
{
  g_autofree char *long_name = g_strnfill (1001, 'n');
  const char *bad_names[] = { "", "a{b", "a}b", long_name };

  g_test_summary ("0 permits, more than the maximum, a NULL, empty, braced or too long name "
                  "are INVALID");
  TEST_SKIP_IF_NO_STORE (fx);

  for (guint permits = 0; permits <= REDIS_SEMAPHORE_MAX_PERMITS + 1;
       permits += REDIS_SEMAPHORE_MAX_PERMITS + 1)
    {
      g_autoptr (GError) error = NULL;
      g_assert_null (redis_lock_registry_obtain_semaphore (fx->registry, "s", permits, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad_names); i++)
    {
      g_autoptr (GError) error = NULL;
      g_assert_null (redis_lock_registry_obtain_semaphore (fx->registry, bad_names[i], 1, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
    }
  {
    g_autoptr (GError) error = NULL;
    g_assert_null (redis_lock_registry_obtain_semaphore (fx->registry, NULL, 1, &error));
    g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  }
}

static void
test_size_mismatch (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisSemaphore) sem = NULL, wrong = NULL;
  g_autoptr (GError) error = NULL, count_error = NULL;
  RedisPermit *permit;

  g_test_summary ("The size is stored with the semaphore: another registry using another "
                  "size gets INVALID naming both sizes, from an acquisition and a count, and "
                  "takes nothing");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = obtain_semaphore (fx->registry, "sized", 2);
  permit = acquire_ok (sem, 0);
  other = test_registry_new (fx);
  wrong = obtain_semaphore (other, "sized", 7);
  g_assert_null (redis_semaphore_try_acquire_for (wrong, 1000, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "2"));
  g_assert_nonnull (strstr (error->message, "7"));
  g_assert_cmpuint (redis_semaphore_get_available (wrong, &count_error), ==, 0);
  g_assert_error (count_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_cmpuint (available (sem), ==, 1);
  release_ok (permit);
}

/* ---- contention ---- */

typedef struct
{
  RedisSemaphore *sems[2]; /* two registries on one store */
  guint permits;
  guint rounds;
  gint inside;     /* atomic: holders now */
  gint max_inside; /* atomic: the most seen */
  gint done;       /* atomic: sections completed */
} Contention;

static void
contend (guint index, gpointer data)
{
  Contention *c = data;

  for (guint i = 0; i < c->rounds; i++)
    {
      RedisPermit *permit = acquire_ok (c->sems[index % 2], 20000);
      gint now = g_atomic_int_add (&c->inside, 1) + 1;
      gint max = g_atomic_int_get (&c->max_inside);

      while (now > max && !g_atomic_int_compare_and_exchange (&c->max_inside, max, now))
        max = g_atomic_int_get (&c->max_inside);
      /* The section lasts a moment, so that holders overlap. */
      g_usleep (500);
      g_atomic_int_add (&c->inside, -1);
      g_atomic_int_inc (&c->done);
      release_ok (permit);
    }
}

static void
test_contention (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  Contention c = { .permits = 3, .rounds = 15 };
  guint threads = 8;

  g_test_summary ("Eight threads of two registries take permits of a semaphore of 3 in a "
                  "loop: never more than 3 inside at once, every section done");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  c.sems[0] = obtain_semaphore (fx->registry, "busy", c.permits);
  c.sems[1] = obtain_semaphore (other, "busy", c.permits);
  test_run_threads (threads, contend, &c);
  g_assert_cmpint (c.max_inside, <=, (gint) c.permits);
  g_assert_cmpint (c.max_inside, >=, 1);
  g_assert_cmpint (c.done, ==, (gint) (threads * c.rounds));
  g_assert_cmpuint (available (c.sems[0]), ==, c.permits);
  redis_semaphore_unref (c.sems[0]);
  redis_semaphore_unref (c.sems[1]);
}

/* ---- waiting ---- */

typedef struct
{
  RedisSemaphore *sem;
  gint64 wait_ms;
  GCancellable *cancellable;
  gint tid;  /* atomic */
  gint done; /* atomic */
  RedisPermit *permit;
  GError *error;
  gint64 returned_ms;
} Waiter;

static gpointer
waiter_main (gpointer data)
{
  Waiter *w = data;

  g_atomic_int_set (&w->tid, test_thread_id ());
  w->permit = redis_semaphore_try_acquire_for (w->sem, w->wait_ms, w->cancellable, &w->error);
  w->returned_ms = test_now_ms ();
  g_atomic_int_set (&w->done, 1);
  return NULL;
}

/* Starts a waiter and returns once it sleeps in the library, its attempt made. */
static GThread *
waiter_start (Waiter *w, RedisLockRegistry *registry, guint64 contended_before)
{
  GThread *thread = g_thread_new ("waiter", waiter_main, w);

  g_assert_true (test_wait_contended (registry, contended_before + 1, 10000));
  test_wait_threads_blocked (&w->tid, 1, 10000);
  return thread;
}

static gboolean
waiter_done (gpointer data)
{
  return g_atomic_int_get (&((Waiter *) data)->done) != 0;
}

static void
test_wakeup_by_notification (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisSemaphore) sem = NULL;
  Waiter w = { 0 };
  RedisPermit *held;
  GThread *thread;
  gint64 released_ms;

  g_test_summary ("A waiter of another registry is woken by the release of a permit at once: "
                  "the holder's TTL (60 s) and the spin interval (60 s) are far away");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  redis_lock_registry_set_idle_between_tries_ms (other, 60000);
  sem = obtain_semaphore (fx->registry, "wake", 1);
  held = acquire_ok (sem, 0);
  w.sem = obtain_semaphore (other, "wake", 1);
  w.wait_ms = 30000;
  thread = waiter_start (&w, other, test_stats (other).contended_attempts);
  g_assert_false (waiter_done (&w));

  released_ms = test_now_ms ();
  release_ok (held);
  g_assert_true (test_wait_until (waiter_done, &w, 10000));
  g_thread_join (thread);
  g_assert_no_error (w.error);
  g_assert_nonnull (w.permit);
  g_assert_cmpint (w.returned_ms - released_ms, <, 2000);
  release_ok (w.permit);
  redis_semaphore_unref (w.sem);
}

static void
test_wakeup_same_registry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  Waiter w = { 0 };
  RedisPermit *held;
  GThread *thread;
  gint64 released_ms;

  g_test_summary ("Threads of one registry contend for permits too: a second thread waits "
                  "for the one permit and is woken by its release");
  TEST_SKIP_IF_NO_STORE (fx);

  redis_lock_registry_set_idle_between_tries_ms (fx->registry, 60000);
  sem = obtain_semaphore (fx->registry, "local", 1);
  held = acquire_ok (sem, 0);
  w.sem = sem;
  w.wait_ms = 30000;
  thread = waiter_start (&w, fx->registry, test_stats (fx->registry).contended_attempts);
  released_ms = test_now_ms ();
  release_ok (held);
  g_assert_true (test_wait_until (waiter_done, &w, 10000));
  g_thread_join (thread);
  g_assert_no_error (w.error);
  g_assert_nonnull (w.permit);
  g_assert_cmpint (w.returned_ms - released_ms, <, 2000);
  release_ok (w.permit);
}

static void
test_timeout (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;
  RedisPermit *held;
  gint64 start;

  g_test_summary ("With every permit held, try_acquire_for returns NULL without an error "
                  "after its wait, not before and not much later");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = obtain_semaphore (fx->registry, "timeout", 1);
  held = acquire_ok (sem, 0);
  start = test_now_ms ();
  g_assert_null (redis_semaphore_try_acquire_for (sem, 300, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (test_now_ms () - start, >=, 299);
  g_assert_cmpint (test_now_ms () - start, <, 3000);
  release_ok (held);
}

static void
test_cancel (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  Waiter w = { 0 };
  RedisPermit *held;
  GThread *thread;
  g_autoptr (GError) error = NULL;

  g_test_summary ("Cancelling a waiter ends its wait at once with G_IO_ERROR_CANCELLED; a "
                  "cancelled cancellable fails before any request");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = obtain_semaphore (fx->registry, "cancel", 1);
  held = acquire_ok (sem, 0);
  w.sem = sem;
  w.wait_ms = 30000;
  w.cancellable = cancellable;
  thread = waiter_start (&w, fx->registry, test_stats (fx->registry).contended_attempts);
  g_cancellable_cancel (cancellable);
  g_assert_true (test_wait_until (waiter_done, &w, 5000));
  g_thread_join (thread);
  g_assert_null (w.permit);
  g_assert_error (w.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&w.error);

  g_assert_null (redis_semaphore_try_acquire_for (sem, 1000, cancellable, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  release_ok (held);
}

static void
test_close (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) registry = test_registry_new (fx);
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *key = NULL;
  Waiter w = { 0 };
  RedisPermit *held;
  GThread *thread;

  g_test_summary ("Close wakes a waiter with CLOSED, releases the permits held (their key "
                  "gone), tells their holders (lost, cancellable cancelled), and a later "
                  "release fails CLOSED");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = obtain_semaphore (registry, "closing", 1);
  held = acquire_ok (sem, 0);
  key = permit_key ("closing", redis_permit_get_index (held));
  g_assert_true (test_store_exists (fx, key));
  w.sem = sem;
  w.wait_ms = 30000;
  thread = waiter_start (&w, registry, test_stats (registry).contended_attempts);
  redis_lock_registry_close (registry);
  g_assert_true (test_wait_until (waiter_done, &w, 5000));
  g_thread_join (thread);
  g_assert_null (w.permit);
  g_assert_error (w.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&w.error);
  g_assert_false (test_store_exists (fx, key));
  g_assert_true (redis_permit_is_lease_lost (held));
  g_assert_true (g_cancellable_is_cancelled (redis_permit_get_lease_cancellable (held)));
  g_assert_false (redis_permit_release (held, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
}

/* ---- lease loss ---- */

static void
test_lease_lost (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *key = NULL;
  TestLeaseLost ll;
  RedisPermit *permit, *other;
  GCancellable *cancellable;

  g_test_summary ("A permit whose key is deleted behind its holder is reported lost the "
                  "three ways: is_lease_lost, its cancellable (cancelled first) and the "
                  "callback with NULL; its release fails LEASE_LOST and does not touch the "
                  "permit's next holder");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&ll);
  redis_lock_registry_set_expire_after_ms (fx->registry, 1500);
  redis_lock_registry_set_lease_lost_callback (fx->registry, test_lease_lost_cb, &ll, NULL);
  sem = obtain_semaphore (fx->registry, "lost", 1);
  permit = acquire_ok (sem, 0);
  cancellable = redis_permit_get_lease_cancellable (permit);
  test_lease_lost_set_cancellable (&ll, cancellable);
  g_assert_false (redis_permit_is_lease_lost (permit));
  g_assert_false (g_cancellable_is_cancelled (cancellable));
  key = permit_key ("lost", redis_permit_get_index (permit));
  g_assert_true (test_store_delete (fx, key));

  g_assert_cmpuint (test_lease_lost_wait (&ll, 5000), ==, 1);
  g_assert_null (ll.lock);
  g_assert_true (ll.cancelled_first);
  g_assert_true (redis_permit_is_lease_lost (permit));
  g_assert_true (g_cancellable_is_cancelled (cancellable));

  /* The permit is free in the store: another holder takes it; the lost one's release
   * leaves it alone. */
  other = acquire_ok (sem, 0);
  g_assert_cmpuint (redis_permit_get_index (other), ==, 0);
  g_assert_false (redis_permit_release (permit, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_assert_true (test_store_exists (fx, key));
  g_assert_false (redis_permit_is_lease_lost (other));
  release_ok (other);
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 1);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&ll);
}

static void
test_forced_told (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = test_registry_new (fx);
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (RedisSemaphore) other_sem = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL;
  TestLeaseLost ll;
  RedisPermit *permit, *taken;
  GCancellable *cancellable;
  gint64 t0;

  g_test_summary ("A permit forced open (redis_lock_registry_force_unlock() of its key) is "
                  "told to its holder within a second, not at the next renewal (60 s lease, "
                  "tick at 20 s): callback with NULL, cancellable, is_lease_lost, release "
                  "LEASE_LOST; another registry takes the permit meanwhile");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&ll);
  redis_lock_registry_set_lease_lost_callback (fx->registry, test_lease_lost_cb, &ll, NULL);
  sem = obtain_semaphore (fx->registry, "forced", 1);
  other_sem = obtain_semaphore (other, "forced", 1);
  permit = acquire_ok (sem, 0);
  cancellable = redis_permit_get_lease_cancellable (permit);
  test_lease_lost_set_cancellable (&ll, cancellable);
  /* The holder hears forced releases once its subscriber is up (on every node). */
  if (fx->store != TEST_STORE_MEMORY)
    TEST_WAIT_UNTIL (test_stats (fx->registry).subscriber_connections >= test_store_nodes (fx),
                     10000);

  name = g_strdup_printf ("{forced}:sem:%u", redis_permit_get_index (permit));
  t0 = test_now_ms ();
  g_assert_true (redis_lock_registry_force_unlock (other, name, &error));
  g_assert_no_error (error);
  taken = acquire_ok (other_sem, 5000);
  g_assert_cmpuint (test_lease_lost_wait (&ll, 3000), ==, 1);
  g_test_message ("the holder was told %" G_GINT64_FORMAT " ms after the forced unlock",
                  ll.at_ms - t0);
  g_assert_null (ll.lock);
  g_assert_true (ll.cancelled_first);
  g_assert_true (redis_permit_is_lease_lost (permit));
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_false (redis_permit_release (permit, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_assert_false (redis_permit_is_lease_lost (taken));
  release_ok (taken);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&ll);
}

static void
test_renewed (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autofree char *key = NULL;
  RedisPermit *permit;
  gint64 start;

  g_test_summary ("The watchdog renews a permit: held for three TTLs, it is still there and "
                  "not lost");
  TEST_SKIP_IF_NO_STORE (fx);

  redis_lock_registry_set_expire_after_ms (fx->registry, 300);
  sem = obtain_semaphore (fx->registry, "renewed", 1);
  permit = acquire_ok (sem, 0);
  key = permit_key ("renewed", redis_permit_get_index (permit));
  start = test_now_ms ();
  while (test_now_ms () - start < 900)
    test_wait_full_tick (fx->registry);
  g_assert_true (test_store_exists (fx, key));
  g_assert_false (redis_permit_is_lease_lost (permit));
  release_ok (permit);
}

static void
test_not_replicated (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("With min_replicas above the replicas the server has, an acquisition fails "
                  "NOT_REPLICATED and leaves every permit free");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = obtain_semaphore (fx->registry, "replicated", 2);
  redis_lock_registry_set_min_replicas (fx->registry, 1, 50);
  g_assert_null (redis_semaphore_try_acquire_for (sem, 1000, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_REPLICATED);
  redis_lock_registry_set_min_replicas (fx->registry, 0, 0);
  g_assert_cmpuint (available (sem), ==, 2);
}

static void
test_quorum_refused (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A quorum registry refuses semaphores with INVALID naming the quorum; "
                  "every other store gives one");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = redis_lock_registry_obtain_semaphore (fx->registry, "q", 2, &error);
  if (fx->store == TEST_STORE_QUORUM)
    {
      g_assert_null (sem);
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_assert_nonnull (strstr (error->message, "quorum"));
    }
  else
    {
      g_assert_no_error (error);
      g_assert_nonnull (sem);
    }
}

/* ---- Redis only: round trips, the size record, other processes ---- */

static void
test_round_trips (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  RedisPermit *permit;
  guint64 before;

  g_test_summary ("An uncontended acquisition is one round trip: the first one script, the "
                  "next ones (the permit given back last tried again while the size stands "
                  "checked) one plain SET; a release is another round trip (one script)");
  TEST_SKIP_IF_NO_SERVER (fx);

  /* A first cycle (on another semaphore) starts what a registry starts with its first
   * lease. */
  sem = obtain_semaphore (fx->registry, "trips-first", 4);
  release_ok (acquire_ok (sem, 0));
  g_clear_pointer (&sem, redis_semaphore_unref);
  sem = obtain_semaphore (fx->registry, "trips", 4);
  test_redis_reset_stats (fx->redis);
  before = test_stats (fx->registry).round_trips;
  permit = acquire_ok (sem, 0);
  g_assert_cmpuint (test_stats (fx->registry).round_trips - before, ==, 1);
  g_assert_cmpint (test_redis_command_calls (fx->redis, "evalsha"), ==, 1);
  before = test_stats (fx->registry).round_trips;
  release_ok (permit);
  g_assert_cmpuint (test_stats (fx->registry).round_trips - before, ==, 1);
  g_assert_cmpint (test_redis_command_calls (fx->redis, "evalsha"), ==, 2);

  for (guint i = 0; i < 3; i++)
    {
      test_redis_reset_stats (fx->redis);
      before = test_stats (fx->registry).round_trips;
      permit = acquire_ok (sem, 0);
      g_assert_cmpuint (test_stats (fx->registry).round_trips - before, ==, 1);
      g_assert_cmpint (test_redis_command_calls (fx->redis, "evalsha"), ==, 0);
      g_assert_cmpint (test_redis_command_calls (fx->redis, "set"), ==, 1);
      g_assert_cmpint (test_redis_command_calls (fx->redis, "get"), ==, 0);
      before = test_stats (fx->registry).round_trips;
      release_ok (permit);
      g_assert_cmpuint (test_stats (fx->registry).round_trips - before, ==, 1);
      g_assert_cmpint (test_redis_command_calls (fx->redis, "evalsha"), ==, 1);
    }
}

static void
test_size_record (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL, third = NULL;
  g_autoptr (RedisSemaphore) sem = NULL, wrong = NULL, same = NULL;
  g_autoptr (GError) error = NULL, count_error = NULL;
  g_autofree char *size_key = g_strdup_printf ("%s:{record}:sem", TEST_REGISTRY_KEY);
  redisReply *reply;

  g_test_summary ("A permit taken through the size check lets its process take the permit it "
                  "gave back last without one; with the size key deleted meanwhile, another "
                  "registry with another size still gets INVALID naming both (from an "
                  "acquisition and a count), while one with the same size stores it again");
  TEST_SKIP_IF_NO_SERVER (fx);

  sem = obtain_semaphore (fx->registry, "record", 4);
  release_ok (acquire_ok (sem, 0));
  reply = redisCommand (fx->redis, "DEL %s", size_key);
  g_assert_nonnull (reply);
  g_assert_cmpint (reply->integer, ==, 1);
  freeReplyObject (reply);

  other = test_registry_new (fx);
  wrong = obtain_semaphore (other, "record", 2);
  g_assert_null (redis_semaphore_try_acquire_for (wrong, 0, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "4"));
  g_assert_nonnull (strstr (error->message, "2"));
  g_assert_cmpuint (redis_semaphore_get_available (wrong, &count_error), ==, 0);
  g_assert_error (count_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);

  /* The first process goes on by its shortcut: one plain SET, no script. */
  test_redis_reset_stats (fx->redis);
  release_ok (acquire_ok (sem, 0));
  g_assert_cmpint (test_redis_command_calls (fx->redis, "set"), ==, 1);
  g_assert_cmpint (test_redis_command_calls (fx->redis, "evalsha"), ==, 1); /* the release */

  third = test_registry_new (fx);
  same = obtain_semaphore (third, "record", 4);
  release_ok (acquire_ok (same, 0));
  reply = redisCommand (fx->redis, "GET %s", size_key);
  g_assert_nonnull (reply);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STRING);
  g_assert_cmpstr (reply->str, ==, "4");
  freeReplyObject (reply);
}

/* A child process holding a permit: this program run with --hold. */
typedef struct
{
  GPid pid;
  int in_fd;  /* its standard input */
  int out_fd; /* its standard output */
} Holder;

static void
holder_start (Holder *h, const char *url, const char *name, guint permits, gint64 ttl_ms)
{
  g_autofree char *self = g_test_build_filename (G_TEST_BUILT, "semaphore", NULL);
  g_autofree char *permits_s = g_strdup_printf ("%u", permits);
  g_autofree char *ttl_s = g_strdup_printf ("%" G_GINT64_FORMAT, ttl_ms);
  const char *argv[] = { self, "--hold", url, name, permits_s, ttl_s, NULL };
  g_autoptr (GError) error = NULL;
  char line[64] = { 0 };
  gsize got = 0;

  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                           NULL, NULL, &h->pid, &h->in_fd, &h->out_fd, NULL,
                                           &error));
  g_assert_no_error (error);
  /* It says "held" once it has the permit. */
  while (got < 5)
    {
      ssize_t n = read (h->out_fd, line + got, sizeof line - 1 - got);
      g_assert_cmpint (n, >, 0);
      got += (gsize) n;
    }
  g_assert_true (g_str_has_prefix (line, "held\n"));
}

static int
holder_wait (Holder *h)
{
  int status = 0;

  g_assert_cmpint (waitpid (h->pid, &status, 0), ==, h->pid);
  g_spawn_close_pid (h->pid);
  close (h->in_fd);
  close (h->out_fd);
  return status;
}

/* The child: takes a permit, says "held", releases it when a line comes on stdin. */
static int
hold_main (const char *url, const char *name, const char *permits, const char *ttl)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY,
                                                                    &error);
  g_autoptr (RedisSemaphore) sem = NULL;
  RedisPermit *permit;
  char line[16];

  if (registry == NULL)
    return 2;
  redis_lock_registry_set_expire_after_ms (registry, g_ascii_strtoll (ttl, NULL, 10));
  sem = redis_lock_registry_obtain_semaphore (registry, name,
                                              (guint) g_ascii_strtoull (permits, NULL, 10), &error);
  if (sem == NULL)
    return 3;
  permit = redis_semaphore_try_acquire_for (sem, 20000, NULL, &error);
  if (permit == NULL)
    return 4;
  fputs ("held\n", stdout);
  fflush (stdout);
  if (fgets (line, sizeof line, stdin) == NULL)
    return 5;
  return redis_permit_release (permit, &error) ? 0 : 6;
}

static void
test_other_process (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  Holder h;
  Waiter w = { 0 };
  GThread *thread;
  gint64 released_ms;
  int status;

  g_test_summary ("A permit held by another process is waited for and taken when that "
                  "process releases it, woken by the notification (TTL and spin far away)");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_idle_between_tries_ms (fx->registry, 60000);
  holder_start (&h, fx->url, "proc", 1, 60000);
  sem = obtain_semaphore (fx->registry, "proc", 1);
  w.sem = sem;
  w.wait_ms = 30000;
  thread = waiter_start (&w, fx->registry, test_stats (fx->registry).contended_attempts);
  released_ms = test_now_ms ();
  g_assert_cmpint (write (h.in_fd, "go\n", 3), ==, 3);
  status = holder_wait (&h);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
  g_assert_true (test_wait_until (waiter_done, &w, 10000));
  g_thread_join (thread);
  g_assert_no_error (w.error);
  g_assert_nonnull (w.permit);
  g_assert_cmpint (w.returned_ms - released_ms, <, 2000);
  release_ok (w.permit);
}

static void
test_crashed_holder (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (GError) error = NULL;
  RedisPermit *permit;
  Holder h;
  gint64 killed_ms, took_ms;
  const gint64 ttl_ms = 1500;

  g_test_summary ("The permit of a process killed while holding it comes back at its TTL: "
                  "a waiter gets it within TTL + 1 s of the kill, and not while it was held");
  TEST_SKIP_IF_NO_SERVER (fx);

  holder_start (&h, fx->url, "crash", 1, ttl_ms);
  sem = obtain_semaphore (fx->registry, "crash", 1);
  g_assert_null (redis_semaphore_try_acquire_for (sem, 0, NULL, &error));
  g_assert_no_error (error);
  kill (h.pid, SIGKILL);
  killed_ms = test_now_ms ();
  (void) holder_wait (&h);
  permit = acquire_ok (sem, 10000);
  took_ms = test_now_ms ();
  g_assert_cmpint (took_ms - killed_ms, <, ttl_ms + 1000);
  release_ok (permit);
}

/* ---- a lost answer ---- */

typedef struct
{
  RedisSemaphore *sem;
  guint done;
  RedisPermit *permit;
  GError *error;
} LostAnswer;

static void
on_lost_answer (GObject *source, GAsyncResult *result, gpointer data)
{
  LostAnswer *la = data;

  la->permit = redis_semaphore_acquire_finish (la->sem, result, &la->error);
  la->done++;
}

/* One attempt at a permit of @sem (@async: redis_semaphore_acquire_async()) with a
 * 200 ms wait whose answer @proxy keeps back (the request, which contains @match, and
 * none of the background releases of an earlier attempt that may still be under way):
 * the request takes effect, and the caller gets no permit (and at most CONNECTION). */
static void
attempt_answer_lost (TestProxy *proxy, RedisSemaphore *sem, const char *match, gboolean async)
{
  LostAnswer la = { .sem = sem };

  test_proxy_hold_replies (proxy, match);
  if (async)
    {
      redis_semaphore_acquire_async (sem, 200, NULL, on_lost_answer, &la);
      g_assert_true (test_iterate_until (&la.done, 1, 20000));
    }
  else
    la.permit = redis_semaphore_try_acquire_for (sem, 200, NULL, &la.error);
  g_assert_true (test_proxy_wait_held (proxy, 0));
  g_assert_null (la.permit);
  if (la.error != NULL)
    g_assert_error (la.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_clear_error (&la.error);
}

static void
test_lost_answer (TestFixture *fx, gconstpointer data)
{
  gboolean async = GPOINTER_TO_INT (data);
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisSemaphore) warm = NULL, sem = NULL;
  g_autoptr (GMainContext) context = g_main_context_new ();

  g_test_summary ("A permit attempt whose answer was lost (the request took effect, its "
                  "answer came after the caller's wait) is released by value in the "
                  "background, as a lock's is: every permit is free again within a few "
                  "seconds, not after the TTL (a minute), whether the attempt searched the "
                  "permits (the script) or named the one given back last");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_main_context_push_thread_default (context);
  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (fx->server));
  r = test_registry_new_on (test_proxy_get_url (proxy));
  redis_lock_registry_set_expire_after_ms (r, 60000);
  /* Scripts loaded and connections made, on another semaphore: the attempt below is
   * the first of its semaphore, so it runs the script. */
  warm = obtain_semaphore (r, "warm", 1);
  release_ok (acquire_ok (warm, 5000));
  sem = obtain_semaphore (r, "lost-answer", 3);
  /* The script's semaphore key and size. */
  attempt_answer_lost (proxy, sem, "{lost-answer}:sem\r\n$1\r\n3\r\n", async);
  TEST_WAIT_UNTIL (available (sem) == 3, 5000);
  test_proxy_release_held (proxy);

  /* A permit given back names itself to the next attempt (a plain SET of it). */
  release_ok (acquire_ok (sem, 5000));
  attempt_answer_lost (proxy, sem, "\r\nNX\r\n$2\r\nPX\r\n", async);
  TEST_WAIT_UNTIL (available (sem) == 3, 5000);
  test_proxy_release_held (proxy);
  g_main_context_pop_thread_default (context);
}

int
main (int argc, char **argv)
{
  if (argc == 6 && strcmp (argv[1], "--hold") == 0)
    return hold_main (argv[2], argv[3], argv[4], argv[5]);

  g_test_init (&argc, &argv, NULL);

  test_add_stores_but_quorum ("/semaphore/permits/count", NULL, test_permits_count);
  test_add_stores_but_quorum ("/semaphore/permits/invalid", NULL, test_invalid_arguments);
  test_add_stores_but_quorum ("/semaphore/size/mismatch", NULL, test_size_mismatch);
  test_add_stores_but_quorum ("/semaphore/contention/threads-and-registries", NULL,
                              test_contention);
  test_add_stores_but_quorum ("/semaphore/wait/woken-by-notification", NULL,
                              test_wakeup_by_notification);
  test_add_stores_but_quorum ("/semaphore/wait/same-registry", NULL, test_wakeup_same_registry);
  test_add_stores_but_quorum ("/semaphore/wait/timeout", NULL, test_timeout);
  test_add_stores_but_quorum ("/semaphore/wait/cancel", NULL, test_cancel);
  test_add_stores_but_quorum ("/semaphore/close", NULL, test_close);
  test_add_stores_but_quorum ("/semaphore/lease/lost-reported", NULL, test_lease_lost);
  test_add_stores_but_quorum ("/semaphore/lease/forced-told", NULL, test_forced_told);
  test_add_stores_but_quorum ("/semaphore/lease/renewed", NULL, test_renewed);
  semaphore_add_async_tests ();
  test_add_stores ("/semaphore/quorum-refused", NULL, test_quorum_refused);
  test_add_stores_but_quorum ("/semaphore/not-replicated", NULL, test_not_replicated);
  test_add_redis ("/semaphore/round-trips", NULL, test_round_trips);
  test_add_redis ("/semaphore/size/record-after-delete", NULL, test_size_record);
  test_add_redis ("/semaphore/process/other-releases", NULL, test_other_process);
  test_add_redis ("/semaphore/process/crashed-holder", NULL, test_crashed_holder);
  test_add_redis ("/semaphore/lost-answer/blocking", GINT_TO_POINTER (FALSE), test_lost_answer);
  test_add_redis ("/semaphore/lost-answer/async", GINT_TO_POINTER (TRUE), test_lost_answer);
  return g_test_run ();
}
