/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-inspect.h: what a registry holds and who waits, seen from outside: the
 * registry's counters (RedisLockRegistryStats), a lease as the store has it
 * (RedisLockLeaseInfo, one or every lease of a registry key), the waiters every
 * process has recorded (RedisLockWaiterInfo), and a lock's wait queue
 * (RedisLockQueueInfo). These are the calls behind the
 * `redislock status`, `list` and `watch` commands; they read, and change nothing.
 * Thread-safe, as everything of a registry.
 */
#ifndef REDIS_LOCK_INSPECT_H
#define REDIS_LOCK_INSPECT_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

#include <glib-object.h>
#include <redislock/redislock-macros.h>
#include <redislock/redislock-version.h>
#include <redislock/redislock-registry.h>

G_BEGIN_DECLS

/**
 * RedisLockRegistryStats:
 * @round_trips: request/reply exchanges with Redis on data connections; a pipelined
 *   batch counts once
 * @commands: commands sent on data connections (a batch of N counts N)
 * @acquisitions: outermost acquisitions that took a Redis lease
 * @contended_attempts: acquisition attempts that found the key held by another owner
 * @releases: outermost unlocks that sent a release to Redis
 * @renewals: leases renewed (by the watchdog or [method@Redislock.LockRegistry.renew])
 * @leases_lost: leases found lost
 * @notifications: unlock notifications received by the subscriber
 * @watchdog_ticks: watchdog ticks that renewed at least one lease
 * @last_tick_leases: leases renewed by the last such tick
 * @last_tick_round_trips: round trips the last tick took
 * @last_tick_us: wall time of the last tick, in microseconds
 * @local_handoffs: outermost unlocks that handed the lease to a waiting thread of
 *   this registry instead of releasing it (see
 *   [method@Redislock.LockRegistry.set_max_local_handoffs])
 * @yields: acquisitions that first let other clients take the lock: after a streak
 *   of local hand-offs, or after four holds of the lease in a row since this
 *   registry last had to wait for the lock, when the release that ended it reached a
 *   client other than this registry, the next acquisition waits twice that release's
 *   round trip (at least 50 µs, at most 5 ms; twice as long after a yield nobody
 *   used, up to three in a row) before its first attempt
 * @audits: times every held lease was checked at once because the store's
 *   connection broke or came back (a restart, a reset connection) or its deployment
 *   failed over (a Sentinel switch, a Cluster slot that changed owner)
 * @doubtful_releases: releases that may not have been the lease's last word: made on
 *   a Sentinel master that was found replaced shortly after (see
 *   [method@Redislock.LockRegistry.set_min_replicas]); each is also logged
 * @subscriber_connections: connections of the registry's subscriber that came up: the
 *   first once the registry holds a lease or waits, then one after each break (a
 *   server restart, a reset connection, a failover)
 * @grants_received: acquisitions whose lease a release of another client granted to
 *   this registry from its place in the lock's wait queue (no SET of its own; see
 *   redis_lock_registry_set_wait_queue())
 * @grants_given: releases of this registry that granted the lock to the head of its
 *   wait queue instead of notifying every waiter
 * @reserved: room for counters added later without changing the size of the struct;
 *   zero
 *
 * Counters of what a registry sent and saw since it was created, for tests,
 * benchmarks and monitoring. Each counter is read atomically; the set is not a
 * consistent snapshot.
 *
 * Since: 0.1
 */
typedef struct
{
  guint64 round_trips;
  guint64 commands;
  guint64 acquisitions;
  guint64 contended_attempts;
  guint64 releases;
  guint64 renewals;
  guint64 leases_lost;
  guint64 notifications;
  guint64 watchdog_ticks;
  guint64 last_tick_leases;
  guint64 last_tick_round_trips;
  gint64 last_tick_us;
  guint64 local_handoffs;
  guint64 yields;
  guint64 audits;
  guint64 doubtful_releases;
  guint64 subscriber_connections;
  guint64 grants_received;
  guint64 grants_given;
  /*< private >*/
  guint64 reserved[10];
} RedisLockRegistryStats;

/**
 * REDIS_LOCK_TYPE_REGISTRY_STATS:
 *
 * The #GType of #RedisLockRegistryStats: a boxed type copied by value and freed with
 * g_free().
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_REGISTRY_STATS (redis_lock_registry_stats_get_type ())

/**
 * redis_lock_registry_stats_get_type:
 *
 * The #GType of #RedisLockRegistryStats, a boxed type.
 *
 * Returns: the #GType of #RedisLockRegistryStats, %REDIS_LOCK_TYPE_REGISTRY_STATS.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_registry_stats_get_type (void) G_GNUC_CONST;

/**
 * RedisLockLeaseInfo:
 * @name: the lock name (the key less `registry_key:`)
 * @owner: the value the key holds: a redislock holder's is its registry's client id,
 *   `:` and the number of the acquisition; a Spring holder's is its client id
 * @pttl_ms: the lease's remaining TTL in milliseconds; -1 when the key has no expiry
 *
 * A lease as the store holds it, whoever its holder, seen by
 * [method@Redislock.LockRegistry.get_lease_info] and [method@Redislock.LockRegistry.list_leases].
 *
 * Since: 0.1
 */
