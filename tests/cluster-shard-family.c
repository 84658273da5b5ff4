/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster-shard-family.c: sharded unlock notifications on a real Redis Cluster for what
 * is not a plain lock's release: a set of locks released together (release_many), a
 * read-write lock, a semaphore, a forced unlock.
 *
 * Each test has a holder whose classic notifications are off, so that its releases are
 * published on shard channels only, and a waiter in another registry that polls only
 * every 60 s and waits 20 s at most, while the holder's TTL is 30 s: only a
 * notification can let the waiter in before its wait ends, and the waiter's registry
 * counts the notification it heard before it woke. Listeners outside the library check
 * that the release went out on the shard channel the waiter listens to, and not
 * classically. The waiter is woken only once it
 * has made an attempt after its subscription was confirmed (its second), so the
 * release cannot fall before it. The keys of a read-write lock share the shard channel
 * of its writer lease, and the permits of a semaphore that of the semaphore, so one
 * subscription per lock hears them all. A waiter's subscription ends when it leaves,
 * whichever acquisition it made (the read-write lock's asynchronous one, the
 * semaphore's, a set's), and one semaphore's subscription stays while one of its waiters
 * does. A wait for a set of locks subscribes to each of its keys' channels.
 * All tests share one cluster of three masters with a replica each; cluster-shard.c
 * has the plain lock's.
 */
#include "config.h"

#include <string.h>

#include "common.h"
#include "cluster-common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY
#define WAIT_MS 20000
#define GONE_MS 5000

/* open_pair(), the waiter's classic notifications off too: nothing the waiter publishes
 * itself (its own release once woken, a waiting writer's mark) reaches a classic
 * listener, which must hear nothing of the holder's release. */
static void
open_quiet_pair (RedisLockTestCluster *cluster, RedisLockRegistry **holder,
                 RedisLockRegistry **waiter)
{
  open_pair (cluster, holder, waiter);
  redis_lock_registry_set_classic_notifications (*waiter, FALSE);
}

/* A name for a lock of the family whose keys all hash by `{name}`, served by master
 * @node. */
static char *
tag_on (RedisLockTestCluster *cluster, guint node, const char *prefix)
{
  for (guint i = 0;; i++)
    {
      char *name = g_strdup_printf ("%s%u", prefix, i);
      g_autofree char *tag = g_strconcat ("{", name, "}", NULL);
      if (key_owner (cluster, tag) == node)
        return name;
      g_free (name);
    }
}

/* One waiting thread: what it waits for, and how its wait ended. */
typedef enum
{
  WAIT_LOCK,
  WAIT_READ,
  WAIT_WRITE,
  WAIT_PERMIT,
  WAIT_SET, /* redis_lock_try_lock_all() of 2 locks */
} WaitKind;

typedef struct
{
  WaitKind kind;
  gpointer target; /* RedisLock, RedisRWLock, RedisSemaphore or an array of 2 RedisLock */
  gint64 wait_ms;
  GCancellable *cancellable;
  gboolean acquired;
  gint64 returned_ms;
} Waiter;

static gpointer
waiter_main (gpointer data)
{
  Waiter *w = data;
  g_autoptr (GError) error = NULL;
  RedisPermit *permit = NULL;

  switch (w->kind)
    {
    case WAIT_LOCK:
      w->acquired = redis_lock_try_lock_for (w->target, w->wait_ms, w->cancellable, &error);
      break;
    case WAIT_READ:
      w->acquired
          = redis_rw_lock_try_read_lock_for (w->target, w->wait_ms, w->cancellable, &error);
      break;
    case WAIT_WRITE:
      w->acquired
          = redis_rw_lock_try_write_lock_for (w->target, w->wait_ms, w->cancellable, &error);
      break;
    case WAIT_PERMIT:
      permit = redis_semaphore_try_acquire_for (w->target, w->wait_ms, w->cancellable, &error);
      w->acquired = permit != NULL;
      break;
    case WAIT_SET:
      w->acquired = redis_lock_try_lock_all (w->target, 2, w->wait_ms, w->cancellable, &error);
      break;
    }
  w->returned_ms = test_now_ms ();
  if (w->cancellable != NULL && g_cancellable_is_cancelled (w->cancellable))
    {
      /* Cancelled to make it leave. */
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
      g_assert_false (w->acquired);
      return NULL;
    }
  g_assert_no_error (error);
  if (!w->acquired)
    return NULL;
  switch (w->kind)
    {
    case WAIT_LOCK:
      test_unlock_ok (w->target);
      break;
    case WAIT_READ:
      g_assert_true (redis_rw_lock_read_unlock (w->target, &error));
      break;
    case WAIT_WRITE:
      g_assert_true (redis_rw_lock_write_unlock (w->target, &error));
      break;
    case WAIT_PERMIT:
      g_assert_true (redis_permit_release (permit, &error));
      break;
    case WAIT_SET:
      g_assert_true (redis_lock_unlock_all (w->target, 2, &error));
      break;
    }
  g_assert_no_error (error);
  return NULL;
}

