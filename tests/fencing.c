/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fencing.c: fencing tokens (redis_lock_registry_set_fencing()).
 *
 * A lease can run out while its holder is paused, and then two holders act at once;
 * only a number that rises with every acquisition, checked by the resource, tells the
 * stale one apart. These tests check the promises that make such a check sound: tokens
 * of a name strictly increase over hundreds of acquisitions by several registries and
 * threads, also across an expired lease; they stay the same within a re-entry, a local
 * hand-off streak and a kept streak, since the lease does not change hands; they are 0
 * with fencing off, and then nothing but the lock key is touched; the counter is the
 * key API.md names, in the lock key's Cluster slot; a name whose counter could not
 * share that slot is INVALID on every store. The example of docs/fencing.md is here too: a small
 * storage that remembers the highest token per resource refuses a holder that was
 * paused past its TTL (the pause is played by deleting the key, as its expiry would,
 * and letting another registry take the lock). Tokens are the store's clock in
 * microseconds unless the counter + 1 is higher: a token lies between two readings of
 * this machine's wall clock taken around the call, a counter set ahead of the clock
 * rises by exactly one, and a server restarted empty (every counter lost) still hands
 * out a token above every earlier one. Store-neutral tests run on /redis, /memory and
 * /cluster from this one source.
 */
#include "common.h"

#include <string.h>

/* Token of the calling thread's hold of @lock, asserting it has one. */
static guint64
token_of (RedisLock *lock)
{
  guint64 token = redis_lock_get_fencing_token (lock);

  g_assert_cmpuint (token, >, 0);
  return token;
}

/* The counter of @name as the store has it; 0 when absent. */
static guint64
last_token (RedisLockRegistry *registry, const char *name)
{
  GError *error = NULL;
  guint64 token = 42;
  gboolean exists = redis_lock_registry_get_last_fencing_token (registry, name, &token, &error);

  g_assert_no_error (error);
  if (!exists)
    g_assert_cmpuint (token, ==, 0);
  return token;
}

static RedisLockRegistry *
fenced_registry (TestFixture *fx)
{
  RedisLockRegistry *r = test_registry_new (fx);

  redis_lock_registry_set_fencing (r, TRUE);
  g_assert_true (redis_lock_registry_get_fencing (r));
  return r;
}

/* --- Off ---------------------------------------------------------------------------- */

static void
test_off_is_zero (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;

  g_test_summary ("With fencing off (the default) a hold has token 0 and no counter is made.");
  TEST_SKIP_IF_NO_STORE (fx);

  g_assert_false (redis_lock_registry_get_fencing (fx->registry));
  lock = test_obtain (fx->registry, "plain");
  g_assert_cmpuint (redis_lock_get_fencing_token (lock), ==, 0);
  test_lock_ok (lock);
  g_assert_cmpuint (redis_lock_get_fencing_token (lock), ==, 0);
  test_unlock_ok (lock);
  g_assert_cmpuint (last_token (fx->registry, "plain"), ==, 0);
}

static void
test_off_wire_unchanged (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *fence_key = g_strdup_printf ("fence:{%s:plain}", TEST_REGISTRY_KEY);

  g_test_summary ("With fencing off the wire is what it was: a lock and unlock touch only the "
                  "lock key (no INCR, no counter key, the plain SET NX fast path).");
  TEST_SKIP_IF_NO_SERVER (fx);

  lock = test_obtain (fx->registry, "plain");
  test_redis_reset_stats (fx->redis);
  test_lock_ok (lock);
  g_assert_cmpint (test_redis_integer (fx->redis, "DBSIZE"), ==, 1);
  test_unlock_ok (lock);
  g_assert_cmpint (test_redis_command_calls (fx->redis, "incr"), ==, 0);
  g_assert_cmpint (test_redis_command_calls (fx->redis, "set"), ==, 1);
  g_assert_cmpint (test_redis_integer (fx->redis, "EXISTS %s", fence_key), ==, 0);
  g_assert_cmpint (test_redis_integer (fx->redis, "DBSIZE"), ==, 0);
}

/* --- On ----------------------------------------------------------------------------- */

