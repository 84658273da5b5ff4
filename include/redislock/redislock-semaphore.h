/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-semaphore.h: a counting semaphore whose permits are Redis leases.
 *
 * A semaphore of N permits lets at most N holders in at once across every thread and
 * process sharing the registry key. Each permit taken is a lease of its own, renewed by
 * the registry's watchdog like a lock's, so the permit of a process that crashed comes
 * back when its TTL runs out; a lost permit is reported as a lost lock is. Permits are
 * not owned by threads: any thread may release a permit object. All functions are
 * thread-safe.
 */
#ifndef REDIS_LOCK_SEMAPHORE_H
#define REDIS_LOCK_SEMAPHORE_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

#include <gio/gio.h>
#include <redislock/redislock-macros.h>
#include <redislock/redislock-registry.h>

G_BEGIN_DECLS

/**
 * RedisSemaphore:
 *
 * A counting semaphore of a registry, reference counted and thread-safe. Its permits
 * are the leases `registry_key:{name}:sem:0` … `:sem:N-1`, its size is kept in
 * `registry_key:{name}:sem`.
 *
 * Since: 0.1
 */
typedef struct _RedisSemaphore RedisSemaphore;

/**
 * RedisPermit:
 *
 * One permit taken from a #RedisSemaphore, until [method@Redislock.Permit.release] frees it.
 *
 * Since: 0.1
 */
typedef struct _RedisPermit RedisPermit;

/**
 * REDIS_LOCK_TYPE_SEMAPHORE:
 *
 * The #GType of #RedisSemaphore, a boxed type whose copy takes a reference.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_SEMAPHORE (redis_semaphore_get_type ())

/**
 * redis_semaphore_get_type:
 *
 * Returns: the #GType of #RedisSemaphore, %REDIS_LOCK_TYPE_SEMAPHORE.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_semaphore_get_type (void) G_GNUC_CONST;

/**
 * REDIS_LOCK_TYPE_PERMIT:
 *
 * The #GType of #RedisPermit, a boxed type. A permit cannot be copied (it is one
 * lease): a binding holds the one pointer and gives it back with
 * [method@Redislock.Permit.release].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_PERMIT (redis_permit_get_type ())

/**
 * redis_permit_get_type:
 *
 * Returns: the #GType of #RedisPermit, %REDIS_LOCK_TYPE_PERMIT.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_permit_get_type (void) G_GNUC_CONST;

/**
 * REDIS_SEMAPHORE_MAX_PERMITS:
 *
 * The largest size of a semaphore. Taking a permit and counting the free ones look at
 * every permit of the semaphore in one atomic step in Redis, an O(N) cost.
 *
 * Since: 0.1
 */
#define REDIS_SEMAPHORE_MAX_PERMITS 1024

