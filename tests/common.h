/* common.h: helpers shared by the test programs.
 *
 * The tests check the library against a real redis-server (see redislock-test.h), so
 * most of what they share is a way to look at that server from the outside: a raw
 * hiredis connection, typed replies, GET/PTTL of a key and the per-command counters of
 * `INFO commandstats`, which is how a test proves what the library did or did not send.
 * The rest is the fixture every test starts from (its own server, one registry, one raw
 * connection), a monotonic clock in milliseconds, and small thread helpers. Every
 * helper asserts on failure, so a test reads as the behaviour it checks.
 */
#ifndef REDIS_LOCK_TESTS_COMMON_H
#define REDIS_LOCK_TESTS_COMMON_H

#include <gio/gio.h>
#include <hiredis/hiredis.h>
#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

G_BEGIN_DECLS

/* The registry key every fixture uses; each test has its own server, so a fixed key
 * cannot collide. */
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

typedef struct
{
  RedisLockTestServer *server; /* NULL when redis-server is missing (test skipped) */
  RedisLockRegistry *registry; /* on server, key TEST_REGISTRY_KEY */
  redisContext *redis;         /* raw connection to server */
} TestFixture;

/* For g_test_add (…, TestFixture, config_lines, test_fixture_setup, …, test_fixture_teardown):
 * @data is a NULL-terminated array of extra redis.conf lines, or NULL. */
void test_fixture_setup (TestFixture *fixture, gconstpointer data);
void test_fixture_teardown (TestFixture *fixture, gconstpointer data);

/* TRUE when the fixture has no server (the test was marked skipped): return at once. */
#define TEST_SKIP_IF_NO_SERVER(fixture)                                                            \
  G_STMT_START                                                                                     \
  {                                                                                                \
    if ((fixture)->server == NULL)                                                                 \
      return;                                                                                      \
  }                                                                                                \
  G_STMT_END

/* Another registry on the fixture's server and key, as another process would have. */
RedisLockRegistry *test_registry_new (TestFixture *fixture);

/* Obtains @name from @registry, asserting success. */
RedisLock *test_obtain (RedisLockRegistry *registry, const char *name);

G_END_DECLS

#endif /* REDIS_LOCK_TESTS_COMMON_H */
