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
 * monotonic clock in milliseconds, and small thread helpers. Every helper asserts on
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

/* Polls until the registry's contended_attempts counter reaches @at_least (that is,
 * some thread of @registry found the lock held in Redis and is waiting). */
gboolean test_wait_contended (RedisLockRegistry *registry, guint64 at_least, gint64 timeout_ms);

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

/* --- The fixture ----------------------------------------------------------------- */

/* Where a fixture's leases live. */
typedef enum
{
  TEST_STORE_REDIS,  /* a private redis-server on a Unix socket */
  TEST_STORE_MEMORY, /* memory://NAME with a NAME of its own */
} TestStore;

typedef struct
{
  RedisLockTestServer *server; /* Redis: the test's server; NULL for the memory store, and
                                * when redis-server is missing (test skipped) */
  RedisLockRegistry *registry; /* on the store, key TEST_REGISTRY_KEY; NULL when skipped */
  redisContext *redis;         /* Redis: raw connection to server; NULL for the memory store */
  TestStore store;
  char *url;         /* the store's URL, for redis_lock_registry_new() */
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
/* Tears down any of the fixtures above. */
void test_fixture_teardown (TestFixture *fixture, gconstpointer data);

typedef void (*TestFixtureFunc) (TestFixture *fixture, gconstpointer data);

/* Registers @func once per store, as "/redis" @path and "/memory" @path (@path starts
 * with "/"), so one test source checks that both stores behave alike. @func gets
 * @data as its second argument and the store in fixture->store. */
void test_add_stores (const char *path, gconstpointer data, TestFixtureFunc func);

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

/* Another registry on the fixture's store and key, as another process would have. */
RedisLockRegistry *test_registry_new (TestFixture *fixture);

/* Obtains @name from @registry, asserting success. */
RedisLock *test_obtain (RedisLockRegistry *registry, const char *name);

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