static void
test_on_one_round_trip (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);
  g_autoptr (RedisLock) lock = test_obtain (r, "fast");
  g_autofree char *fence_key = g_strdup_printf ("fence:{%s:fast}", TEST_REGISTRY_KEY);
  RedisLockRegistryStats before, after;
  g_autofree char *counter = NULL;

  g_autofree char *expected = NULL;
  guint64 token = 0;

  g_test_summary ("With fencing on, a free lock is taken with its token in one round trip, the "
                  "first one too (the script was loaded when the registry connected), each "
                  "token higher than the last, and the counter is the key "
                  "fence:{registry_key:name}, holding the last token as a plain integer, with "
                  "no expiry, left in place by the unlock.");
  TEST_SKIP_IF_NO_SERVER (fx);

  for (int i = 0; i < 6; i++)
    {
      redis_lock_registry_get_stats (r, &before);
      test_lock_ok (lock);
      redis_lock_registry_get_stats (r, &after);
      g_assert_cmpuint (after.round_trips - before.round_trips, ==, 1);
      g_assert_cmpuint (token_of (lock), >, token);
      token = token_of (lock);
      test_unlock_ok (lock);
    }
  counter = test_redis_string (fx->redis, "GET %s", fence_key);
  expected = g_strdup_printf ("%" G_GUINT64_FORMAT, token);
  g_assert_cmpstr (counter, ==, expected);
  g_assert_cmpint (test_redis_pttl (fx->redis, fence_key), ==, -1);
  g_assert_cmpuint (last_token (r, "fast"), ==, token);
}

static void
test_on_follows_clock (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);
  g_autoptr (RedisLock) lock = test_obtain (r, "clocked");
  g_autoptr (RedisLock) multi = test_obtain (r, "clocked-multi");

  g_test_summary ("A token is the store's clock in microseconds when that is higher than the "
                  "counter + 1: taken between two readings of the wall clock of this machine "
                  "(where the store runs), it lies between them, for a single lock and for "
                  "try_lock_all.");
  TEST_SKIP_IF_NO_STORE (fx);

  for (int i = 0; i < 5; i++)
    {
      gint64 before = g_get_real_time ();
      gint64 after;
      guint64 token, multi_token;
      GError *error = NULL;

      test_lock_ok (lock);
      after = g_get_real_time ();
      token = token_of (lock);
      g_assert_cmpuint (token, >=, (guint64) before);
      g_assert_cmpuint (token, <=, (guint64) after);
      test_unlock_ok (lock);

      before = g_get_real_time ();
      g_assert_true (redis_lock_try_lock_all (&multi, 1, 0, NULL, &error));
      g_assert_no_error (error);
      after = g_get_real_time ();
      multi_token = token_of (multi);
      g_assert_cmpuint (multi_token, >=, (guint64) before);
      g_assert_cmpuint (multi_token, <=, (guint64) after);
      g_assert_true (redis_lock_unlock_all (&multi, 1, &error));
      g_assert_no_error (error);
    }
}

