/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock-index.c: the read-write lock's readers index on Redis, the one key through
 * which a writer finds the readers of other processes (tests/rwlock.c registers these
 * with rwlock_add_index_tests()).
 *
 * The index deleted behind the readers' backs (a writer then gets in beside them, which
 * nothing can prevent, but the readers are told their lease is lost: at once when a
 * writer takes the lock, and at the reader lease's next renewal otherwise); a reader
 * whose registration's score went stale while its lease lives still holds writers
 * back; and a million stale registrations cost a writer a bounded amount of work per
 * script call (no long command on the server), each call removing a few of them. The
 * memory store keeps no index (its readers are found by key prefix), so these run on
 * the Redis stores only.
 */
#include "rwlock-helpers.h"

/* TRUE when the fixture's store keeps a readers index (every store here but memory);
 * otherwise the test is marked skipped. */
static gboolean
has_index (TestFixture *fx)
{
  if (fx->store == TEST_STORE_MEMORY)
    g_test_skip ("the memory store keeps no readers index");
  return fx->registry != NULL && fx->store != TEST_STORE_MEMORY;
}

/* A read of @lock is held by the calling thread: asserts that it is reported lost
 * within @within_ms (the three ways) and that its unlock says LEASE_LOST. */
static void
assert_read_told (RedisRWLock *lock, TestLeaseLost *lost, guint calls_before, gint64 within_ms)
{
  g_autoptr (GError) error = NULL;
  GCancellable *cancellable = redis_rw_lock_get_lease_cancellable (lock);
  gint64 start = test_now_ms ();

  g_assert_nonnull (cancellable);
  TEST_WAIT_UNTIL (redis_rw_lock_is_lease_lost (lock), within_ms);
  g_test_message ("the reader was told after %" G_GINT64_FORMAT " ms", test_now_ms () - start);
  TEST_WAIT_UNTIL (g_cancellable_is_cancelled (cancellable), 10000);
  TEST_WAIT_UNTIL (test_lease_lost_calls (lost) > calls_before, 10000);
  g_assert_false (redis_rw_lock_read_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
}

static void
test_index_deleted_writer (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisRWLock) lock = NULL, wlock = NULL;
  g_autofree char *index = rw_key (NAME, "readers");
  g_autoptr (GError) error = NULL;
  TestLeaseLost lost;
  guint calls;

  g_test_summary ("With the readers index deleted under a reader (TTL 30 s, so no renewal "
                  "comes), a writer of another registry gets in, and the reader is told "
                  "within about a second: is_lease_lost, the cancellable, the callback, and "
                  "its unlock fails LEASE_LOST; then reading and writing go on as usual");
  if (!has_index (fx))
    return;

  test_lease_lost_init (&lost);
  redis_lock_registry_set_expire_after_ms (fx->registry, 30000);
  redis_lock_registry_set_lease_lost_callback (fx->registry, test_lease_lost_cb, &lost, NULL);
  rb = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  wlock = obtain_rw (rb, NAME);
  read_ok (lock);
  calls = test_lease_lost_calls (&lost);
  g_assert_true (test_store_delete (fx, index));

  g_assert_true (redis_rw_lock_try_write_lock_for (wlock, 2000, NULL, &error));
  g_assert_no_error (error);
  assert_read_told (lock, &lost, calls, 1500);
  write_unlock_ok (wlock);

  read_ok (lock);
  g_assert_false (redis_rw_lock_is_lease_lost (lock));
  assert_not_acquired (wlock, TRUE, 300);
  read_unlock_ok (lock);
  write_ok (wlock);
  write_unlock_ok (wlock);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&lost);
}

static void
test_index_deleted_renewal (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autofree char *index = rw_key (NAME, "readers");
  g_autofree char *rkey = NULL;
  TestLeaseLost lost;
  guint calls;

  g_test_summary ("With the readers index deleted under a reader and no writer coming, the "
                  "reader lease's next renewal (TTL 1500 ms: a renewal every 500 ms) finds "
                  "its registration gone and reports the lease lost, though its key lives");
  if (!has_index (fx))
    return;

  test_lease_lost_init (&lost);
  redis_lock_registry_set_expire_after_ms (fx->registry, 1500);
  redis_lock_registry_set_lease_lost_callback (fx->registry, test_lease_lost_cb, &lost, NULL);
  lock = obtain_rw (fx->registry, NAME);
  rkey = reader_key (fx->registry, NAME);
  read_ok (lock);
  calls = test_lease_lost_calls (&lost);
  g_assert_true (test_store_delete (fx, index));
  g_assert_true (test_store_exists (fx, rkey));
  assert_read_told (lock, &lost, calls, 1500);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&lost);
}