typedef struct
{
  char *name;
  char *owner;
  gint64 pttl_ms;
} RedisLockLeaseInfo;

/**
 * REDIS_LOCK_TYPE_LEASE_INFO:
 *
 * The #GType of #RedisLockLeaseInfo: a boxed type copied with its strings and freed
 * with [method@Redislock.LockLeaseInfo.free].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_LEASE_INFO (redis_lock_lease_info_get_type ())

/**
 * redis_lock_lease_info_get_type:
 *
 * The #GType of #RedisLockLeaseInfo, a boxed type.
 *
 * Returns: the #GType of #RedisLockLeaseInfo, %REDIS_LOCK_TYPE_LEASE_INFO.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_lease_info_get_type (void) G_GNUC_CONST;

/**
 * redis_lock_lease_info_free:
 * @info: (transfer full) (nullable): a lease info
 *
 * Frees @info and its strings. See [method@Redislock.LockRegistry.get_lease_info].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_lease_info_free (RedisLockLeaseInfo *info);

/**
 * redis_lock_registry_get_lease_info:
 * @registry: a registry
 * @name: a lock name
 * @error: return location for a #GError
 *
 * Reads the lease of @name from the store (one round trip on Redis), whoever holds
 * it: another process, another registry, or this one. For operators and tools; a
 * program that wants the lock takes it instead, as the answer can be out of date as
 * soon as it is returned.
 *
 * Returns: (transfer full) (nullable): the lease, free with
 *   [method@Redislock.LockLeaseInfo.free]; %NULL without an error when the lock is free;
 *   %NULL with @error on failure (%REDIS_LOCK_ERROR_INVALID for a bad name).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockLeaseInfo *redis_lock_registry_get_lease_info (RedisLockRegistry *registry,
                                                                         const char *name,
                                                                         GError **error);

/**
 * redis_lock_registry_list_leases:
 * @registry: a registry
 * @error: return location for a #GError
 *
 * Every lease held under the registry key, by any holder (on Redis: `SCAN` for
 * `registry_key:*`, then `GET` and `PTTL` of each key, so it does not block the server
 * however many keys it has). Leases taken or released while it runs may or may not be
 * listed. Keys of a registry key that extends this one (`orders:eu` for `orders`) are
 * listed too, with the rest of their key as the name: the key layout cannot tell them
 * apart. A key under the registry key that is not a string (no lease) is passed over;
 * [method@Redislock.LockRegistry.get_lease_info] of it fails with %REDIS_LOCK_ERROR_REDIS.
 *
 * Returns: (transfer container) (element-type RedisLockLeaseInfo) (nullable): the
 *   leases in no particular order, an array that frees its elements (so the caller
 *   owns the array only, and frees it with g_ptr_array_unref()); %NULL with @error on
 *   failure.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GPtrArray *redis_lock_registry_list_leases (RedisLockRegistry *registry,
                                                             GError **error);

/**
 * RedisLockWaiterInfo:
 * @name: the name of the lock it waits for (the key less `registry_key:`)
 * @waiter: the wait's id: its registry's client id, `:` and a number of the wait
 * @host: the host name of the waiting process
 * @pid: the process id of the waiting process
 * @since_us: when the wait began, wall-clock microseconds (as g_get_real_time())
 *
 * A thread waiting for a lock, as its waits-for record in the store describes it
 * (see [method@Redislock.LockRegistry.set_deadlock_detection]), seen by
 * [method@Redislock.LockRegistry.list_waiters].
 *
 * Since: 0.1
 */
typedef struct
{
  char *name;
  char *waiter;
  char *host;
  gint64 pid;
  gint64 since_us;
} RedisLockWaiterInfo;