static void
test_on_counter_ahead_of_clock (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);
  g_autoptr (RedisLock) lock = test_obtain (r, "ahead");
  g_autoptr (RedisLock) other = test_obtain (r, "ahead-too");
  RedisLock *both[2];
  g_autofree char *fence_key = g_strdup_printf ("fence:{%s:ahead}", TEST_REGISTRY_KEY);
  g_autofree char *other_key = g_strdup_printf ("fence:{%s:ahead-too}", TEST_REGISTRY_KEY);
  g_autofree char *counter = NULL;
  const guint64 ahead = G_GUINT64_CONSTANT (4611686018427387904); /* 2^62: far past any clock */
  GError *error = NULL;

  g_test_summary ("A counter ahead of the clock (tokens faster than one a microsecond, a clock "
                  "set back) goes on rising by exactly one per acquisition, exact beyond 2^53, "
                  "for a single lock and for try_lock_all.");
  TEST_SKIP_IF_NO_SERVER (fx);

  freeReplyObject (test_redis_command (fx->redis, "SET %s %" G_GUINT64_FORMAT, fence_key, ahead));
  freeReplyObject (
      test_redis_command (fx->redis, "SET %s %" G_GUINT64_FORMAT, other_key, ahead + 10));
  test_lock_ok (lock);
  g_assert_cmpuint (token_of (lock), ==, ahead + 1);
  test_unlock_ok (lock);
  test_lock_ok (lock);
  g_assert_cmpuint (token_of (lock), ==, ahead + 2);
  test_unlock_ok (lock);
  both[0] = lock;
  both[1] = other;
  g_assert_true (redis_lock_try_lock_all (both, 2, 0, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (token_of (lock), ==, ahead + 3);
  g_assert_cmpuint (token_of (other), ==, ahead + 11);
  g_assert_true (redis_lock_unlock_all (both, 2, &error));
  g_assert_no_error (error);
  counter = test_redis_string (fx->redis, "GET %s", fence_key);
  g_assert_cmpstr (counter, ==, "4611686018427387907");
  g_assert_cmpint (test_redis_pttl (fx->redis, fence_key), ==, -1);
}

static void
test_on_restart_empty (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);
  g_autoptr (RedisLock) lock = test_obtain (r, "restarted");
  g_autoptr (RedisLock) multi = test_obtain (r, "restarted-multi");
  g_autoptr (GError) error = NULL;
  g_autofree char *fence_key = g_strdup_printf ("fence:{%s:restarted}", TEST_REGISTRY_KEY);
  guint64 highest = 0;

  g_test_summary ("The server restarts without persistence and loses every counter: the next "
                  "token of the name, by lock and by try_lock_all, is higher than every token "
                  "handed out before.");
  TEST_SKIP_IF_NO_SERVER (fx);

  for (int i = 0; i < 20; i++)
    {
      RedisLock *l = i % 2 ? multi : lock;
      test_lock_ok (l);
      g_assert_cmpuint (token_of (l), >, 0);
      highest = MAX (highest, token_of (l));
      test_unlock_ok (l);
    }

  redis_lock_test_server_stop (fx->server);
  g_clear_pointer (&fx->redis, redisFree);
  g_assert_true (redis_lock_test_server_start (fx->server, &error));
  g_assert_no_error (error);
  fx->redis = test_redis_connect (fx->server);
  g_assert_cmpint (test_redis_integer (fx->redis, "EXISTS %s", fence_key), ==, 0);

  test_lock_ok (lock);
  g_test_message ("highest token before the restart %" G_GUINT64_FORMAT
                  ", first after %" G_GUINT64_FORMAT,
                  highest, token_of (lock));
  g_assert_cmpuint (token_of (lock), >, highest);
  highest = token_of (lock);
  test_unlock_ok (lock);
  g_assert_true (redis_lock_try_lock_all (&multi, 1, 0, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (token_of (multi), >, highest);
  g_assert_true (redis_lock_unlock_all (&multi, 1, &error));
  g_assert_no_error (error);
}

/* One critical section as the hammer threads record it. */
typedef struct
{
  guint64 token;
  guint registry; /* which registry's thread held it */
} Section;

#define HAMMER_REGISTRIES 3
#define HAMMER_THREADS_EACH 2
#define HAMMER_SECTIONS_EACH 60

typedef struct
{
  TestFixture *fx;
  RedisLockRegistry *registries[HAMMER_REGISTRIES];
  RedisLock *locks[HAMMER_REGISTRIES];
  TestSync sync;
  GArray *sections; /* Section, in the order the critical sections ran */
  gint inside;
  gint overlaps;
  gint failures;
} Hammer;

static void
hammer_thread (guint index, gpointer data)
{
  Hammer *h = data;
  guint reg = index % HAMMER_REGISTRIES;
  RedisLock *lock = h->locks[reg];

  for (guint i = 0; i < HAMMER_SECTIONS_EACH; i++)
    {
      GError *error = NULL;
      Section s = { 0, reg };
      guint64 reentered;

      if (!redis_lock_lock (lock, &error))
        {
          g_printerr ("lock: %s\n", error->message);
          g_clear_error (&error);
          g_atomic_int_inc (&h->failures);
          continue;
        }
      if (g_atomic_int_add (&h->inside, 1) != 0)
        g_atomic_int_inc (&h->overlaps);
      s.token = redis_lock_get_fencing_token (lock);
      /* Re-entry keeps the token. */
      g_assert_true (redis_lock_lock (lock, NULL));
      reentered = redis_lock_get_fencing_token (lock);
      g_assert_true (redis_lock_unlock (lock, NULL));
      if (reentered != s.token)
        g_atomic_int_inc (&h->failures);
      test_sync_lock (&h->sync);
      g_array_append_val (h->sections, s);
      test_sync_unlock (&h->sync);
      if (i % 7 == 3)
        g_usleep (200);
      g_atomic_int_add (&h->inside, -1);
      if (!redis_lock_unlock (lock, &error))
        {
          g_printerr ("unlock: %s\n", error->message);
          g_clear_error (&error);
          g_atomic_int_inc (&h->failures);
        }
    }
}

static void
test_increase_over_registries_and_threads (TestFixture *fx, gconstpointer data)
{
  Hammer h = { .fx = fx };
  guint64 acquisitions = 0, changes = 0, distinct = 1;
  RedisLockRegistryStats stats;

  g_test_summary ("3 registries × 2 threads, 360 critical sections of one name: the tokens seen "
                  "in the order the sections ran never go down, rise whenever the holding "
                  "registry changes, stay equal within a hand-off streak and a re-entry, every "
                  "acquisition of the lease in the store has a token of its own, and the "
                  "counter ends at the last token.");
  TEST_SKIP_IF_NO_STORE (fx);

  test_sync_init (&h.sync);
  h.sections = g_array_new (FALSE, FALSE, sizeof (Section));
  for (guint r = 0; r < HAMMER_REGISTRIES; r++)
    {
      h.registries[r] = fenced_registry (fx);
      h.locks[r] = test_obtain (h.registries[r], "hammered");
    }
  test_run_threads (HAMMER_REGISTRIES * HAMMER_THREADS_EACH, hammer_thread, &h);
  g_assert_cmpint (h.overlaps, ==, 0);
  g_assert_cmpint (h.failures, ==, 0);
  g_assert_cmpuint (h.sections->len, ==, HAMMER_REGISTRIES * HAMMER_THREADS_EACH * HAMMER_SECTIONS_EACH);

  for (guint i = 0; i < h.sections->len; i++)
    {
      Section *s = &g_array_index (h.sections, Section, i);
      Section *p = i > 0 ? &g_array_index (h.sections, Section, i - 1) : NULL;

      g_assert_cmpuint (s->token, >, 0);
      if (p == NULL)
        continue;
      g_assert_cmpuint (s->token, >=, p->token);
      if (s->token != p->token)
        distinct++;
      if (s->registry != p->registry)
        {
          g_assert_cmpuint (s->token, >, p->token);
          changes++;
        }
    }
  for (guint r = 0; r < HAMMER_REGISTRIES; r++)
    {
      redis_lock_registry_get_stats (h.registries[r], &stats);
      acquisitions += stats.acquisitions;
    }
  g_test_message ("%u sections, %" G_GUINT64_FORMAT " acquisitions, %" G_GUINT64_FORMAT
                  " changes of registry",
                  h.sections->len, acquisitions, changes);
  g_assert_cmpuint (changes, >, 0);
  g_assert_cmpuint (distinct, ==, acquisitions);
  g_assert_cmpuint (last_token (h.registries[0], "hammered"), ==,
                    g_array_index (h.sections, Section, h.sections->len - 1).token);

  for (guint r = 0; r < HAMMER_REGISTRIES; r++)
    {
      redis_lock_unref (h.locks[r]);
      redis_lock_registry_unref (h.registries[r]);
    }
  g_array_unref (h.sections);
  test_sync_clear (&h.sync);
}

static void
test_increase_alternating_with_expiry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = fenced_registry (fx);
  g_autoptr (RedisLockRegistry) b = fenced_registry (fx);
  g_autoptr (RedisLock) la = test_obtain (a, "alternating");
  g_autoptr (RedisLock) lb = test_obtain (b, "alternating");
  g_autofree char *key = test_lock_key ("alternating");
  guint64 previous = 0;

  g_test_summary ("Two registries take one name in turn 300 times; every third time the "
                  "holder's key expires under it (deleted behind its back) and the other takes "
                  "the lock meanwhile: every token is higher than every earlier one, and the "
                  "counter survives the expiry.");
  TEST_SKIP_IF_NO_STORE (fx);

  for (guint i = 0; i < 300; i++)
    {
      RedisLock *mine = i % 2 ? lb : la;
      RedisLock *other = i % 2 ? la : lb;
      guint64 token;

      test_lock_ok (mine);
      token = token_of (mine);
      g_assert_cmpuint (token, >, previous);
      previous = token;
      if (i % 3 == 0)
        {
          /* Expired while the holder was away: the other registry gets a higher token,
           * and the first holder's unlock reports the loss. */
          g_assert_true (test_store_delete (fx, key));
          test_lock_ok (other);
          g_assert_cmpuint (token_of (other), >, previous);
          previous = token_of (other);
          test_unlock_ok (other);
          test_unlock_lease_lost (mine);
        }
      else
        test_unlock_ok (mine);
    }
  g_assert_cmpuint (last_token (a, "alternating"), ==, previous);
}

/* A thread that waits for the lock, records its token and hold count, and unlocks. */
typedef struct
{
  RedisLock *lock;
  gint tid;
  guint64 token;
} Follower;

static gpointer
follower_thread (gpointer data)
{
  Follower *f = data;

  g_atomic_int_set (&f->tid, test_thread_id ());
  test_lock_ok (f->lock);
  f->token = redis_lock_get_fencing_token (f->lock);
  test_unlock_ok (f->lock);
  return NULL;
}

static void
test_handoff_keeps_token (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);
  g_autoptr (RedisLock) lock = test_obtain (r, "handed");
  RedisLockRegistryStats before, after;
  Follower f = { 0 };
  GThread *thread;
  guint64 token;

  g_test_summary ("A lease handed to a waiting thread of the same registry keeps its token; "
                  "the next acquisition in the store gets a higher one.");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lock_ok (lock);
  token = token_of (lock);
  f.lock = lock;
  thread = g_thread_new ("follower", follower_thread, &f);
  TEST_WAIT_UNTIL (g_atomic_int_get (&f.tid) != 0, 10000);
  g_assert_true (test_wait_thread_blocked (f.tid, 10000));
  redis_lock_registry_get_stats (r, &before);
  test_unlock_ok (lock);
  g_thread_join (thread);
  redis_lock_registry_get_stats (r, &after);
  g_assert_cmpuint (after.local_handoffs - before.local_handoffs, ==, 1);
  g_assert_cmpuint (f.token, ==, token);

  test_lock_ok (lock);
  g_assert_cmpuint (token_of (lock), >, token);
  test_unlock_ok (lock);
}

