/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common.h: helpers shared by the test programs.
 *
 * The tests check the library against a real redis-server (see redislock-test.h) and,
 * for the behaviour both stores promise, against the in-process `memory://NAME` store
 * too, from the same test source. Most of what they share is a way to look at the
 * store from the outside: a raw hiredis connection with typed replies and the
 * per-command counters of `INFO commandstats` (Redis only), and store-neutral helpers
 * that read the owner and PTTL of a key, delete it or hand it to another owner behind
 * the holder's back (Redis commands, or the memory store's test hooks). The rest is
 * the fixture every test starts from (its own store, one registry), the registration
 * of a test for both stores, a counter the critical sections of a test share, a
 * monotonic clock in milliseconds, small thread helpers (a hand-shake ThreadSanitizer
 * can see, a thread that takes a lock and reports), a recorder for the lease-lost
 * callback, and a way to run checks in a forked child. Every helper asserts on
 * failure, so a test reads as the behaviour it checks.
 */
#ifndef REDIS_LOCK_TESTS_COMMON_H
#define REDIS_LOCK_TESTS_COMMON_H

#include <pthread.h>

#include <gio/gio.h>
#include <hiredis/hiredis.h>
#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

G_BEGIN_DECLS

/* The registry key every fixture uses; each test has its own server or memory store,
 * so a fixed key cannot collide. */
#define TEST_REGISTRY_KEY "rltest"

/* --- A raw look at the server ------------------------------------------------------ */

/* Connects to @server's socket (asserts success). Free with redisFree(). */
redisContext *test_redis_connect (RedisLockTestServer *server);
/* A raw connection to the master of the test Cluster that serves @key (a new one each
 * call; redisFree() it). */
redisContext *test_cluster_connect_for_key (RedisLockTestCluster *cluster, const char *key);

/* Runs a command, asserts a reply came back (an error reply is a reply) and returns it;
 * free it with freeReplyObject(). */
redisReply *test_redis_command (redisContext *c, const char *format, ...);

/* Runs a command that must reply with an integer and returns it. */
long long test_redis_integer (redisContext *c, const char *format, ...);

/* Runs a command that must reply with a bulk string, a status or nil; returns a copy
 * (NULL for nil). */
char *test_redis_string (redisContext *c, const char *format, ...);

/* GET of an exact key (binary safe); NULL when the key does not exist. */
char *test_redis_get (redisContext *c, const char *key);

/* PTTL of an exact key: milliseconds left, -1 without expiry, -2 when missing. */
long long test_redis_pttl (redisContext *c, const char *key);

/* The key a lock named @name has under TEST_REGISTRY_KEY. Free with g_free(). */
char *test_lock_key (const char *name);

/* Whether @value is what a key held by @registry stores: its client id, ":" and the
 * number of the acquisition. */
gboolean test_value_is_of (const char *value, RedisLockRegistry *registry);

/* Asserts test_value_is_of(), showing both when it fails. */
#define test_assert_value_of(value, registry)                                                      \
  G_STMT_START                                                                                     \
  {                                                                                                \
    if (!test_value_is_of ((value), (registry)))                                                   \
      g_error ("%s:%d: value “%s” is not held by registry “%s”", __FILE__, __LINE__,               \
               (value) ? (value) : "(null)", redis_lock_registry_get_client_id (registry));        \
  }                                                                                                \
  G_STMT_END

/* CONFIG RESETSTAT: zeroes the counters read by test_redis_command_calls(). */
void test_redis_reset_stats (redisContext *c);

/* How many times @command (lower case, e.g. "evalsha", "set", "unlink", "publish") ran
 * since the last reset, read from `INFO commandstats`; commands run by scripts are
 * counted too. 0 when it never ran. */
long long test_redis_command_calls (redisContext *c, const char *command);

/* --- Time ------------------------------------------------------------------------ */

/* Monotonic clock in milliseconds. */
gint64 test_now_ms (void);

/* Polls @condition every millisecond until it returns TRUE (then returns TRUE) or
 * @timeout_ms passes (then returns FALSE). For waiting on state that has no signal,
 * such as a registry's statistics; the timeout should be generous. */
gboolean test_wait_until (gboolean (*condition) (gpointer data), gpointer data, gint64 timeout_ms);

/* Re-evaluates @expr every millisecond until it holds or @timeout_ms pass, then asserts
 * it. For conditions that are easier to write inline than as a test_wait_until()
 * callback. */