/* Starts @w in @registry and returns once it made an attempt after its subscription to
 * @channel (on @node) was confirmed: the release that follows can only reach it as a
 * notification. */
static GThread *
start (RedisLockTestCluster *cluster, RedisLockRegistry *registry, Waiter *w, guint node,
       const char *channel)
{
  guint64 contended = test_stats (registry).contended_attempts;
  GThread *thread;

  if (w->wait_ms == 0)
    w->wait_ms = WAIT_MS;
  thread = g_thread_new ("waiter", waiter_main, w);
  g_assert_true (test_wait_contended (registry, contended + 2, 10000));
  wait_shard_subscribed (cluster, node, channel);
  return thread;
}

/* What the holder releases, and how. */
typedef enum
{
  RELEASE_LOCK,   /* redis_lock_unlock() */
  RELEASE_SET,    /* redis_lock_unlock_all() of 2 locks */
  RELEASE_WRITE,  /* redis_rw_lock_write_unlock() */
  RELEASE_READ,   /* redis_rw_lock_read_unlock() */
  RELEASE_PERMIT, /* redis_permit_release() */
  RELEASE_FORCE,  /* redis_lock_registry_force_unlock() of @name in @registry */
} ReleaseKind;

typedef struct
{
  ReleaseKind kind;
  gpointer target;
  RedisLockRegistry *registry;
  const char *name;
} Release;

static gboolean
release (const Release *r, GError **error)
{
  switch (r->kind)
    {
    case RELEASE_LOCK:
      return redis_lock_unlock (r->target, error);
    case RELEASE_SET:
      return redis_lock_unlock_all (r->target, 2, error);
    case RELEASE_WRITE:
      return redis_rw_lock_write_unlock (r->target, error);
    case RELEASE_READ:
      return redis_rw_lock_read_unlock (r->target, error);
    case RELEASE_PERMIT:
      return redis_permit_release (r->target, error);
    case RELEASE_FORCE:
    default:
      return redis_lock_registry_force_unlock (r->registry, r->name, error);
    }
}

/* Makes the release @r while @w waits in its @registry under the subscription to the
 * shard @channel on @node (start()), and checks that it went out on that channel only
 * (naming a key that starts with @key_prefix) and let @w in through a notification its
 * registry counted, before its wait (and the holder's TTL) ended. */
static void
release_and_check (RedisLockTestCluster *cluster, RedisLockRegistry *registry, Waiter *w,
                   GThread *thread, guint node, const char *channel, const char *key_prefix,
                   const Release *r)
{
  g_autoptr (GError) error = NULL;
  ChannelWatch watch;
  guint64 notifications;
  gint64 released_ms;

  channel_watch_begin (&watch, cluster, node, channel);
  notifications = test_stats (registry).notifications;
  released_ms = test_now_ms ();
  g_assert_true (release (r, &error));
  g_assert_no_error (error);
  channel_watch_end_sharded_only (&watch, cluster, key_prefix);
  g_thread_join (thread);
  g_assert_true (w->acquired);
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the release",
                  w->returned_ms - released_ms);
  g_assert_cmpint (w->returned_ms - released_ms, <, WAIT_MS);
  g_assert_cmpuint (test_stats (registry).notifications, >, notifications);
}

static void
test_release_many (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) a = NULL, b = NULL, waited = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name_a = NULL, *name_b = NULL, *channel = NULL;
  RedisLock *set[2];
  Waiter w = { .kind = WAIT_LOCK };
  GThread *thread;

  g_test_summary ("A set of locks released together (redis_lock_unlock_all(), one pipeline "
                  "per master) is published on each key's shard channel: a waiter of one "
                  "member in another registry is woken by it, with classic notifications "
                  "off");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);
  name_a = name_on (cluster, 0, "many", 0);
  name_b = name_on (cluster, 1, "many", 0);
  set[0] = a = test_obtain (holder, name_a);
  set[1] = b = test_obtain (holder, name_b);
  g_assert_true (redis_lock_try_lock_all (set, 2, 0, NULL, &error));
  g_assert_no_error (error);
  waited = test_obtain (waiter, name_b);
  channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (b));
  w.target = waited;
  thread = start (cluster, waiter, &w, 1, channel);
  release_and_check (cluster, waiter, &w, thread, 1, channel, redis_lock_get_key (b),
                     &(Release) { .kind = RELEASE_SET, .target = set });
}