static gpointer
read_token_thread (gpointer lock)
{
  return GSIZE_TO_POINTER ((gsize) redis_lock_get_fencing_token (lock));
}

static void
test_other_thread_sees_zero (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);
  g_autoptr (RedisLock) lock = test_obtain (r, "mine");

  g_test_summary ("The token is the calling thread's: 0 for a thread that does not hold the "
                  "lock while another does, and 0 again after the unlock.");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lock_ok (lock);
  g_assert_cmpuint (token_of (lock), >, 0);
  g_assert_cmpuint (GPOINTER_TO_SIZE (g_thread_join (g_thread_new ("reader", read_token_thread,
                                                                    lock))),
                    ==, 0);
  test_unlock_ok (lock);
  g_assert_cmpuint (redis_lock_get_fencing_token (lock), ==, 0);
}

/* --- The storage example of docs/fencing.md ---------------------------------------- */

/* A resource that accepts a write only with a token at least as high as the highest it
 * has seen, per resource name. */
typedef struct
{
  GHashTable *highest; /* resource -> guint64 * */
  GString *log;
} Storage;

static gboolean
storage_write (Storage *storage, const char *resource, guint64 token, const char *data)
{
  guint64 *highest = g_hash_table_lookup (storage->highest, resource);

  if (highest != NULL && token < *highest)
    return FALSE;
  if (highest == NULL)
    {
      highest = g_new0 (guint64, 1);
      g_hash_table_insert (storage->highest, g_strdup (resource), highest);
    }
  *highest = token;
  g_string_append (storage->log, data);
  return TRUE;
}

