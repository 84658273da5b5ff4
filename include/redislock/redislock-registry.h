/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-registry.h: the registry, a cache of named locks sharing one Redis
 * namespace.
 *
 * A registry owns the connections to one Redis server (or an in-process store, see
 * redis_lock_registry_new()), the client id that starts the value of every key it
 * holds, the lock cache, and the background threads (subscriber, watchdog) it starts
 * on first need.
 * Everything declared here is thread-safe: any thread may call any function at any
 * time, and settings apply to acquisitions that start afterwards. What a registry
 * holds and who waits (statistics, lease and waiter info) is in redislock-inspect.h.
 */
#ifndef REDIS_LOCK_REGISTRY_H
#define REDIS_LOCK_REGISTRY_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

#include <gio/gio.h>
#include <redislock/redislock-macros.h>
#include <redislock/redislock-version.h>

G_BEGIN_DECLS

/**
 * RedisLockRegistry:
 *
 * Opaque, reference-counted, thread-safe registry of named locks.
 *
 * Since: 0.1
 */
typedef struct _RedisLockRegistry RedisLockRegistry;

/**
 * RedisLock:
 *
 * Opaque, reference-counted, thread-safe named lock; see redislock-lock.h.
 *
 * Since: 0.1
 */
typedef struct _RedisLock RedisLock;

/**
 * REDIS_LOCK_TYPE_REGISTRY:
 *
 * The #GType of #RedisLockRegistry: a boxed type whose copy is
 * [method@Redislock.LockRegistry.ref] and whose free is [method@Redislock.LockRegistry.unref].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_REGISTRY (redis_lock_registry_get_type ())

/**
 * redis_lock_registry_get_type:
 *
 * The #GType of #RedisLockRegistry, a boxed type.
 *
 * Returns: the #GType of #RedisLockRegistry, %REDIS_LOCK_TYPE_REGISTRY.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_registry_get_type (void) G_GNUC_CONST;

/**
 * REDIS_LOCK_TYPE_LOCK:
 *
 * The #GType of #RedisLock: a boxed type whose copy is [method@Redislock.Lock.ref] and whose
 * free is [method@Redislock.Lock.unref].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_LOCK (redis_lock_get_type ())

/**
 * redis_lock_get_type:
 *
 * The #GType of #RedisLock, a boxed type.
 *
 * Returns: the #GType of #RedisLock, %REDIS_LOCK_TYPE_LOCK.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_get_type (void) G_GNUC_CONST;

/**
 * RedisLockWaitMode:
 * @REDIS_LOCK_WAIT_PUBSUB: the default. A waiter sleeps until the unlock notification for
 *   its lock arrives, bounded by the holder's remaining TTL, the caller's deadline and
 *   cancellable. Behind a key without expiry (another client's `SET` without `PX`) it
 *   retries every idle_between_tries_ms, so that such a key deleted without a
 *   notification never leaves it asleep for good. With
 *   [method@Redislock.LockRegistry.set_key_tracking], a change of the lock's key without a
 *   notification (a delete by a client that does not publish) wakes it too. Falls back
 *   to SPIN timing while the subscription is down.
 * @REDIS_LOCK_WAIT_SPIN: retry every idle_between_tries_ms.
 *
 * How a thread waits for a lock that another process (or registry) holds in Redis.
 *
 * Since: 0.1
 */
typedef enum
{
  REDIS_LOCK_WAIT_PUBSUB,
  REDIS_LOCK_WAIT_SPIN,
} RedisLockWaitMode;

/**
 * REDIS_LOCK_TYPE_WAIT_MODE:
 *
 * The #GType of #RedisLockWaitMode, a #GEnum.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_WAIT_MODE (redis_lock_wait_mode_get_type ())

/**
 * redis_lock_wait_mode_get_type:
 *
 * The #GType of #RedisLockWaitMode, a #GEnum.
 *
 * Returns: the #GType of #RedisLockWaitMode, %REDIS_LOCK_TYPE_WAIT_MODE.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_wait_mode_get_type (void) G_GNUC_CONST;

/**
 * RedisLockLeaseLostFunc:
 * @lock: (nullable): the lock whose lease was lost; valid for the duration of the call.
 *   %NULL for the lease of another member of the lock family (a semaphore's
 *   #RedisPermit, a #RedisRWLock's reader or writer lease), whose key is then logged
 *   with g_message(): its holder learns of the loss from [method@Redislock.Permit.is_lease_lost]
 *   and [method@Redislock.Permit.get_lease_cancellable], or [method@Redislock.RWLock.is_lease_lost]
 *   and [method@Redislock.RWLock.get_lease_cancellable].
 * @user_data: (closure): the data given to [method@Redislock.LockRegistry.set_lease_lost_callback].
 *
 * Called once per lost lease from a library thread (the registry's watchdog thread,
 * started for this even when renewal is off), never from a thread that may hold the
 * lock; a loss found just before [method@Redislock.LockRegistry.close] is reported from close.
 * It is called with no mutex of the library held, but while the watchdog waits, so it
 * must not block for long. It may call [method@Redislock.Lock.get_name],
 * [method@Redislock.Lock.ref] (the lock stays cached while the call runs, so the reference is to
 * the one object [method@Redislock.LockRegistry.obtain] returns for the name; release it with
 * [method@Redislock.Lock.unref]), [method@Redislock.Lock.is_acquired_in_this_process] and
 * [method@Redislock.LockRegistry.set_lease_lost_callback] (the replaced callback's destroy
 * notify runs once this call returns), signal the holder (a GCond, a pipe, a
 * GMainContext source), or log. It must not call [method@Redislock.Lock.unlock] (only the holding
 * thread can) nor close or unref the registry's last reference.
 *
 * Since: 0.1
 */