/* The shard channel of the read-write lock @name: its writer lease's. */
static char *
rw_channel (const char *name)
{
  g_autofree char *writer = g_strdup_printf ("%s:{%s}:rw:w", REGISTRY_KEY, name);

  return shard_channel (REGISTRY_KEY, writer);
}

static void
test_rwlock (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisRWLock) held = NULL, waited = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *channel = NULL;
  g_autofree char *writer_key = NULL, *reader_prefix = NULL;
  Waiter reader = { .kind = WAIT_READ }, writer = { .kind = WAIT_WRITE };
  GThread *thread;

  g_test_summary ("A read-write lock's releases are published on its shard channel (its "
                  "writer lease's): a reader waiting for a writer, and a writer waiting for "
                  "a reader, in another registry, are woken by them with classic "
                  "notifications off");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);
  name = tag_on (cluster, 2, "rw");
  channel = rw_channel (name);
  writer_key = g_strdup_printf ("%s:{%s}:rw:w", REGISTRY_KEY, name);
  reader_prefix = g_strdup_printf ("%s:{%s}:rw:r:", REGISTRY_KEY, name);
  held = redis_lock_registry_obtain_rw (holder, name, &error);
  g_assert_no_error (error);
  waited = redis_lock_registry_obtain_rw (waiter, name, &error);
  g_assert_no_error (error);

  /* A reader waits for the writer's release. */
  g_assert_true (redis_rw_lock_try_write_lock_for (held, 0, NULL, &error));
  g_assert_no_error (error);
  reader.target = waited;
  thread = start (cluster, waiter, &reader, 2, channel);
  release_and_check (cluster, waiter, &reader, thread, 2, channel, writer_key,
                     &(Release) { .kind = RELEASE_WRITE, .target = held });

  /* A writer waits for the reader's release. */
  g_assert_true (redis_rw_lock_try_read_lock_for (held, 0, NULL, &error));
  g_assert_no_error (error);
  writer.target = waited;
  thread = start (cluster, waiter, &writer, 2, channel);
  release_and_check (cluster, waiter, &writer, thread, 2, channel, reader_prefix,
                     &(Release) { .kind = RELEASE_READ, .target = held });
  wait_shard_unsubscribed (cluster, 2, channel, GONE_MS);
}

/* The shard channel of the semaphore @name: its own key's, which its permits share. */
static char *
sem_channel (const char *name)
{
  g_autofree char *key = g_strdup_printf ("%s:{%s}:sem", REGISTRY_KEY, name);

  return shard_channel (REGISTRY_KEY, key);
}

static void
test_semaphore (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisSemaphore) held = NULL, waited = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *channel = NULL;
  g_autofree char *permit_prefix = NULL;
  RedisPermit *permit;
  Waiter w = { .kind = WAIT_PERMIT };
  GThread *thread;

  g_test_summary ("A semaphore's permit released is published on the semaphore's shard "
                  "channel: a waiter for a permit in another registry is woken by it with "
                  "classic notifications off");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);
  name = tag_on (cluster, 0, "sem");
  channel = sem_channel (name);
  held = redis_lock_registry_obtain_semaphore (holder, name, 1, &error);
  g_assert_no_error (error);
  waited = redis_lock_registry_obtain_semaphore (waiter, name, 1, &error);
  g_assert_no_error (error);
  permit = redis_semaphore_try_acquire_for (held, 0, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (permit);
  w.target = waited;
  thread = start (cluster, waiter, &w, 0, channel);
  permit_prefix = g_strdup_printf ("%s:{%s}:sem:", REGISTRY_KEY, name);
  release_and_check (cluster, waiter, &w, thread, 0, channel, permit_prefix,
                     &(Release) { .kind = RELEASE_PERMIT, .target = permit });
  wait_shard_unsubscribed (cluster, 0, channel, GONE_MS);
}

static void
test_force_unlock (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL, waited = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *channel = NULL;
  Waiter w = { .kind = WAIT_LOCK };
  GThread *thread;

  g_test_summary ("A forced unlock by a registry with classic notifications off is published "
                  "on the key's shard channel: a waiter in another registry is woken by it");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);
  name = name_on (cluster, 1, "forced", 0);
  held = test_obtain (holder, name);
  test_lock_ok (held);
  waited = test_obtain (waiter, name);
  channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (held));
  w.target = waited;
  thread = start (cluster, waiter, &w, 1, channel);
  release_and_check (cluster, waiter, &w, thread, 1, channel, redis_lock_get_key (held),
                     &(Release) { .kind = RELEASE_FORCE, .registry = holder, .name = name });
}