static void
test_storage_refuses_paused_holder (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) slow = fenced_registry (fx);
  g_autoptr (RedisLockRegistry) fast = fenced_registry (fx);
  g_autoptr (RedisLock) slow_lock = test_obtain (slow, "file");
  g_autoptr (RedisLock) fast_lock = test_obtain (fast, "file");
  g_autofree char *key = test_lock_key ("file");
  Storage storage = { g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free),
                      g_string_new (NULL) };
  guint64 slow_token;

  g_test_summary ("The example of docs/fencing.md: a storage that remembers the highest token per "
                  "resource refuses the write of a holder that was paused past its TTL while "
                  "another process took the lock and wrote.");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lock_ok (slow_lock);
  slow_token = token_of (slow_lock);
  g_assert_true (storage_write (&storage, "file", slow_token, "a"));

  /* The holder is paused (GC, swap, SIGSTOP) past its TTL: the key expires, and
   * another process takes the lock and writes with its own token. */
  g_assert_true (test_store_delete (fx, key));
  test_lock_ok (fast_lock);
  g_assert_cmpuint (token_of (fast_lock), >, slow_token);
  g_assert_true (storage_write (&storage, "file", token_of (fast_lock), "b"));

  /* The paused holder resumes and writes with its old token: refused. */
  g_assert_false (storage_write (&storage, "file", slow_token, "c"));
  g_assert_cmpstr (storage.log->str, ==, "ab");
  test_unlock_ok (fast_lock);
  test_unlock_lease_lost (slow_lock);

  g_hash_table_unref (storage.highest);
  g_string_free (storage.log, TRUE);
}