#define TEST_WAIT_UNTIL(expr, timeout_ms)                                                          \
  G_STMT_START                                                                                     \
  {                                                                                                \
    gint64 test_wait_until_deadline_ = g_get_monotonic_time () + (gint64)(timeout_ms)*1000;        \
    while (!(expr) && g_get_monotonic_time () < test_wait_until_deadline_)                         \
      g_usleep (1000);                                                                             \
    g_assert_true (expr);                                                                          \
  }                                                                                                \
  G_STMT_END

/* Asserts that @call, a function that returns a gboolean and sets the GError `error`
 * in scope when it fails, succeeded; when it did not, the failure shows the error's
 * message rather than only "FALSE". */
#define TEST_ASSERT_OK(call)                                                                       \
  G_STMT_START                                                                                     \
  {                                                                                                \
    gboolean test_assert_ok_ = (call);                                                             \
    g_assert_no_error (error);                                                                     \
    g_assert_true (test_assert_ok_);                                                               \
  }                                                                                                \
  G_STMT_END

/* Polls until the registry's contended_attempts counter reaches @at_least (that is,
 * some thread of @registry found the lock held in Redis and is waiting). */
gboolean test_wait_contended (RedisLockRegistry *registry, guint64 at_least, gint64 timeout_ms);

/* Polls until @registry has heard more messages (its notifications counter) than
 * @before. */
gboolean test_wait_heard (RedisLockRegistry *registry, guint64 before, gint64 timeout_ms);

/* --- A registry's statistics ------------------------------------------------------- */

/* A snapshot of redis_lock_registry_get_stats(), for use in an expression:
 * test_stats (r).watchdog_ticks. */
RedisLockRegistryStats test_stats (RedisLockRegistry *registry);

/* Returns once the watchdog of @registry has completed a tick that started after this
 * call (asserts within 10 s). */
void test_wait_full_tick (RedisLockRegistry *registry);

/* --- Threads ----------------------------------------------------------------------- */

typedef void (*TestThreadFunc) (guint index, gpointer data);

/* Runs @func (i, @data) for i in 0..@n_threads-1, each in its own thread, all started
 * before any is joined; returns when all have returned. */
void test_run_threads (guint n_threads, TestThreadFunc func, gpointer data);

/* The kernel id of the calling thread, for test_wait_thread_blocked(). */
gint test_thread_id (void);

/* Polls until the thread @tid of this process is asleep in the kernel (blocked on a
 * futex, a poll or a read), which is as close as a test can get to "it is waiting now"
 * without hooks in the library. Returns FALSE after @timeout_ms. Linux only; elsewhere
 * it returns TRUE at once. */
gboolean test_wait_thread_blocked (gint tid, gint64 timeout_ms);

/* Runs test_run_threads (@n_threads, @func, @data) in a thread of its own and returns
 * that thread at once; g_thread_join() it to wait for all of them. */
GThread *test_run_threads_in_background (guint n_threads, TestThreadFunc func, gpointer data);

/* Asserts, within @timeout_ms each, that every one of the @n_tids kernel thread ids in
 * @tids has been set (atomically, by its thread, 0 until then; see test_thread_id()) and
 * that its thread is then asleep in the kernel (test_wait_thread_blocked()): all of them
 * have come to wait. */
void test_wait_threads_blocked (gint *tids, guint n_tids, gint64 timeout_ms);

/* The number of threads of this process (Linux: the entries of /proc/self/task), to
 * check that a registry joined the threads it started. */
guint test_thread_count (void);

/* Iterates the thread-default main context until *@counter (which its callbacks
 * count up) reaches @value; FALSE after @timeout_ms. */
gboolean test_iterate_until (const guint *counter, guint value, gint64 timeout_ms);

/* The kernel id of this process's thread named @name (its /proc comm), or 0. */
gint test_find_thread (const char *name);

/* How many times the thread @tid of this process has gone to sleep (its
 * voluntary_ctxt_switches): each time it was woken, it slept again after. */
guint64 test_thread_sleeps (gint tid);

/* A mutex and a condition variable for a test's own hand-shakes between threads.
 * GLib 2.74's GMutex and GCond are futex-based, which ThreadSanitizer cannot follow, so
 * these are pthreads (with a monotonic clock, like g_cond_wait_until()). */
typedef struct
{
  pthread_mutex_t mutex;
  pthread_cond_t cond;
} TestSync;