/* --- Waiters leave ---------------------------------------------------------------- */

/* Cancels @w, which waits in its thread under the subscription to @channel on @node,
 * and checks that the subscription ends with its wait. */
static void
cancel_and_check_gone (RedisLockTestCluster *cluster, Waiter *w, GThread *thread, guint node,
                       const char *channel)
{
  g_cancellable_cancel (w->cancellable);
  g_thread_join (thread);
  g_assert_false (w->acquired);
  wait_shard_unsubscribed (cluster, node, channel, GONE_MS);
  g_clear_object (&w->cancellable);
}

/* An asynchronous call ended: *@data set. */
static void
on_rw_done (GObject *source, GAsyncResult *result, gpointer data)
{
  gboolean *done = data;

  *done = TRUE;
}

static void
test_dropped_when_waiters_leave (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisRWLock) held_rw = NULL, waited_rw = NULL;
  g_autoptr (RedisSemaphore) held_sem = NULL, waited_sem = NULL;
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  g_autoptr (GError) error = NULL;
  g_autofree char *rw_name = NULL, *sem_name = NULL, *channel = NULL;
  RedisPermit *permit;
  Waiter w = { .kind = WAIT_PERMIT };
  GThread *thread;
  gboolean done = FALSE;
  gint64 end;

  g_test_summary ("The shard subscription of a waiter that leaves ends at once, whichever "
                  "acquisition it made: a read-write lock's asynchronous one, a semaphore's "
                  "blocking one");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);

  /* A read-write lock's asynchronous call waits in this thread's main context. */
  rw_name = tag_on (cluster, 1, "rwleave");
  channel = rw_channel (rw_name);
  held_rw = redis_lock_registry_obtain_rw (holder, rw_name, &error);
  waited_rw = redis_lock_registry_obtain_rw (waiter, rw_name, &error);
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_try_write_lock_for (held_rw, 0, NULL, &error));
  redis_rw_lock_write_lock_async (waited_rw, -1, cancellable, on_rw_done, &done);
  end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (shard_subscribers (cluster, 1, channel) < 1)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_main_context_iteration (NULL, FALSE);
      g_usleep (2000);
    }
  g_cancellable_cancel (cancellable);
  while (!done)
    g_main_context_iteration (NULL, TRUE);
  wait_shard_unsubscribed (cluster, 1, channel, GONE_MS);
  g_assert_true (redis_rw_lock_write_unlock (held_rw, &error));
  g_clear_pointer (&channel, g_free);

  /* A semaphore's blocking acquisition. */
  sem_name = tag_on (cluster, 2, "semleave");
  channel = sem_channel (sem_name);
  held_sem = redis_lock_registry_obtain_semaphore (holder, sem_name, 1, &error);
  waited_sem = redis_lock_registry_obtain_semaphore (waiter, sem_name, 1, &error);
  g_assert_no_error (error);
  permit = redis_semaphore_try_acquire_for (held_sem, 0, NULL, &error);
  g_assert_nonnull (permit);
  w.target = waited_sem;
  w.cancellable = g_cancellable_new ();
  thread = start (cluster, waiter, &w, 2, channel);
  cancel_and_check_gone (cluster, &w, thread, 2, channel);
  g_assert_true (redis_permit_release (permit, &error));
}

/* Two locks of @waiter, a set whose first member (on master 0) @holder holds and whose
 * second (on master 1) is free; their shard channels in @channels. */
static void
held_set (RedisLockTestCluster *cluster, RedisLockRegistry *holder, RedisLockRegistry *waiter,
          const char *prefix, RedisLock **held, RedisLock *set[2], char *channels[2])
{
  for (guint i = 0; i < 2; i++)
    {
      g_autofree char *name = name_on (cluster, i, prefix, 0);

      set[i] = test_obtain (waiter, name);
      channels[i] = shard_channel (REGISTRY_KEY, redis_lock_get_key (set[i]));
      if (i == 0)
        {
          *held = test_obtain (holder, name);
          test_lock_ok (*held);
        }
    }
}