static void
test_stale_score_live_reader (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisRWLock) lock = NULL, wlock = NULL;
  g_autofree char *index = rw_key (NAME, "readers");

  g_test_summary ("A reader whose registration is scored in the past while its lease lives "
                  "still holds a writer of another registry back (the writer meets it, finds "
                  "its lease and scores it again), and is renewed as usual");
  TEST_SKIP_IF_NO_SERVER (fx);

  rb = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  wlock = obtain_rw (rb, NAME);
  read_ok (lock);
  g_assert_cmpint (test_redis_integer (fx->redis, "ZADD %s XX CH 1 %s", index,
                                       redis_lock_registry_get_client_id (fx->registry)),
                   ==, 1);
  assert_not_acquired (wlock, TRUE, 300);
  g_assert_false (redis_rw_lock_is_lease_lost (lock));
  g_assert_cmpint (test_redis_integer (fx->redis, "ZCARD %s", index), ==, 1);
  read_unlock_ok (lock);
  write_ok (wlock);
  write_unlock_ok (wlock);
}

/* The longest command the server ran since SLOWLOG RESET, in µs (0: none logged). */
static long long
slowest_command_us (redisContext *c)
{
  redisReply *reply = test_redis_command (c, "SLOWLOG GET 128");
  long long slowest = 0;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < reply->elements; i++)
    {
      const redisReply *entry = reply->element[i];

      g_assert_true (entry->type == REDIS_REPLY_ARRAY && entry->elements >= 3);
      slowest = MAX (slowest, entry->element[2]->integer);
    }
  freeReplyObject (reply);
  return slowest;
}

/* Registrations that a million registries reading once would leave: `stale-I`, each
 * scored long past, ARGV[1] of them from number ARGV[2] on, in batches of a thousand per
 * ZADD. The test runs it in parts of FILL_PART, each far shorter than the server's
 * busy-script limit, so that the registries' own connections are never answered BUSY. */
static const char fill_script[]
    = "for b = 0, tonumber(ARGV[1]) / 1000 - 1 do\n"
      "  local args = {}\n"
      "  for i = 1, 1000 do\n"
      "    args[2 * i - 1] = 1000\n"
      "    args[2 * i] = 'stale-' .. (tonumber(ARGV[2]) + b * 1000 + i)\n"
      "  end\n"
      "  redis.call('ZADD', KEYS[1], unpack(args))\n"
      "end\n"
      "return redis.call('ZCARD', KEYS[1])\n";
#define FILL_PART 50000

static void
test_million_stale (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisRWLock) lock = NULL, wlock = NULL;
  g_autofree char *index = rw_key (NAME, "readers");
  g_autoptr (GError) error = NULL;
  const long long n = 1000000;
  long long slowest, left;
  gint64 start, took;

  g_test_summary ("With a million stale registrations in the readers index, a writer "
                  "(wait 5000 ms) gets in at once, no command the server runs for it takes "
                  "200 ms or more (SLOWLOG), and each writer's and reader's call removes a "
                  "few of the stale ones");
  TEST_SKIP_IF_NO_SERVER (fx);

  rb = test_registry_new (fx);
  lock = obtain_rw (fx->registry, NAME);
  wlock = obtain_rw (rb, NAME);
  read_ok (lock); /* the index exists, with a live registration */
  read_unlock_ok (lock);
  for (long long done = 0; done < n; done += FILL_PART)
    g_assert_cmpint (test_redis_integer (fx->redis, "EVAL %s 1 %s %d %lld", fill_script, index,
                                         FILL_PART, done),
                     ==, done + FILL_PART + 1);
  freeReplyObject (test_redis_command (fx->redis, "CONFIG SET slowlog-log-slower-than 200000"));
  freeReplyObject (test_redis_command (fx->redis, "SLOWLOG RESET"));

  start = test_now_ms ();
  g_assert_true (redis_rw_lock_try_write_lock_for (wlock, 5000, NULL, &error));
  took = test_now_ms () - start;
  g_assert_no_error (error);
  write_unlock_ok (wlock);
  slowest = slowest_command_us (fx->redis);
  g_test_message ("the writer got in after %" G_GINT64_FORMAT " ms; slowest command logged: "
                  "%lld us", took, slowest);
  g_assert_cmpint (took, <, 1000);
  g_assert_cmpint (slowest, ==, 0);

  /* The writer removed some stale registrations, and a reader removes a few more. */
  left = test_redis_integer (fx->redis, "ZCARD %s", index);
  g_assert_cmpint (left, <, n);
  read_ok (lock);
  read_unlock_ok (lock);
  g_assert_cmpint (test_redis_integer (fx->redis, "ZCARD %s", index), <, left);
  g_assert_cmpint (slowest_command_us (fx->redis), ==, 0);
}

void
rwlock_add_index_tests (void)
{
  test_add_stores_but_quorum ("/rwlock/index/deleted/writer", NULL, test_index_deleted_writer);
  test_add_stores_but_quorum ("/rwlock/index/deleted/renewal", NULL,
                              test_index_deleted_renewal);
  test_add_redis ("/rwlock/index/stale-score-live", NULL, test_stale_score_live_reader);
  test_add_redis ("/rwlock/index/million-stale", NULL, test_million_stale);
}