void test_sync_init (TestSync *sync);
void test_sync_clear (TestSync *sync);
void test_sync_lock (TestSync *sync);
void test_sync_unlock (TestSync *sync);
void test_sync_broadcast (TestSync *sync);
/* Waits for a broadcast; call with the mutex locked. */
void test_sync_wait (TestSync *sync);
/* Waits for a broadcast until the monotonic time @end_us (as g_get_monotonic_time());
 * call with the mutex locked. Returns FALSE once @end_us has passed. */
gboolean test_sync_wait_until (TestSync *sync, gint64 end_us);
/* Waits up to @timeout_ms for *@flag, set under @sync's mutex with a broadcast; returns
 * it. Call without the mutex. */
gboolean test_sync_wait_flag (TestSync *sync, const gboolean *flag, gint64 timeout_ms);

/* --- The fixture ----------------------------------------------------------------- */

/* Where a fixture's leases live. */
typedef enum
{
  TEST_STORE_REDIS,   /* a private redis-server on a Unix socket */
  TEST_STORE_MEMORY,  /* memory://NAME with a NAME of its own */
  TEST_STORE_CLUSTER, /* a Redis Cluster of three masters on loopback ports, shared by the
                       * tests of the program and emptied before each */
  TEST_STORE_TLS,     /* a redis-server reached over TLS (rediss://), shared by the tests
                       * of the program and emptied before each; fixture->redis is a
                       * plain connection to its Unix socket */
  TEST_STORE_QUORUM,  /* a quorum registry over three private redis-servers on Unix
                       * sockets; fixture->server and fixture->redis are the first's */
} TestStore;

#define TEST_QUORUM_NODES 3

typedef struct
{
  RedisLockTestServer *server; /* Redis: the test's server; TLS: the program's (not owned);
                                * NULL for the other stores, and when redis-server is
                                * missing (test skipped) */
  RedisLockTestCluster *cluster; /* Cluster: the program's cluster (not owned); else NULL */
  RedisLockTestServer *nodes[TEST_QUORUM_NODES]; /* Quorum: the servers; else NULL */
  char *urls[TEST_QUORUM_NODES + 1];             /* Quorum: their URLs; else NULL */
  RedisLockRegistry *registry; /* on the store, key TEST_REGISTRY_KEY; NULL when skipped */
  redisContext *redis;         /* Redis: raw connection to server; NULL for the memory store */
  TestStore store;
  char *url;         /* the store's URL, for redis_lock_registry_new(); Quorum: the
                      * first node's (a registry there does not take part in the quorum:
                      * use test_registry_new()) */
  char *memory_name; /* memory: the NAME of memory://NAME, unique per test; else NULL */

  /* Private to common.c. */
  RedisLockRegistry *keeper; /* memory: keeps the store open for the whole test */
  pthread_mutex_t mutex;     /* serialises the store helpers' use of redis; guards counters */
  GHashTable *counters;      /* memory: counter name -> gint64 * (see TestCounter) */
} TestFixture;

/* For g_test_add (…, TestFixture, config_lines, test_fixture_setup, …, test_fixture_teardown):
 * a Redis fixture; @data is a NULL-terminated array of extra redis.conf lines, or NULL. */
void test_fixture_setup (TestFixture *fixture, gconstpointer data);
/* Fixtures on one store each, leaving @data to the test (for the callers of
 * test_add_stores(), which use them). */
void test_fixture_setup_redis (TestFixture *fixture, gconstpointer data);
void test_fixture_setup_memory (TestFixture *fixture, gconstpointer data);
void test_fixture_setup_cluster (TestFixture *fixture, gconstpointer data);
void test_fixture_setup_tls (TestFixture *fixture, gconstpointer data);
void test_fixture_setup_quorum (TestFixture *fixture, gconstpointer data);
/* Tears down any of the fixtures above. */
void test_fixture_teardown (TestFixture *fixture, gconstpointer data);

typedef void (*TestFixtureFunc) (TestFixture *fixture, gconstpointer data);

/* Registers @func once per store, as "/redis" @path, "/memory" @path, "/cluster" @path,
 * "/tls" @path and "/quorum" @path (@path starts with "/"), so one test source checks
 * that every store behaves alike. On the quorum, the store helpers below see a key as
 * held by the value a majority of the nodes holds (with the shortest TTL among them),
 * as existing when any node has it, and delete or give it away on every node. @func gets @data as its second argument and the store in
 * fixture->store. The environment variable REDISLOCK_TEST_STORES (for example
 * "redis,memory") limits the stores. */
void test_add_stores (const char *path, gconstpointer data, TestFixtureFunc func);

/* test_add_stores() without the quorum, for what a quorum registry does not have
 * (fencing). */
void test_add_stores_but_quorum (const char *path, gconstpointer data, TestFixtureFunc func);