/* --- Keys ----------------------------------------------------------------------------- */

/* A raw connection to the master of @cluster that serves @key's slot. */
static redisContext *
cluster_owner_connect (RedisLockTestCluster *cluster, const char *key)
{
  int owner = redis_lock_test_cluster_get_slot_owner (cluster, redis_lock_test_cluster_key_slot (key));
  struct timeval tv = { 5, 0 };
  redisContext *c;

  g_assert_cmpint (owner, >=, 0);
  c = redisConnectWithTimeout ("127.0.0.1", redis_lock_test_cluster_get_port (cluster, (guint) owner), tv);
  g_assert_nonnull (c);
  g_assert_cmpint (c->err, ==, 0);
  return c;
}

typedef struct
{
  const char *name;
  gboolean tagged; /* the lock key has a hash tag: fence:KEY, else fence:{KEY} */
} KeyCase;

static const KeyCase key_cases[] = {
  { "orders", FALSE },
  { "a{b", FALSE },
  { "{user42}:cart", TRUE },
  { "x{y}z}", TRUE },
};

static void
test_counter_key_and_slot (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);

  g_test_summary ("The counter is fence:{KEY}, or fence:KEY when KEY has a hash tag, and on a "
                  "Cluster it lives on the master of the lock key's slot.");
  TEST_SKIP_IF_NO_STORE (fx);

  for (gsize i = 0; i < G_N_ELEMENTS (key_cases); i++)
    {
      g_autoptr (RedisLock) lock = test_obtain (r, key_cases[i].name);
      const char *key = redis_lock_get_key (lock);
      g_autofree char *fence_key = key_cases[i].tagged ? g_strconcat ("fence:", key, NULL)
                                                       : g_strconcat ("fence:{", key, "}", NULL);
      guint64 token;

      test_lock_ok (lock);
      token = token_of (lock);
      test_unlock_ok (lock);
      g_assert_cmpuint (last_token (r, key_cases[i].name), ==, token);
      if (fx->store == TEST_STORE_REDIS)
        {
          g_autofree char *value = test_redis_string (fx->redis, "GET %s", fence_key);
          g_assert_cmpuint (g_ascii_strtoull (value, NULL, 10), ==, token);
        }
      else if (fx->store == TEST_STORE_CLUSTER)
        {
          redisContext *c = cluster_owner_connect (fx->cluster, key);
          g_autofree char *value = NULL;

          g_assert_cmpuint (redis_lock_test_cluster_key_slot (fence_key), ==,
                            redis_lock_test_cluster_key_slot (key));
          value = test_redis_string (c, "GET %s", fence_key);
          g_assert_cmpuint (g_ascii_strtoull (value, NULL, 10), ==, token);
          redisFree (c);
        }
    }
}

