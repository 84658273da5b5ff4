/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-test.h: a throwaway redis-server for tests of code that uses redislock.
 *
 * Starts a private redis-server (found on PATH, /usr/sbin or /usr/bin) listening only on
 * a Unix socket in a fresh temporary directory, with persistence off, so tests can run
 * in parallel without touching anyone's Redis. It can be stopped, started again on the
 * same socket (an outage), paused with SIGSTOP (a hung server) and is removed with
 * everything it wrote on free. It plays the role GTestDBus plays for D-Bus. Not part
 * of the umbrella header: include it from tests, benchmarks and demonstrations (the
 * `redislock demo` command starts one when no server is given), never from code that
 * serves production traffic.
 *
 * It also declares the debugging hooks of the in-process `memory://NAME` store (see
 * redis_lock_registry_new()), with which a test plays the part of Redis: expire a
 * lease, hand it to another owner, read who holds a key.
 */
#ifndef REDIS_LOCK_TEST_H
#define REDIS_LOCK_TEST_H

#define __REDIS_LOCK_H_INSIDE__
#include <redislock/redislock-macros.h>
#undef __REDIS_LOCK_H_INSIDE__

#include <glib.h>

G_BEGIN_DECLS

/**
 * RedisLockTestServer:
 *
 * Opaque handle on a private redis-server process. Not thread-safe: drive it from one
 * thread (the test's main thread).
 */
typedef struct _RedisLockTestServer RedisLockTestServer;

/**
 * redis_lock_test_server_new:
 * @config_lines: (nullable) (array zero-terminated=1): extra redis.conf lines, for
 *   example `"requirepass secret"`; %NULL for none
 * @error: return location for a #GError
 *
 * Starts the server and waits until it answers PING (up to 10 s).
 * Errors: %G_IO_ERROR_NOT_FOUND when no redis-server is installed (the message says
 * so; see redis_lock_test_server_new_or_skip()), %G_IO_ERROR_FAILED when it does not
 * start.
 *
 * Returns: (transfer full) (nullable): the running server.
 */
REDIS_LOCK_EXPORT RedisLockTestServer *redis_lock_test_server_new (const char *const *config_lines,
                                                                   GError **error);

/**
 * redis_lock_test_server_new_or_skip:
 * @config_lines: (nullable): as for redis_lock_test_server_new()
 *
 * For GLib test cases: starts a server, or calls g_test_skip() with a clear message
 * and returns %NULL when redis-server is not installed. Any other failure is fatal
 * (g_error()).
 *
 * Returns: (transfer full) (nullable): the running server, or %NULL when skipped.
 */
REDIS_LOCK_EXPORT RedisLockTestServer *redis_lock_test_server_new_or_skip (const char *const *config_lines);

/**
 * redis_lock_test_server_get_url:
 * @server: a server
 *
 * Returns: (transfer none): a `unix://` URL for redis_lock_registry_new(), with the
 *   password when one was configured with `requirepass`.
 */
REDIS_LOCK_EXPORT const char *redis_lock_test_server_get_url (RedisLockTestServer *server);

/**
 * redis_lock_test_server_get_socket_path:
 * @server: a server
 *
 * Returns: (transfer none): the path of the server's Unix socket.
 */
REDIS_LOCK_EXPORT const char *redis_lock_test_server_get_socket_path (RedisLockTestServer *server);

/**
 * redis_lock_test_server_get_pid:
 * @server: a server
 *
 * Returns: the process id of the running server, or 0 when stopped.
 */
REDIS_LOCK_EXPORT GPid redis_lock_test_server_get_pid (RedisLockTestServer *server);

/**
 * redis_lock_test_server_stop:
 * @server: a server
 *
 * Kills the server (SIGKILL, as a crash would) and waits for it to exit. Every key is
 * lost: persistence is off. No-op when already stopped.
 */
REDIS_LOCK_EXPORT void redis_lock_test_server_stop (RedisLockTestServer *server);

/**
 * redis_lock_test_server_start:
 * @server: a stopped server
 * @error: return location for a #GError
 *
 * Starts the server again on the same socket and waits until it answers PING.
 *
 * Returns: %TRUE when it runs.
 */
REDIS_LOCK_EXPORT gboolean redis_lock_test_server_start (RedisLockTestServer *server, GError **error);

/**
 * redis_lock_test_server_pause:
 * @server: a running server
 *
 * Freezes the server with SIGSTOP: connections stay open, nothing is answered.
 */
REDIS_LOCK_EXPORT void redis_lock_test_server_pause (RedisLockTestServer *server);

/**
 * redis_lock_test_server_resume:
 * @server: a paused server
 *
 * Resumes a paused server with SIGCONT.
 */
REDIS_LOCK_EXPORT void redis_lock_test_server_resume (RedisLockTestServer *server);

/**
 * redis_lock_test_server_free:
 * @server: (transfer full) (nullable): a server
 *
 * Stops the server if it runs and removes its temporary directory.
 */
REDIS_LOCK_EXPORT void redis_lock_test_server_free (RedisLockTestServer *server);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockTestServer, redis_lock_test_server_free)

/**
 * redis_lock_memory_store_expire:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 *
 * For tests only: makes the lease @key expire now, as if its TTL had run out. Like a
 * real expiry it notifies nobody: the holder finds the lease lost at its next renewal
 * (watchdog tick or redis_lock_registry_renew()) or at its outermost unlock, and a
 * waiter in another registry retries when the remaining TTL it was told runs out.
 * Thread-safe.
 *
 * Returns: %TRUE when the lease existed; %FALSE when no registry has `memory://@store_name`
 *   open or @key is absent (never taken, released or already expired).
 */
REDIS_LOCK_EXPORT gboolean redis_lock_memory_store_expire (const char *store_name, const char *key);

/**
 * redis_lock_memory_store_steal:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 * @new_owner: the value the key holds from now on (a registry's client id, or any
 *   string standing for another process)
 * @ttl_ms: the new owner's TTL in milliseconds; negative: the key never expires.
 *   Must not be 0.
 *
 * For tests only: another owner takes the lease @key over, as when the key expired
 * and another process took it at once. The former holder finds the lease lost at its
 * next renewal or outermost unlock, which leaves the new owner's key untouched. Nobody
 * is notified. Thread-safe.
 *
 * Returns: %TRUE when the lease existed and now belongs to @new_owner; %FALSE when no
 *   registry has `memory://@store_name` open or @key is absent.
 */
REDIS_LOCK_EXPORT gboolean redis_lock_memory_store_steal (const char *store_name,
                                                          const char *key,
                                                          const char *new_owner,
                                                          gint64 ttl_ms);

/**
 * redis_lock_memory_store_get_owner:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 *
 * For tests only: what `GET key` would answer on Redis. Thread-safe.
 *
 * Returns: (transfer full) (nullable): the value @key holds (for a registry: its client
 *   id, ":" and the number of the acquisition), or %NULL when the
 *   key is absent or no registry has `memory://@store_name` open. Free with g_free().
 */
REDIS_LOCK_EXPORT char *redis_lock_memory_store_get_owner (const char *store_name, const char *key);

/**
 * redis_lock_memory_store_get_pttl:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 *
 * For tests only: what `PTTL key` would answer on Redis. Thread-safe.
 *
 * Returns: the milliseconds left before @key expires, -1 when it never expires, -2
 *   when it is absent or no registry has `memory://@store_name` open.
 */
REDIS_LOCK_EXPORT gint64 redis_lock_memory_store_get_pttl (const char *store_name, const char *key);

G_END_DECLS

#endif /* REDIS_LOCK_TEST_H */