/* How many servers each request of the fixture's registry goes to: the quorum's nodes,
 * else 1 (its statistics count the commands and round trips of each). */
guint test_store_nodes (TestFixture *fixture);

/* Registers @func as "/redis" @path only, for what only a Redis server has (commands
 * sent, PUBLISH, server faults). */
void test_add_redis (const char *path, gconstpointer data, TestFixtureFunc func);

/* TRUE when the fixture has no server (the test was marked skipped): return at once.
 * For Redis-only fixtures (test_fixture_setup()). */
#define TEST_SKIP_IF_NO_SERVER(fixture)                                                            \
  G_STMT_START                                                                                     \
  {                                                                                                \
    if ((fixture)->server == NULL)                                                                 \
      return;                                                                                      \
  }                                                                                                \
  G_STMT_END

/* Returns at once when the fixture has no store: a Redis test without redis-server
 * installed (marked skipped). A memory fixture always has its store. */
#define TEST_SKIP_IF_NO_STORE(fixture)                                                             \
  G_STMT_START                                                                                     \
  {                                                                                                \
    if ((fixture)->registry == NULL)                                                               \
      return;                                                                                      \
  }                                                                                                \
  G_STMT_END

/* A TCP port of 127.0.0.1 that nothing listens on now. */
int test_free_tcp_port (void);

/* A registry on @url under TEST_REGISTRY_KEY, asserting success. */
RedisLockRegistry *test_registry_new_on (const char *url);

/* A thread that takes a lock with try_lock_for (up to 20 s), records whether and when
 * it returned, and unlocks it at once when it got it. */
typedef struct
{
  RedisLock *lock;
  gboolean acquired;
  gint64 returned_ms;
} TestWaiter;

/* The thread function: g_thread_new (name, test_waiter_main, waiter). */
gpointer test_waiter_main (gpointer waiter);

/* Another registry on the fixture's store and key, as another process would have. */
RedisLockRegistry *test_registry_new (TestFixture *fixture);

/* Obtains @name from @registry, asserting success. */
RedisLock *test_obtain (RedisLockRegistry *registry, const char *name);

/* redis_lock_lock() and redis_lock_unlock(), asserting success without an error. */
void test_lock_ok (RedisLock *lock);
void test_unlock_ok (RedisLock *lock);

/* redis_lock_unlock() of a lock whose lease was lost: asserts that it fails with
 * REDIS_LOCK_ERROR_LEASE_LOST and that the local hold is gone all the same. */
void test_unlock_lease_lost (RedisLock *lock);

/* --- The store, seen from outside, on either store ---------------------------------- *
 * @key is a full key (test_lock_key(), redis_lock_get_key()). These are safe to call
 * from any thread; on Redis they share the fixture's raw connection under a mutex, so
 * a test must not use fixture->redis directly while another thread calls them. */

/* What `GET key` answers: the owner's client id, or NULL when the key is absent.
 * Free with g_free(). */
char *test_store_get_owner (TestFixture *fixture, const char *key);

/* What `PTTL key` answers: milliseconds left, -1 without expiry, -2 when absent. */
gint64 test_store_get_pttl (TestFixture *fixture, const char *key);

/* Whether the key exists (`EXISTS key`). */
gboolean test_store_exists (TestFixture *fixture, const char *key);

/* Deletes the key behind its holder's back, as an expiry would (`DEL key`; the memory
 * store's redis_lock_memory_store_expire()). Returns whether it existed. Nobody is
 * notified. */
gboolean test_store_delete (TestFixture *fixture, const char *key);

/* Gives the existing key to @owner with @ttl_ms (negative: no expiry), as another
 * process taking it over would (`SET key owner [PX ttl] XX`; the memory store's
 * redis_lock_memory_store_steal()). Asserts that the key existed. Nobody is notified. */
void test_store_set_owner (TestFixture *fixture, const char *key, const char *owner, gint64 ttl_ms);

/* Asserts that the lock @name (under TEST_REGISTRY_KEY) is held by @owner's client id
 * with 0 < PTTL <= @max_pttl_ms. */
void test_assert_held_by (TestFixture *fixture, const char *name, RedisLockRegistry *owner,
                          gint64 max_pttl_ms);

/* Asserts that the key of the lock @name (under TEST_REGISTRY_KEY) does not exist. */
void test_assert_free (TestFixture *fixture, const char *name);

/* --- A thread that takes a lock and reports ------------------------------------------ */