static void
test_invalid_name (TestFixture *fx, gconstpointer data)
{
  static const char *const invalid[] = { "a}b", "x{}y}", "}" };
  g_autoptr (RedisLockRegistry) r = fenced_registry (fx);

  g_test_summary ("With fencing on, a name whose key has a “}” but no hash tag is INVALID from "
                  "every lock call, on every store, before anything is sent; with fencing off "
                  "it locks as any name.");
  TEST_SKIP_IF_NO_STORE (fx);

  for (gsize i = 0; i < G_N_ELEMENTS (invalid); i++)
    {
      g_autoptr (RedisLock) lock = test_obtain (r, invalid[i]);
      g_autofree char *key = test_lock_key (invalid[i]);
      RedisLockRegistryStats before, after;
      GError *error = NULL;
      guint64 token = 1;

      redis_lock_registry_get_stats (r, &before);
      g_assert_false (redis_lock_lock (lock, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_clear_error (&error);
      g_assert_false (redis_lock_try_lock (lock, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_clear_error (&error);
      g_assert_false (redis_lock_try_lock_for (lock, 100, NULL, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_clear_error (&error);
      g_assert_false (redis_lock_try_lock_full (lock, 100, 1000, NULL, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_clear_error (&error);
      g_assert_false (redis_lock_try_lock_all (&lock, 1, 100, NULL, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_clear_error (&error);
      g_assert_false (redis_lock_registry_get_last_fencing_token (r, invalid[i], &token, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_clear_error (&error);
      redis_lock_registry_get_stats (r, &after);
      g_assert_cmpuint (after.round_trips, ==, before.round_trips);
      g_assert_false (redis_lock_is_acquired_in_this_process (lock));
      g_assert_false (test_store_exists (fx, key));

      redis_lock_registry_set_fencing (r, FALSE);
      test_lock_ok (lock);
      g_assert_cmpuint (redis_lock_get_fencing_token (lock), ==, 0);
      test_unlock_ok (lock);
      redis_lock_registry_set_fencing (r, TRUE);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  test_add_stores_but_quorum ("/fencing/off/zero", NULL, test_off_is_zero);
  test_add_redis ("/fencing/off/wire-unchanged", NULL, test_off_wire_unchanged);
  test_add_redis ("/fencing/on/one-round-trip", NULL, test_on_one_round_trip);
  test_add_stores_but_quorum ("/fencing/on/follows-clock", NULL, test_on_follows_clock);
  test_add_redis ("/fencing/on/counter-ahead-of-clock", NULL, test_on_counter_ahead_of_clock);
  test_add_redis ("/fencing/on/restart-empty", NULL, test_on_restart_empty);
  test_add_stores_but_quorum ("/fencing/increase/registries-and-threads", NULL,
                   test_increase_over_registries_and_threads);
  test_add_stores_but_quorum ("/fencing/increase/alternating-with-expiry", NULL,
                   test_increase_alternating_with_expiry);
  test_add_stores_but_quorum ("/fencing/keep/handoff", NULL, test_handoff_keeps_token);
  test_add_stores_but_quorum ("/fencing/keep/other-thread-sees-zero", NULL, test_other_thread_sees_zero);
  test_add_stores_but_quorum ("/fencing/storage/refuses-paused-holder", NULL,
                   test_storage_refuses_paused_holder);
  test_add_stores_but_quorum ("/fencing/keys/counter-key-and-slot", NULL, test_counter_key_and_slot);
  test_add_stores_but_quorum ("/fencing/keys/invalid-name", NULL, test_invalid_name);
  return g_test_run ();
}