/**
 * REDIS_LOCK_TYPE_WAITER_INFO:
 *
 * The #GType of #RedisLockWaiterInfo: a boxed type copied with its strings and freed
 * with [method@Redislock.LockWaiterInfo.free].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_WAITER_INFO (redis_lock_waiter_info_get_type ())

/**
 * redis_lock_waiter_info_get_type:
 *
 * Returns: the #GType of #RedisLockWaiterInfo, %REDIS_LOCK_TYPE_WAITER_INFO.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_waiter_info_get_type (void) G_GNUC_CONST;

/**
 * redis_lock_waiter_info_free:
 * @info: (transfer full) (nullable): a waiter info
 *
 * Frees @info and its strings. See [method@Redislock.LockRegistry.list_waiters].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_waiter_info_free (RedisLockWaiterInfo *info);

/**
 * redis_lock_registry_list_waiters:
 * @registry: a registry
 * @error: return location for a #GError
 *
 * Every thread of any process that waits for a lock under the registry key and has
 * recorded its wait: a wait is recorded once it has lasted a few hundred
 * milliseconds, by a registry with deadlock detection on (the default; see
 * [method@Redislock.LockRegistry.set_deadlock_detection]), and its record goes when the wait
 * ends. One request (on Redis, one script reading one hash). For operators and tools
 * (`redislock status`, `redislock watch`).
 *
 * Returns: (transfer container) (element-type RedisLockWaiterInfo) (nullable): the
 *   waiters, oldest wait first, in an array that frees its elements (free it with
 *   g_ptr_array_unref()); an empty array on a quorum registry, which keeps no records;
 *   %NULL with @error on failure.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GPtrArray *redis_lock_registry_list_waiters (RedisLockRegistry *registry,
                                                              GError **error);

/**
 * RedisLockQueueInfo:
 * @name: the name of the lock whose line it is in
 * @client_id: the client id of the registry in line (`host:pid:hex`)
 * @host: the host name of that registry's process
 * @pid: the process id of that registry's process
 * @position: its place in line, from 1 (the next to be granted the lock)
 * @since_us: when it took its place, wall-clock microseconds (as g_get_real_time()):
 *   on Redis the server's clock, which the queue orders by
 *
 * A process standing in a lock's wait queue (see
 * [method@Redislock.LockRegistry.set_wait_queue]), seen by
 * [method@Redislock.LockRegistry.list_queue].
 *
 * Since: 0.1
 */
typedef struct
{
  char *name;
  char *client_id;
  char *host;
  gint64 pid;
  guint position;
  gint64 since_us;
} RedisLockQueueInfo;

/**
 * REDIS_LOCK_TYPE_QUEUE_INFO:
 *
 * The #GType of #RedisLockQueueInfo: a boxed type copied with its strings and freed
 * with [method@Redislock.LockQueueInfo.free].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_QUEUE_INFO (redis_lock_queue_info_get_type ())

/**
 * redis_lock_queue_info_get_type:
 *
 * Returns: the #GType of #RedisLockQueueInfo, %REDIS_LOCK_TYPE_QUEUE_INFO.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_queue_info_get_type (void) G_GNUC_CONST;

/**
 * redis_lock_queue_info_free:
 * @info: (transfer full) (nullable): a queue info
 *
 * Frees @info and its strings. See [method@Redislock.LockRegistry.list_queue].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_queue_info_free (RedisLockQueueInfo *info);

/**
 * redis_lock_registry_list_queue:
 * @registry: a registry
 * @name: a lock name
 * @error: return location for a #GError
 *
 * The processes standing in the wait queue of the lock @name, first in line first
 * (see [Waiting in line](queue.html)): one place per registry, whatever the number of
 * its threads that wait. A place whose waiter stopped keeping it alive (it crashed) is
 * not listed, though the queue may still hold it until a grant drops it. On Redis two
 * round trips (`ZRANGE` of the queue, `MGET` of its places). For operators and tools
 * (`redislock status`, `list`, `watch`).
 *
 * Returns: (transfer container) (element-type RedisLockQueueInfo) (nullable): the
 *   places in order, in an array that frees its elements (free it with
 *   g_ptr_array_unref()); an empty array on a quorum registry, which keeps no queue,
 *   and for a lock whose key can have none; %NULL with @error on failure
 *   (%REDIS_LOCK_ERROR_INVALID for a bad name).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GPtrArray *redis_lock_registry_list_queue (RedisLockRegistry *registry,
                                                            const char *name,
                                                            GError **error);

/**
 * redis_lock_registry_get_stats:
 * @registry: a registry
 * @stats: (out caller-allocates): filled with the registry's counters
 *
 * Copies the registry's counters (see #RedisLockRegistryStats) into @stats.
 * See [Performance](performance.html).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_registry_get_stats (RedisLockRegistry *registry,
                                                      RedisLockRegistryStats *stats);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockLeaseInfo, redis_lock_lease_info_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockWaiterInfo, redis_lock_waiter_info_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockQueueInfo, redis_lock_queue_info_free)

G_END_DECLS

#endif /* REDIS_LOCK_INSPECT_H */