typedef void (*RedisLockLeaseLostFunc) (RedisLock *lock, gpointer user_data);

/**
 * REDIS_LOCK_NAME_MAX:
 * The longest lock name accepted, in bytes.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_NAME_MAX 1024

/**
 * redis_lock_registry_new:
 * @url: (nullable): where the locks live. %NULL means `redis://127.0.0.1:6379`.
 *   Accepted forms:
 *   `redis://[[username]:password@]host[:port][/db][?db=N&password=P&username=U]` (the
 *   database, password and user name in the URL or in its query, each in one place),
 *   `unix:///absolute/path.sock[?db=N&password=P&username=U]`,
 *   `redis-sentinel://[[username]:password@]host[:port][,host[:port]…][/db][?sentinel_username=U&sentinel_password=P]#master_name`
 *   (Sentinels, default port 26379, and the master they watch),
 *   `redis-cluster://[[username]:password@]host[:port][,host[:port]…]` (seed nodes of
 *   a Redis Cluster), `rediss://`, `rediss-sentinel://` and `rediss-cluster://` (the same
 *   over TLS, with `ca=FILE`, `cert=FILE`, `key=FILE` and `sni=NAME` in the query; the
 *   certificate and host name are always verified), and `memory://NAME` for an
 *   in-process store (NAME: one or more ASCII letters, digits, `.`, `_`, `-`).
 * @registry_key: non-empty namespace; the key of lock `name` is `registry_key:name`.
 * @error: return location for a #GError.
 *
 * Creates a registry, connects, authenticates, selects the database and PINGs before
 * returning. Errors: %REDIS_LOCK_ERROR_INVALID for a bad URL or key (the message names
 * the problem; a build without TLS refuses the `rediss` forms, saying so),
 * %REDIS_LOCK_ERROR_CONNECTION when the server cannot be reached within the connect
 * timeout, or answers with something other than the Redis protocol ("not a Redis
 * server"), %REDIS_LOCK_ERROR_REDIS when it refuses the password or database.
 *
 * `memory://NAME` keeps the leases in this process, for unit tests of code that takes
 * locks on machines without Redis. Every registry opened on the same NAME shares one
 * store, so two such registries behave as two processes on one Redis server: same
 * keys and values, TTL expiry (on the monotonic clock), renewal, lease loss, unlock
 * wake-ups, and the same #RedisLockRegistryStats counting (one round trip per request,
 * one per watchdog batch). The store lives while a registry has it open; a child made
 * by fork() starts without any. Opening one never fails for want of a server;
 * redislock-test.h (the testing library, pkg-config `redislock-testing`) has hooks to
 * expire a lease or give it to another owner.
 * See [method@Redislock.LockRegistry.obtain] and [Topologies: Cluster, Sentinel, TLS](topologies.html).
 *
 * Returns: (transfer full) (nullable): a new registry, or %NULL with @error set.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockRegistry *redis_lock_registry_new (const char *url,
                                                              const char *registry_key,
                                                              GError **error);

/**
 * redis_lock_registry_new_async:
 * @url: (nullable): where the locks live, as for redis_lock_registry_new()
 * @registry_key: as for redis_lock_registry_new()
 * @cancellable: (nullable): cancels the call with %G_IO_ERROR_CANCELLED
 * @callback: (scope async) (closure user_data): called when the registry is ready or
 *   could not be made
 * @user_data: (closure): data for @callback
 *
 * redis_lock_registry_new() without blocking the calling thread, for code that runs a
 * #GMainLoop: the connection is set up (connect, authenticate, select, PING, bounded
 * by the connect timeout) on a thread of its own. @callback is called in
 * the thread-default main context of the calling thread (see
 * g_main_context_push_thread_default()); call redis_lock_registry_new_finish() there.
 * That context must be running for the call to complete. A call cancelled while it
 * connects completes with %G_IO_ERROR_CANCELLED once the connection attempt ends, and
 * the registry it made, if any, is closed.
 *
 * Its blocking twin is [ctor@Redislock.LockRegistry.new]; finish with
 * [ctor@Redislock.LockRegistry.new_finish].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_new_async (const char *url,
                                                      const char *registry_key,
                                                      GCancellable *cancellable,
                                                      GAsyncReadyCallback callback,
                                                      gpointer user_data);

/**
 * redis_lock_registry_new_finish:
 * @result: the #GAsyncResult given to the callback of redis_lock_registry_new_async()
 * @error: return location for a #GError
 *
 * Finishes redis_lock_registry_new_async().
 *
 * Returns: (transfer full) (nullable): the new registry, or %NULL with @error set (the
 *   errors of redis_lock_registry_new(), or %G_IO_ERROR_CANCELLED).
 *
 * See [func@Redislock.LockRegistry.new_async] and [ctor@Redislock.LockRegistry.new].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockRegistry *redis_lock_registry_new_finish (GAsyncResult *result,
                                                                     GError **error);

/**
 * redis_lock_registry_new_quorum:
 * @urls: (array zero-terminated=1): N >= 1 URLs of independent masters, each in any
 *   single-master form [ctor@Redislock.LockRegistry.new] accepts (`memory://NAME` for tests;
 *   a `redis-cluster://` URL is %REDIS_LOCK_ERROR_INVALID).
 * @registry_key: non-empty namespace, as for [ctor@Redislock.LockRegistry.new]; give a quorum
 *   registry a key of its own.
 * @error: return location for a #GError.
 *
 * Creates a registry whose leases live on a majority (N/2 + 1) of N independent
 * masters (the Redlock algorithm). Every request goes to all N in parallel; an
 * acquisition succeeds when a majority took the key, each node bounded by a per-node
 * timeout of min(50 ms, TTL/20) (see [method@Redislock.LockRegistry.set_quorum_node_timeout_ms]),
 * and the time spent leaves a validity of
 * TTL − elapsed − (TTL/100 + 2 ms) greater than zero. Otherwise the key is released
 * again on every node and the attempt counts as failed: contention when a majority
 * answered (the wait is bounded by the time until a majority could be free),
 * %REDIS_LOCK_ERROR_CONNECTION when fewer than a majority answered. Renewal and
 * release go to all N; a lease is lost when so many nodes report it gone that no
 * majority is left, and unconfirmed (lost after its TTL, as with one server) while
 * fewer than a majority confirm it; a node that lost the key (restarted empty) gets it
 * back on renewal while a majority holds it. Waiters are woken by a release
 * notification from any node.
 *
 * A client that takes the same keys on one of the servers alone (a Spring registry,
 * or a registry made by [ctor@Redislock.LockRegistry.new]) does not take part in the quorum.
 * Fencing is not available: [method@Redislock.LockRegistry.set_fencing] with %TRUE is a
 * programming error on a quorum registry.
 *
 * Returns: (transfer full) (nullable): a new registry, or %NULL with @error set:
 * %REDIS_LOCK_ERROR_CONNECTION when fewer than a majority of the nodes can be reached,
 * %REDIS_LOCK_ERROR_INVALID for a bad URL or key (as [ctor@Redislock.LockRegistry.new]).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockRegistry *redis_lock_registry_new_quorum (const char *const *urls,
                                                                     const char *registry_key,
                                                                     GError **error);

/**
 * redis_lock_registry_ref: (skip)
 * @registry: a registry
 *
 * Not introspected: bindings hold references through the boxed type
 * %REDIS_LOCK_TYPE_REGISTRY. See [method@Redislock.LockRegistry.unref].
 *
 * Returns: (transfer full): @registry, with one more reference.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockRegistry *redis_lock_registry_ref (RedisLockRegistry *registry);

/**
 * redis_lock_registry_unref: (skip)
 * @registry: (transfer full) (nullable): a registry
 *
 * Drops a reference. The last one closes the registry (see [method@Redislock.LockRegistry.close])
 * and frees it. Every #RedisLock obtained from the registry keeps a reference to it
 * while the lock is referenced. Not introspected, as [method@Redislock.LockRegistry.ref].
 *
 * Thread safety: any thread may drop its own reference; no thread may use the
 * registry after the last one is dropped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_unref (RedisLockRegistry *registry);

/**
 * redis_lock_registry_close:
 * @registry: a registry
 *
 * Stops the registry's background threads, wakes every waiter with
 * %REDIS_LOCK_ERROR_CLOSED and releases, best effort, every lease still held (their keys
 * are gone from Redis afterwards when the server is reachable). Holders are told as for
 * a lost lease: [method@Redislock.Lock.is_lease_lost] is %TRUE for them and their
 * [method@Redislock.Lock.get_lease_cancellable] is cancelled (the lease-lost callback is not
 * called: the registry is closing). Later calls on the registry or its locks fail with
 * %REDIS_LOCK_ERROR_CLOSED, including [method@Redislock.Lock.unlock] by a thread that still held a
 * lock (its local hold is dropped). Idempotent.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_close (RedisLockRegistry *registry);

/**
 * redis_lock_registry_set_expire_after_ms:
 * @registry: a registry
 * @ms: lease TTL in milliseconds, > 0 (default 60000)
 *
 * Sets the TTL of leases acquired afterwards without an explicit TTL.
 * See [method@Redislock.LockRegistry.get_expire_after_ms].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_expire_after_ms (RedisLockRegistry *registry,
                                                                gint64 ms);

/**
 * redis_lock_registry_get_expire_after_ms:
 * @registry: a registry
 *
 * Gets the TTL given to leases acquired without an explicit one.
 * See [method@Redislock.LockRegistry.set_expire_after_ms].
 *
 * Returns: the registry's lease TTL in milliseconds.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gint64 redis_lock_registry_get_expire_after_ms (RedisLockRegistry *registry);

/**
 * redis_lock_registry_set_wait_mode:
 * @registry: a registry
 * @mode: how waiters wait (default %REDIS_LOCK_WAIT_PUBSUB)
 *
 * Sets how a thread waits for a lock held elsewhere: woken by the unlock notification,
 * or retrying at intervals (see #RedisLockWaitMode).
 * See [method@Redislock.LockRegistry.set_idle_between_tries_ms].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_wait_mode (RedisLockRegistry *registry,
                                                          RedisLockWaitMode mode);

/**
 * redis_lock_registry_set_idle_between_tries_ms:
 * @registry: a registry
 * @ms: sleep between attempts in SPIN mode (and in PUBSUB mode while the subscription
 *   is down, or when the holder's key has no expiry), >= 0 (default 100)
 *
 * Sets how long a waiter sleeps between two attempts when it is not woken by a
 * notification. See [method@Redislock.LockRegistry.set_wait_mode].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_idle_between_tries_ms (RedisLockRegistry *registry,
                                                                      gint64 ms);

/**
 * redis_lock_registry_set_watchdog:
 * @registry: a registry
 * @enabled: whether held leases are renewed automatically (default %TRUE)
 *
 * With the watchdog on, one thread per registry renews every held lease in one
 * pipelined batch per tick, at a third of the shortest held TTL, and reports leases it
 * finds lost (see [method@Redislock.LockRegistry.set_lease_lost_callback]). With it off, a lease
 * simply expires after its TTL and the holder learns it from [method@Redislock.Lock.unlock].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_watchdog (RedisLockRegistry *registry,
                                                         gboolean enabled);

/**
 * redis_lock_registry_set_deadlock_detection:
 * @registry: a registry
 * @enabled: whether waits of this registry are recorded and checked for cycles
 *   (default %TRUE)
 *
 * With detection on, a thread that has waited for a lock of @registry for a few hundred
 * milliseconds records what it waits for and what it holds in the store, next to the
 * records of every other registry on the same registry key (other processes
 * included), renews that record while it waits and deletes it when the wait ends. It
 * then looks for a cycle of waits through itself twice a second: when it is the
 * waiter of such a cycle whose wait began last, and a second reading confirms the
 * cycle, its call fails with %REDIS_LOCK_ERROR_DEADLOCK, the message naming the locks
 * and holders of the cycle; the other waiters of the cycle go on. A wait shorter
 * than the first check costs nothing. The checks and the deletion never outlast the
 * caller's wait: a check that would ends without a verdict, and a record the store
 * could not delete in time (a frozen server, say) expires by itself within 3 seconds,
 * as a dead process's does. With detection off, waits are neither recorded
 * nor checked, so a cycle through a waiter of @registry is not found. It applies to
 * blocking acquisitions ([method@Redislock.Lock.lock], [method@Redislock.Lock.try_lock_for],
 * [method@Redislock.Lock.try_lock_full], redis_lock_try_lock_all(), and a read-write lock's
 * [method@Redislock.RWLock.try_read_lock_for] and
 * [method@Redislock.RWLock.try_write_lock_for], whose wait is for the writer or for every
 * reader) that start afterwards; the asynchronous calls block no thread and do not record
 * their waits.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_deadlock_detection (RedisLockRegistry *registry,
                                                                   gboolean enabled);

/**
 * redis_lock_registry_set_max_local_handoffs:
 * @registry: a registry
 * @max: most hand-offs in a row, 0 disables them (default 16); values above 65535
 *   count as 65535
 *
 * Lease retention for same-process contention. When the outermost holder unlocks
 * while other threads of this registry wait for the same lock, the local mutex goes
 * straight to the next of them and the Redis lease is kept: no release, no
 * re-acquisition, no round trip. After @max hand-offs in a row the streak ends with a
 * release, so waiters in other processes get their turn: the release publishes the
 * unlock notification, and when some client other than this registry receives it,
 * the key is deleted and the next local attempt waits a few round trips so that
 * client can take it. When no other client listens, nobody can be told the lock is
 * free, so the lease is kept instead (one command, TTL reset) for one more streak;
 * the streak after that always releases, which leaves the key free for a moment for
 * waiters that poll (%REDIS_LOCK_WAIT_SPIN, or other clients of the wire format).
 * On a Redis Cluster, whose PUBLISH counts only the listeners of one node, nobody can
 * tell that no other client listens: there every streak ends with a release.
 * The receiving thread inherits the lease with its TTL (a TTL given to
 * [method@Redislock.Lock.try_lock_full] by the receiver is not applied); with the watchdog off,
 * the TTL is refreshed at each hand-off.
 *
 * The local mutex is not strictly fair: a thread that unlocks and at once locks again
 * may take it back before the woken waiter runs (no context switch), at most a few
 * times in a row while others wait.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_max_local_handoffs (RedisLockRegistry *registry,
                                                                   guint max);

/**
 * redis_lock_registry_set_cache_capacity:
 * @registry: a registry
 * @capacity: most lock objects cached, > 0 (default 100000)
 *
 * When an obtain would exceed the capacity, the least recently used idle locks (no
 * reference, holder or waiter) are dropped, just enough to fit.
 * See [method@Redislock.LockRegistry.expire_unused_older_than].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_cache_capacity (RedisLockRegistry *registry,
                                                               guint capacity);

/**
 * redis_lock_registry_set_connect_timeout_ms:
 * @registry: a registry
 * @ms: bound on establishing a new connection, > 0 (default 3000)
 *
 * Sets how long connecting to a node (and the TLS handshake) may take before it fails
 * with %REDIS_LOCK_ERROR_CONNECTION. See [method@Redislock.LockRegistry.set_command_timeout_ms].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_connect_timeout_ms (RedisLockRegistry *registry,
                                                                   gint64 ms);

/**
 * redis_lock_registry_set_command_timeout_ms:
 * @registry: a registry
 * @ms: bound on one Redis command (send and reply), > 0 (default 3000). A command that
 *   takes longer fails with %REDIS_LOCK_ERROR_CONNECTION and its connection is dropped.
 *
 * Sets how long one command may wait for its reply.
 * See [method@Redislock.LockRegistry.set_connect_timeout_ms].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_command_timeout_ms (RedisLockRegistry *registry,
                                                                   gint64 ms);

/**
 * redis_lock_registry_set_quorum_node_timeout_ms:
 * @registry: a registry
 * @ms: the per-node timeout of a quorum registry, >= 0; 0 (the default) means
 *   min(50 ms, TTL/20) of each acquisition's TTL (50 ms for a release)
 *
 * On a registry made by [ctor@Redislock.LockRegistry.new_quorum]: how long an acquisition
 * waits for each node (a node slower than that counts as not having taken the key),
 * and how long a renewal or release waits for the nodes beyond a majority. Keep it
 * well below the TTL: the time an acquisition takes is subtracted from its validity.
 * No effect on other registries.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_quorum_node_timeout_ms (RedisLockRegistry *registry,
                                                                       gint64 ms);

/**
 * redis_lock_registry_set_min_replicas:
 * @registry: a registry
 * @n: replicas that must acknowledge each write of a lease; 0 turns the check off
 *   (the default)
 * @timeout_ms: how long to wait for them, > 0 when @n > 0
 *
 * Replica acknowledgement. With @n > 0, an acquisition, a kept streak and a renewal
 * count only once at least @n replicas of the master acknowledged the write: `WAIT n
 * timeout_ms` runs on the same connection right after it. An acquisition that too few
 * replicas acknowledge within @timeout_ms is released again and fails with
 * %REDIS_LOCK_ERROR_NOT_REPLICATED ([method@Redislock.Lock.lock] and
 * [method@Redislock.Lock.try_lock_for] do not retry it, as for any other failure); a kept streak
 * that too few acknowledge releases the lease instead of keeping it; a renewal that too few
 * acknowledge counts as unconfirmed, so the lease is lost once it stays unconfirmed past its TTL
 * minus the drift margin, as when the server cannot be reached.
 *
 * It narrows, and does not close, the window in which a failover loses a lease:
 * `WAIT` makes Redis wait for the copies, not agree on them, and a replica that
 * acknowledged may still lose the election to one that did not. On a Cluster, each
 * key's own master and replicas are asked. The `memory://` store has no replicas:
 * with @n > 0 every acquisition there fails with %REDIS_LOCK_ERROR_NOT_REPLICATED.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_min_replicas (RedisLockRegistry *registry,
                                                             guint n,
                                                             gint64 timeout_ms);

/**
 * redis_lock_registry_set_key_tracking:
 * @registry: a registry
 * @enabled: whether waiters also hear of lock keys changed without an unlock
 *   notification (default %TRUE; see %REDIS_LOCK_WAIT_PUBSUB of [enum@Redislock.LockWaitMode])
 *
 * Wake-ups without a notification. Waiters in %REDIS_LOCK_WAIT_PUBSUB mode are woken
 * by the unlock notification that every release of this library (and of Spring's
 * registry in its pub-sub mode) publishes. A key deleted by a client that does not
 * publish (Spring's registry in spin mode, an operator's `DEL`), overwritten, or
 * whose TTL is cut short would leave them waiting until the end of the TTL they read.
 * With @enabled (the default), Redis tells the registry's subscriber connection of the next change
 * of each key a waiter read (client-side-caching tracking, Redis 6 or later, no
 * server configuration): the connection that sends a waiter's attempt has `CLIENT
 * TRACKING on REDIRECT <subscriber> OPTIN NOLOOP` on and sends `CLIENT CACHING yes`
 * with the attempt's script when the key is held, so only keys waited for are
 * tracked, and such a change wakes their waiters within a round trip.
 *
 * The cost is one small command with each failed attempt and one small message per
 * change of a key someone waits for (a release then reaches the waiting process twice,
 * as its notification and as the change, and wakes it once); keys nobody waits for
 * cost nothing (see docs/performance.md for what it measured). With @enabled %FALSE a
 * waiter behind such a change sleeps until the TTL it read. It works on a single
 * server and a Sentinel
 * master; a Cluster registry ignores it (one subscriber would hear of one master's
 * keys only), and waits for several locks at once (redis_lock_try_lock_all()) and
 * those of a quorum registry are woken by notifications and TTLs only. A user that
 * may not run `CLIENT` or subscribe to `__redis__:invalidate` gets one warning and
 * waits as with it off. Changing it while notifications run sets the subscription up
 * again. A waiter in the wait queue ([method@Redislock.LockRegistry.set_wait_queue])
 * tracks no key: the release grants it the lock, and the attempt that keeps its place
 * in line, at least every second, finds a key deleted meanwhile.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_key_tracking (RedisLockRegistry *registry,
                                                             gboolean enabled);

/**
 * redis_lock_registry_get_key_tracking:
 * @registry: a registry
 *
 * Gets the key tracking setting.
 *
 * Returns: whether key tracking is on (see [method@Redislock.LockRegistry.set_key_tracking]).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_get_key_tracking (RedisLockRegistry *registry);

/**
 * redis_lock_registry_set_legacy_spring_channel:
 * @registry: a registry
 * @enabled: whether releases also publish on `registry_key-channel` (default %FALSE)
 *
 * Wait compatibility with older Spring releases. Spring Integration's registry before
 * its 2025 per-key channels publishes every release on one channel,
 * `registry_key-channel` (message: the lock's full key `registry_key:name`), and its
 * waiters in pub/sub mode listen there only. A registry's subscriber always listens
 * there too (so a release by such a Spring process wakes that lock's waiters at once;
 * a message naming no key of this registry wakes all of them), whatever this setting.
 * With @enabled, each release (and [method@Redislock.LockRegistry.force_unlock]) also publishes
 * the key on `registry_key-channel`, in the same atomic step as the per-key channel,
 * so that an older Spring waiter is woken too. It costs one more message per release
 * to every registry subscribed to this registry key. Takes effect with the next
 * release. A Redis user needs permission on that channel as well (ACL
 * `&registry_key-channel*` covers both); one that lacks it still releases, and its
 * subscriber goes without the older channel. No effect on a `memory://` registry.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_legacy_spring_channel (RedisLockRegistry *registry,
                                                                      gboolean enabled);

/**
 * redis_lock_registry_set_wait_queue:
 * @registry: a registry
 * @enabled: whether processes wait in line for a lock (default %FALSE)
 *
 * The wait queue. With @enabled, a process whose thread must wait for a
 * lock held elsewhere takes one place per process and lock in a queue kept in Redis
 * beside the lock's key (`queue:{KEY}`, in the key's hash slot), and a release grants
 * the lock to the head of that queue in the same atomic step (the key written with the
 * head's value and TTL, its next fencing token when fencing is on) and tells that
 * registry alone, which then holds the lock without a command of its own: a hand-off
 * costs the same however many processes wait, and processes are served in their order
 * of arrival. A release with nobody in line publishes its notification as before (what
 * Spring Integration's waiters listen to). A waiter keeps its place alive with its
 * attempts, at least once a second; the place of a waiter that crashed is gone within
 * 3 s. Waiters in line do not use key tracking
 * (redis_lock_registry_set_key_tracking()): a key deleted without a notification, or
 * expired, is found by their next attempt, within a second. See docs/queue.md.
 * With @enabled %FALSE, every waiting process is woken by each release and tries
 * again (the behaviour before the queue): for deployments where Spring Integration
 * processes wait under heavy contention too, since a Spring waiter is woken only by a
 * release that found nobody of ours in line. Only plain locks taken by the blocking
 * calls wait in line; the `_async` calls, sets of locks, read-write locks and
 * semaphores keep being woken by notifications, and so do the waiters of a registry whose
 * store keeps no queue (a quorum registry, a Cluster one, one whose writes need replicas'
 * acknowledgement: redis_lock_registry_set_min_replicas()). Off by default: a waiter in
 * line finds a key deleted without a notification within a second, not within
 * milliseconds as key tracking does. Takes effect with the next attempt and the next
 * release.
 *
 * See [method@Redislock.LockRegistry.list_queue] for the line as it stands and
 * [struct@Redislock.LockRegistryStats] for the grants counted.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_wait_queue (RedisLockRegistry *registry,
                                                                     gboolean enabled);

/**
 * redis_lock_registry_get_wait_queue:
 * @registry: a registry
 *
 * Whether the processes of @registry wait in line for a lock, as set by
 * [method@Redislock.LockRegistry.set_wait_queue].
 *
 * Returns: whether processes wait in line for a lock
 *   (redis_lock_registry_set_wait_queue())
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_get_wait_queue (RedisLockRegistry *registry);

/**
 * redis_lock_registry_set_classic_notifications:
 * @registry: a registry
 * @enabled: whether releases on a Redis Cluster are also published classically
 *   (default %TRUE)
 *
 * Classic notifications on a Redis Cluster. There each release (and
 * [method@Redislock.LockRegistry.force_unlock]) is published with `SPUBLISH` on the key's shard
 * channel, which only the nodes of the shard owning the key's slot receive, and a
 * waiter subscribes with `SSUBSCRIBE` to the channel of the key it waits for, on the
 * key's master (the subscription follows slot migrations and failovers). With
 * @enabled (the default), the release is also published with a classic `PUBLISH` on
 * `registry_key-channel:key`, which the cluster forwards to every node: that is what
 * Spring Integration's registry subscribes to (with `PSUBSCRIBE`, on any node), so
 * Spring waiters keep being woken by releases of this library. Waiters of this
 * library always listen classically too, so releases by Spring processes (classic
 * only) wake them whatever this setting. Turn it off when no Spring process waits
 * for locks of the registry key (registries of this library hear the shard channel
 * either way): a release then costs the cluster one bus message per replica of the
 * key's shard instead of one per other node. It applies to every release of the
 * registry: redis_lock_unlock_all(), read-write locks' and semaphores' releases too.
 * Takes effect with the next release. No
 * effect outside a Cluster, nor on a `memory://` or quorum registry. Requires Redis 7
 * (`SPUBLISH`); on an older cluster keep it on (the shard publish fails silently
 * there, and a refused `SSUBSCRIBE` is reported once). A wait for several locks at
 * once (redis_lock_try_lock_all()) subscribes to the shard channel of each of them.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_classic_notifications (RedisLockRegistry *registry,
                                                                      gboolean enabled);

/**
 * redis_lock_registry_get_classic_notifications:
 * @registry: a registry
 *
 * Gets the classic notifications setting.
 *
 * Returns: whether releases on a Cluster are also published classically (see
 *   [method@Redislock.LockRegistry.set_classic_notifications]).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_get_classic_notifications (RedisLockRegistry *registry);

/**
 * redis_lock_registry_set_fencing:
 * @registry: a registry
 * @enabled: whether acquisitions take a fencing token (default %FALSE)
 *
 * Fencing tokens. With fencing on, every acquisition of a lease in the store moves a
 * counter kept per lock name on to max (counter + 1, the server's clock in
 * microseconds, its `TIME`) in the same atomic step, and the holder gets the new value
 * from [method@Redislock.Lock.get_fencing_token]. The tokens of one name strictly increase, by at
 * least one per acquisition, across every process and registry that takes the lock
 * with fencing on, also after a lease expired or was lost, so a resource that
 * remembers the highest token it has accepted can refuse a holder whose lease ran out
 * while it was paused. Re-entry, local hand-offs and kept streaks keep the token of
 * the lease they share; the fast path stays one round trip.
 *
 * Because a token is at least the server's clock, tokens go on rising when the counter
 * itself is lost: a restart without persistence, a Sentinel or Cluster failover to a
 * replica the last increments had not reached. That holds as long as the clocks of the
 * servers involved (the old master and the new one) agree to within the time between
 * the last token handed out and the fault; a master whose clock is behind by more than
 * that, or was set back by more, can hand out a lower token once the counter is lost.
 * The `memory://` store uses this process's wall clock (g_get_real_time()).
 *
 * The counter key is `fence:{KEY}` for the lock key KEY (`registry_key:name`), or
 * `fence:KEY` when KEY has a hash tag of its own (its first `{`, the first `}` after
 * it, something between), so it lives in the lock key's Cluster slot; it has no expiry
 * and the library never deletes it. A name whose key has a `}` but no hash tag cannot
 * have its counter in its slot: while fencing is on, the lock calls fail for it with
 * %REDIS_LOCK_ERROR_INVALID, on every store (a single server and `memory://` too, so
 * that code does not change meaning when moved to a Cluster).
 *
 * Only holders with fencing on bump the counter (a Spring registry does not), and a
 * token protects a resource only if the resource checks it. With fencing off, the
 * library sends exactly what it sends without this feature (no counter key). Applies
 * to acquisitions that start afterwards: a lease held or handed over when it changes
 * keeps the token it was taken with (0 when none).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_fencing (RedisLockRegistry *registry,
                                                        gboolean enabled);

/**
 * redis_lock_registry_get_fencing:
 * @registry: a registry
 *
 * Gets the fencing setting.
 *
 * Returns: whether acquisitions take a fencing token (see
 *   [method@Redislock.LockRegistry.set_fencing]).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_get_fencing (RedisLockRegistry *registry);

/**
 * redis_lock_registry_get_last_fencing_token:
 * @registry: a registry
 * @name: a lock name
 * @token: (out): the last token handed out for @name; 0 when there is none
 * @error: return location for a #GError
 *
 * Reads the fencing counter of @name from the store (one round trip on Redis): the
 * token of the latest acquisition with fencing by any process or registry, whether
 * or not it still holds the lock (microseconds of the server's clock, or higher; see
 * [method@Redislock.LockRegistry.set_fencing]). For operators and tools (`redislock status`).
 *
 * Returns: %TRUE when the counter exists; %FALSE without an error when no fenced
 *   acquisition of @name ever happened; %FALSE with @error on failure
 *   (%REDIS_LOCK_ERROR_INVALID for a bad name, or one that cannot be fenced).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_get_last_fencing_token (RedisLockRegistry *registry,
                                                                       const char *name,
                                                                       guint64 *token,
                                                                       GError **error);

/**
 * redis_lock_registry_set_lease_lost_callback:
 * @registry: a registry
 * @func: (nullable) (scope notified) (closure user_data) (destroy destroy): called
 *   once per lost lease, from the watchdog thread, see #RedisLockLeaseLostFunc
 * @user_data: (nullable): passed to @func
 * @destroy: (nullable): called on @user_data when the callback is replaced and when
 *   the registry is freed
 *
 * Installs the function told when a held lease is found lost: the key vanished or
 * belongs to another owner at renewal, or no renewal could be confirmed for longer
 * than the TTL minus a drift margin (Redis unreachable). The holder's
 * [method@Redislock.Lock.get_lease_cancellable] is cancelled before @func is called. A call in
 * flight when the callback is replaced finishes with the old function, and the old
 * @destroy runs after it returns.
 *
 * Thread safety: the callback runs on the registry's watchdog thread, not on the
 * thread that set it.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_set_lease_lost_callback (RedisLockRegistry *registry,
                                                                    RedisLockLeaseLostFunc func,
                                                                    gpointer user_data,
                                                                    GDestroyNotify destroy);

/**
 * redis_lock_registry_get_client_id:
 * @registry: a registry
 *
 * The prefix of the value stored in the keys this registry holds: `hostname:pid:`
 * followed by 32 random hex digits, unique per registry instance (the host name is cut
 * at 64 bytes). A held key stores the client id, `:`, and a number unique to the
 * acquisition (see [method@Redislock.Lock.dup_lease_value]), so that a release or renewal that
 * reaches Redis late can never act on a later hold of the same registry.
 *
 * Returns: (transfer none): the client id, valid while @registry is referenced.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_registry_get_client_id (RedisLockRegistry *registry);

/**
 * redis_lock_registry_get_registry_key:
 * @registry: a registry
 *
 * Gets the namespace of the registry's keys: the key of lock `name` is
 * `registry_key:name`.
 *
 * Returns: (transfer none): the registry key given to [ctor@Redislock.LockRegistry.new].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_registry_get_registry_key (RedisLockRegistry *registry);

/**
 * redis_lock_registry_get_cache_size:
 * @registry: a registry
 *
 * Gets the number of lock objects the registry's cache holds (see
 * [method@Redislock.LockRegistry.set_cache_capacity]).
 *
 * Returns: how many lock objects are cached now.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_lock_registry_get_cache_size (RedisLockRegistry *registry);

/**
 * redis_lock_registry_expire_unused_older_than:
 * @registry: a registry
 * @age_ms: minimum age of the last use; negative: any age
 *
 * Drops cached locks that nobody references, holds or waits on and whose last use
 * (obtain, acquisition or release) is at least @age_ms ago.
 * See [method@Redislock.LockRegistry.set_cache_capacity].
 *
 * Returns: how many locks were dropped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_lock_registry_expire_unused_older_than (RedisLockRegistry *registry,
                                                                      gint64 age_ms);

/**
 * redis_lock_registry_renew:
 * @registry: a registry
 * @name: the lock name
 * @ttl_ms: new TTL in milliseconds; 0: the registry TTL
 * @error: return location for a #GError
 *
 * Extends the lease of @name to @ttl_ms, only if this registry holds it in Redis. Any
 * thread of the registry may call it. Errors: %REDIS_LOCK_ERROR_NOT_OWNER when no thread
 * of this registry holds @name; %REDIS_LOCK_ERROR_LEASE_LOST when a thread holds it
 * locally but the lease is gone (the lease is then marked lost);
 * %REDIS_LOCK_ERROR_CONNECTION / %REDIS_LOCK_ERROR_REDIS for Redis failures.
 * A successful renew makes @ttl_ms the TTL the watchdog keeps renewing with.
 * See [method@Redislock.Lock.is_lease_lost].
 *
 * Returns: %TRUE when the lease was extended.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_renew (RedisLockRegistry *registry,
                                                      const char *name,
                                                      gint64 ttl_ms,
                                                      GError **error);

/**
 * redis_lock_registry_force_unlock:
 * @registry: a registry
 * @name: the lock's name
 * @error: return location for a #GError
 *
 * Deletes the key of lock @name whoever holds it (a crashed process with a long TTL,
 * say) and publishes the unlock notification in the same atomic step, so that
 * waiters in every process wake at once. @name may also name a lease of the lock
 * family: a read-write lock's writer lease `{x}:rw:w` or a reader lease
 * `{x}:rw:r:CLIENT_ID`, a semaphore's permit `{s}:sem:I`.
 *
 * A holder in a registry of this library learns within about a second that its lease
 * is lost (its registry hears the release on its forced-release channel and reads the
 * lease back at once): is_lease_lost() turns TRUE, its lease cancellable is
 * cancelled, the lease-lost callback runs, and its unlock fails with
 * %REDIS_LOCK_ERROR_LEASE_LOST. Once its registry has heard of it, the lease is not
 * handed to another thread of that registry as if it were good: the unlock confirms
 * it first (one round trip), reports %REDIS_LOCK_ERROR_LEASE_LOST, and the waiting
 * thread acquires afresh. Meant for operators and recovery code: the holder's work is
 * not stopped, only told. On a quorum registry the key is deleted on every node that
 * answers. `redislock break NAME` calls it.
 *
 * Only leases are deleted. A key that is not a string, and the family's keys that are
 * no leases (a read-write lock's readers set `{x}:rw:readers` and waiting writer's
 * mark `{x}:rw:ww`, a semaphore's size `{s}:sem` and size record `{s}:sem:size`),
 * are %REDIS_LOCK_ERROR_INVALID, naming what the key is, and stay: deleting a readers
 * set would let a writer in beside live readers. A name of that shape is forced only
 * when its key holds a lease of this library (a plain lock so named).
 * See [Restarts and failovers](faults.html).
 *
 * Returns: %TRUE when a key was deleted; %FALSE without @error when the lock was free;
 *   %FALSE with @error (%REDIS_LOCK_ERROR_INVALID for a bad name or a key that is no
 *   lease, %REDIS_LOCK_ERROR_CONNECTION, %REDIS_LOCK_ERROR_REDIS,
 *   %REDIS_LOCK_ERROR_CLOSED, %REDIS_LOCK_ERROR_FORKED) on failure.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_force_unlock (RedisLockRegistry *registry,
                                                             const char *name,
                                                             GError **error);

/**
 * redis_lock_registry_force_unlock_full:
 * @registry: a registry
 * @name: the lock's name, as for redis_lock_registry_force_unlock()
 * @cancellable: (nullable): ends the caller's wait with %G_IO_ERROR_CANCELLED
 * @error: return location for a #GError
 *
 * redis_lock_registry_force_unlock() with a #GCancellable, for a caller that must not
 * wait for a server that does not answer (an operator's tool, a recovery path with a
 * deadline of its own). With @cancellable, the forced unlock runs on a thread of its
 * own while the caller waits; cancelling @cancellable ends that wait at once
 * with %G_IO_ERROR_CANCELLED. The request may have been sent already: the key may
 * still be deleted (and the notification published) when the server answers, so a
 * cancelled call leaves the lock's state unknown, as a connection error does. With
 * %NULL @cancellable it is redis_lock_registry_force_unlock().
 *
 * Returns: as redis_lock_registry_force_unlock(), and %FALSE with
 *   %G_IO_ERROR_CANCELLED when @cancellable was cancelled.
 *
 * Its twin without a cancellable is [method@Redislock.LockRegistry.force_unlock].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_registry_force_unlock_full (RedisLockRegistry *registry,
                                                                  const char *name,
                                                                  GCancellable *cancellable,
                                                                  GError **error);

/**
 * redis_lock_registry_obtain:
 * @registry: a registry
 * @name: lock name, 1..%REDIS_LOCK_NAME_MAX bytes, any bytes but NUL
 * @error: return location for a #GError
 *
 * Returns the lock object for @name. While any reference, holder or waiter of it
 * exists, every obtain of the same name on this registry returns the same pointer.
 * Errors: %REDIS_LOCK_ERROR_INVALID for a bad name, %REDIS_LOCK_ERROR_CACHE_FULL when the
 * cache is at capacity and no cached lock can be dropped, %REDIS_LOCK_ERROR_CLOSED,
 * %REDIS_LOCK_ERROR_FORKED. Never contacts Redis.
 *
 * Returns: (transfer full) (nullable): a new reference to the lock; release it with
 *   [method@Redislock.Lock.unref].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLock *redis_lock_registry_obtain (RedisLockRegistry *registry,
                                                         const char *name,
                                                         GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockRegistry, redis_lock_registry_unref)

G_END_DECLS

#endif /* REDIS_LOCK_REGISTRY_H */