typedef struct
{
  /* Set before the thread starts: lock and wait_ms by test_taker_start(), the rest by
   * the test. */
  RedisLock *lock;
  gint64 wait_ms; /* for try_lock_for; G_MININT64: call lock() */
  GCancellable *cancellable;
  TestFixture *fixture; /* when set: read the key's owner while held */

  /* Set by the thread. */
  gint tid;  /* set (atomically) just before the call */
  gint done; /* set (atomically) after the call */
  gboolean result;
  GError *error;
  gint64 called_ms;
  gint64 returned_ms;
  char *value_while_held; /* owner of the key while held, when fixture is set */
} TestTaker;

/* The thread function: g_thread_new (name, test_taker_main, taker). It takes
 * taker->lock, records what happened and when, and, when it got the lock, unlocks it
 * at once (asserting success). */
gpointer test_taker_main (gpointer taker);

/* Sets taker->lock to @lock and taker->wait_ms to @wait_ms (G_MININT64: lock()) and
 * starts the thread; set cancellable and fixture before. Returns the thread, for
 * test_taker_join() or g_thread_join(). */
GThread *test_taker_start (TestTaker *taker, RedisLock *lock, gint64 wait_ms);

/* For test_wait_until(): the taker is about to make its call / has returned. */
gboolean test_taker_started (gpointer taker);
gboolean test_taker_done (gpointer taker);

/* Joins the taker's @thread, failing (instead of hanging) when it has not returned
 * within @timeout_ms: a wake-up that never comes must be a test failure. */
void test_taker_join (TestTaker *taker, GThread *thread, gint64 timeout_ms);

/* Frees what the thread left in @taker (error, value_while_held). */
void test_taker_clear (TestTaker *taker);

/* --- What the lease-lost callback saw ------------------------------------------------ */

typedef struct
{
  TestSync sync;
  guint calls;
  RedisLock *lock;           /* the lock of the last call (not referenced) */
  gint64 at_ms;              /* when the first call came */
  GThread *thread;           /* the thread of the last call */
  GCancellable *cancellable; /* the holder's lease cancellable, set by the test */
  gboolean cancelled_first;  /* was it cancelled when the callback ran */
  gint destroyed;            /* destroy notify calls (atomic) */
} TestLeaseLost;

void test_lease_lost_init (TestLeaseLost *lease_lost);
void test_lease_lost_clear (TestLeaseLost *lease_lost);

/* For redis_lock_registry_set_lease_lost_callback (registry, test_lease_lost_cb,
 * lease_lost, test_lease_lost_destroy or NULL). */
void test_lease_lost_cb (RedisLock *lock, gpointer lease_lost);
void test_lease_lost_destroy (gpointer lease_lost);

/* Sets the cancellable whose state the callback records in cancelled_first. */
void test_lease_lost_set_cancellable (TestLeaseLost *lease_lost, GCancellable *cancellable);

/* Waits up to @timeout_ms for a first call; returns the number of calls so far. */
guint test_lease_lost_wait (TestLeaseLost *lease_lost, gint64 timeout_ms);

/* The number of calls so far. */
guint test_lease_lost_calls (TestLeaseLost *lease_lost);

/* --- A forked child ------------------------------------------------------------------ */

/* Checks run in a child process. The child of a multithreaded process may only do
 * simple things, so it must not assert: it returns the number of its first failed
 * check, 0 when all passed. */
typedef int (*TestChildFunc) (gpointer data);

/* Forks; the child runs @func (@data) and exits with its result without running any
 * cleanup. Waits at most 20 s for it (then kills it and fails) and asserts that it
 * exited with 0, logging the number of the failed check otherwise. */
void test_run_child (TestChildFunc func, gpointer data);

/* --- A counter shared by critical sections ------------------------------------------- *
 * A number the threads of a test read and then write back plus one inside a critical
 * section, on purpose not atomically, so two holders inside together lose an
 * increment. On Redis it is the string key @name read with GET and written with SET
 * on a connection of its own; on the memory store it is a number in the fixture, read
 * and written with atomic loads and stores (never an atomic increment). */

typedef struct _TestCounter TestCounter;

/* A handle on the counter @name of @fixture, for one thread. */
TestCounter *test_counter_open (TestFixture *fixture, const char *name);
/* The value, 0 when never written. */
gint64 test_counter_get (TestCounter *counter);
void test_counter_set (TestCounter *counter, gint64 value);
void test_counter_free (TestCounter *counter);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (TestCounter, test_counter_free)

G_END_DECLS

#endif /* REDIS_LOCK_TESTS_COMMON_H */