static void
test_set_waiter_woken (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  RedisLock *set[2];
  char *channels[2];
  Waiter w = { .kind = WAIT_SET, .target = set };
  GThread *thread;
  guint64 contended;

  g_test_summary ("A wait for a set of locks subscribes to the shard channel of each of its "
                  "keys: a sharded-only release of the member held elsewhere wakes it at "
                  "once, without spinning meanwhile, and both subscriptions end with the call");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);
  held_set (cluster, holder, waiter, "setwait", &held, set, channels);
  contended = test_stats (waiter).contended_attempts;
  thread = start (cluster, waiter, &w, 0, channels[0]);
  wait_shard_subscribed (cluster, 1, channels[1]);
  release_and_check (cluster, waiter, &w, thread, 0, channels[0], redis_lock_get_key (set[0]),
                     &(Release) { .kind = RELEASE_LOCK, .target = held });
  /* The first attempt, one once the subscriptions were confirmed, perhaps one more
   * after a wake-up by the subscriptions' setting up: a handful, not one per round
   * trip. */
  g_assert_cmpuint (test_stats (waiter).contended_attempts - contended, <=, 5);
  for (guint i = 0; i < 2; i++)
    {
      wait_shard_unsubscribed (cluster, i, channels[i], GONE_MS);
      redis_lock_unref (set[i]);
      g_free (channels[i]);
    }
}

static void
test_set_waiter_leaves (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  RedisLock *set[2];
  char *channels[2];
  Waiter w = { .kind = WAIT_SET, .target = set };
  GThread *thread;

  g_test_summary ("A wait for a set of locks that is cancelled leaves the shard subscription "
                  "of each of its keys");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);
  held_set (cluster, holder, waiter, "setleave", &held, set, channels);
  w.cancellable = g_cancellable_new ();
  thread = start (cluster, waiter, &w, 0, channels[0]);
  wait_shard_subscribed (cluster, 1, channels[1]);
  cancel_and_check_gone (cluster, &w, thread, 0, channels[0]);
  wait_shard_unsubscribed (cluster, 1, channels[1], GONE_MS);
  test_unlock_ok (held);
  for (guint i = 0; i < 2; i++)
    {
      redis_lock_unref (set[i]);
      g_free (channels[i]);
    }
}

static void
test_semaphore_kept_while_one_waits (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisSemaphore) held = NULL, waited = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *channel = NULL, *permit_prefix = NULL;
  RedisPermit *permit;
  Waiter stays = { .kind = WAIT_PERMIT }, leaves = { .kind = WAIT_PERMIT };
  GThread *staying, *leaving;

  g_test_summary ("Two threads of one registry wait for a semaphore's permit under one shard "
                  "subscription; when one gives up, the subscription stays for the other, "
                  "who is woken by the release");
  if (cluster == NULL)
    return;
  open_quiet_pair (cluster, &holder, &waiter);
  name = tag_on (cluster, 1, "semcount");
  channel = sem_channel (name);
  held = redis_lock_registry_obtain_semaphore (holder, name, 1, &error);
  waited = redis_lock_registry_obtain_semaphore (waiter, name, 1, &error);
  g_assert_no_error (error);
  permit = redis_semaphore_try_acquire_for (held, 0, NULL, &error);
  g_assert_nonnull (permit);
  stays.target = leaves.target = waited;
  staying = start (cluster, waiter, &stays, 1, channel);
  leaves.wait_ms = 1000;
  leaving = start (cluster, waiter, &leaves, 1, channel);
  g_thread_join (leaving);
  g_assert_false (leaves.acquired);
  /* The key's subscription is one; the leaving waiter's end leaves it in place. */
  g_assert_cmpint (shard_subscribers (cluster, 1, channel), ==, 1);

  permit_prefix = g_strdup_printf ("%s:{%s}:sem:", REGISTRY_KEY, name);
  release_and_check (cluster, waiter, &stays, staying, 1, channel, permit_prefix,
                     &(Release) { .kind = RELEASE_PERMIT, .target = permit });
  wait_shard_unsubscribed (cluster, 1, channel, GONE_MS);
}

int
main (int argc, char **argv)
{
  int status;

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cluster-shard/family/release-many", test_release_many);
  g_test_add_func ("/cluster-shard/family/rwlock", test_rwlock);
  g_test_add_func ("/cluster-shard/family/semaphore", test_semaphore);
  g_test_add_func ("/cluster-shard/family/force-unlock", test_force_unlock);
  g_test_add_func ("/cluster-shard/family/dropped-when-waiters-leave",
                   test_dropped_when_waiters_leave);
  g_test_add_func ("/cluster-shard/family/set-waiter-woken", test_set_waiter_woken);
  g_test_add_func ("/cluster-shard/family/set-waiter-leaves", test_set_waiter_leaves);
  g_test_add_func ("/cluster-shard/family/semaphore-kept-while-one-waits",
                   test_semaphore_kept_while_one_waits);
  status = g_test_run ();
  common_cluster_free ();
  return status;
}