/**
 * redis_lock_registry_obtain_semaphore:
 * @registry: a registry
 * @name: the semaphore's name, 1 to 1000 bytes, no NUL, no `{` or `}`
 * @permits: its size, 1 to %REDIS_SEMAPHORE_MAX_PERMITS, the same in every process
 * @error: return location for a #GError
 *
 * Gives a semaphore object for @name. No request is sent: the size is checked against
 * the one stored with the semaphore (by the first process that took a permit) at each
 * acquisition, where a different size fails with %REDIS_LOCK_ERROR_INVALID naming
 * both. A semaphore, a lock and a read-write lock of the same name are different
 * objects with different keys. Not available on a quorum registry
 * ([ctor@Redislock.LockRegistry.new_quorum]: permits counted on independent servers would not
 * add up), which is %REDIS_LOCK_ERROR_INVALID.
 *
 * Returns: (transfer full) (nullable): a new reference; %NULL with @error:
 *   %REDIS_LOCK_ERROR_INVALID for a bad name, @permits of 0 or over the maximum, or a
 *   quorum registry; %REDIS_LOCK_ERROR_CLOSED, %REDIS_LOCK_ERROR_FORKED.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisSemaphore *redis_lock_registry_obtain_semaphore (RedisLockRegistry *registry,
                                                                        const char *name,
                                                                        guint permits,
                                                                        GError **error);

/**
 * redis_semaphore_ref: (skip)
 * @semaphore: a semaphore
 *
 * Takes a reference to the semaphore. See [method@Redislock.Semaphore.unref].
 *
 * Returns: (transfer full): @semaphore, with one more reference.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisSemaphore *redis_semaphore_ref (RedisSemaphore *semaphore);

/**
 * redis_semaphore_unref: (skip)
 * @semaphore: (transfer full) (nullable): a semaphore
 *
 * Drops a reference. Permits taken stay valid: each keeps the semaphore alive.
 * See [method@Redislock.Semaphore.ref].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_semaphore_unref (RedisSemaphore *semaphore);

/**
 * redis_semaphore_get_name:
 * @semaphore: a semaphore
 *
 * Gives the name of the semaphore.
 *
 * Returns: (transfer none): the name given to [method@Redislock.LockRegistry.obtain_semaphore].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_semaphore_get_name (RedisSemaphore *semaphore);

/**
 * redis_semaphore_get_permits:
 * @semaphore: a semaphore
 *
 * Gives the number of permits of the semaphore. See [method@Redislock.Semaphore.get_available].
 *
 * Returns: the semaphore's size.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_semaphore_get_permits (RedisSemaphore *semaphore);

/**
 * redis_semaphore_try_acquire_for:
 * @semaphore: a semaphore
 * @wait_ms: the longest wait in total; 0: one attempt; < 0: forever
 * @cancellable: (nullable): a #GCancellable
 * @error: return location for a #GError
 *
 * Takes one permit, waiting at most @wait_ms for one to be released. One round trip
 * when a permit is free. A waiter is woken by the release notification of any permit
 * (or, without one, at the smallest remaining TTL among the permits). Threads of one
 * process contend for permits as processes do: each permit is a lease of its own.
 *
 * Returns: (transfer full) (nullable): the permit, to give back with
 *   [method@Redislock.Permit.release]; %NULL without @error: no permit within @wait_ms; %NULL
 *   with @error: %REDIS_LOCK_ERROR_INVALID (another size is stored: the message names
 *   both), %G_IO_ERROR_CANCELLED, %REDIS_LOCK_ERROR_CLOSED, a Redis failure.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisPermit *redis_semaphore_try_acquire_for (RedisSemaphore *semaphore,
                                                                gint64 wait_ms,
                                                                GCancellable *cancellable,
                                                                GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_semaphore_acquire_async:
 * @semaphore: a semaphore
 * @wait_ms: as for [method@Redislock.Semaphore.try_acquire_for]
 * @cancellable: (nullable): a #GCancellable
 * @callback: (scope async): called in the thread-default main context of this call
 * @user_data: (closure): data for @callback
 *
 * Takes one permit without blocking the calling thread; finish with
 * [method@Redislock.Semaphore.acquire_finish]. The wait is woken as for
 * [method@Redislock.Semaphore.try_acquire_for]; requests run on the registry's workers.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_semaphore_acquire_async (RedisSemaphore *semaphore, gint64 wait_ms,
                                                      GCancellable *cancellable,
                                                      GAsyncReadyCallback callback,
                                                      gpointer user_data);

/**
 * redis_semaphore_acquire_finish:
 * @semaphore: a semaphore
 * @result: the #GAsyncResult given to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Redislock.Semaphore.acquire_async].
 *
 * Returns: (transfer full) (nullable): as [method@Redislock.Semaphore.try_acquire_for].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisPermit *redis_semaphore_acquire_finish (RedisSemaphore *semaphore,
                                                               GAsyncResult *result,
                                                               GError **error);

/**
 * redis_semaphore_get_available:
 * @semaphore: a semaphore
 * @error: return location for a #GError
 *
 * Counts the permits free in Redis now (one round trip; O(N) in Redis).
 * See [method@Redislock.Semaphore.get_permits].
 *
 * Returns: how many permits are free; 0 with @error on failure (another size stored is
 *   %REDIS_LOCK_ERROR_INVALID).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_semaphore_get_available (RedisSemaphore *semaphore, GError **error);

/**
 * redis_permit_release:
 * @permit: (transfer full): a permit
 * @error: return location for a #GError
 *
 * Gives the permit back (one round trip: a compare-and-delete of its lease, which
 * wakes the semaphore's waiters in every process) and frees @permit, whatever the
 * outcome. Any thread may release a permit. See [Semaphores](semaphore.html).
 *
 * Returns: %TRUE when released; %FALSE with %REDIS_LOCK_ERROR_LEASE_LOST when its lease
 *   had been lost (another holder's key is untouched; when it was found lost before,
 *   the call returns at once without waiting for Redis, and the key is deleted in the
 *   background if it is still this permit's), %REDIS_LOCK_ERROR_CLOSED after the
 *   registry closed (close released it), or a Redis failure (the lease is then
 *   released in the background, or expires with its TTL).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_permit_release (RedisPermit *permit, GError **error);

/**
 * redis_permit_release_async:
 * @permit: (transfer full): a permit
 * @cancellable: (nullable): a #GCancellable; the permit is given back all the same
 * @callback: (scope async): called in the thread-default main context of the calling
 *   thread when the release ends
 * @user_data: (closure): data for @callback
 *
 * redis_permit_release() without blocking the calling thread: the compare-and-delete
 * of the permit's lease is sent from a worker of the registry, and @callback runs in
 * the calling thread's thread-default main context (which must be running); call
 * redis_permit_release_finish() there. @permit is handed over at once (do not use it
 * after this call) and freed whatever the outcome. As g_output_stream_close_async()
 * closes a stream, the release is made even when @cancellable is cancelled: the
 * outcome is the release's.
 *
 * Its blocking twin is [method@Redislock.Permit.release].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_permit_release_async (RedisPermit *permit,
                                                             GCancellable *cancellable,
                                                             GAsyncReadyCallback callback,
                                                             gpointer user_data);

/**
 * redis_permit_release_finish:
 * @result: the #GAsyncResult given to the callback of redis_permit_release_async()
 * @error: return location for a #GError
 *
 * Finishes redis_permit_release_async(). It takes no permit: the permit was freed.
 *
 * Returns: as redis_permit_release(): %TRUE when released; %FALSE with
 *   %REDIS_LOCK_ERROR_LEASE_LOST, %REDIS_LOCK_ERROR_CLOSED or a Redis failure.
 *
 * See [method@Redislock.Permit.release_async].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_permit_release_finish (GAsyncResult *result,
                                                                  GError **error);

/**
 * redis_permit_free: (skip)
 * @permit: (transfer full) (nullable): a permit
 *
 * Releases @permit as redis_permit_release() does and logs a failure with g_warning()
 * (a lost lease: the work it protected may have run beside another holder's), as
 * redis_lock_locker_free() does for a lock. It is the cleanup of
 * `g_autoptr (RedisPermit)`, so a permit held for a scope is given back when the scope
 * ends; to learn the outcome, take it out with g_steal_pointer() and call
 * redis_permit_release() instead. Not introspected: bindings release with
 * redis_permit_release() (the boxed type's free gives back a permit never released,
 * without a warning).
 *
 * See [method@Redislock.Permit.release] and [method@Redislock.LockLocker.free].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_permit_free (RedisPermit *permit);

/**
 * redis_permit_is_lease_lost:
 * @permit: a permit
 *
 * Tells whether the permit's lease was lost. See [Semaphores](semaphore.html).
 *
 * Returns: %TRUE when the permit's lease was found lost (expired, deleted or taken by
 *   another holder), or the registry closed.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_permit_is_lease_lost (RedisPermit *permit);

/**
 * redis_permit_get_lease_cancellable:
 * @permit: a permit
 *
 * Gives the cancellable cancelled when the permit's lease is lost.
 *
 * Returns: (transfer none): a #GCancellable cancelled when the permit's lease is lost
 *   (or the registry closes); valid until [method@Redislock.Permit.release].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GCancellable *redis_permit_get_lease_cancellable (RedisPermit *permit);

/**
 * redis_permit_get_index:
 * @permit: a permit
 *
 * Gives the number of the permit within its semaphore. See [Semaphores](semaphore.html).
 *
 * Returns: which permit of the semaphore this is, 0 to size - 1 (its key ends in
 *   `:sem:INDEX`).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_permit_get_index (RedisPermit *permit);

/**
 * redis_permit_get_key:
 * @permit: a permit
 *
 * Gives the key of the permit's lease.
 *
 * Returns: (transfer none): the Redis key of the permit's lease,
 *   `registry_key:{name}:sem:INDEX`; valid until [method@Redislock.Permit.release].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_permit_get_key (RedisPermit *permit);

/**
 * redis_permit_dup_lease_value:
 * @permit: a permit
 *
 * Gives the value the permit's lease key holds. See [method@Redislock.Lock.dup_lease_value].
 *
 * Returns: (transfer full) (nullable): the value the permit's key holds while it is
 *   held: the registry's client id, `:` and the number of the acquisition; %NULL once
 *   the registry released it (close). Free with g_free().
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 char *redis_permit_dup_lease_value (RedisPermit *permit);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisSemaphore, redis_semaphore_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisPermit, redis_permit_free)

G_END_DECLS

#endif /* REDIS_LOCK_SEMAPHORE_H */
