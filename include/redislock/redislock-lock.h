/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-lock.h: a named lock that excludes the threads of this process and every
 * other process sharing the Redis server.
 *
 * A lock is a local recursive mutex (owner thread and hold count) paired with a Redis
 * lease (`SET registry_key:name client-id PX ttl`). Threads of one registry contend on
 * the local mutex; only the outermost acquisition and the outermost release talk to
 * Redis, and re-entry never does. All functions are thread-safe.
 */
#ifndef REDIS_LOCK_LOCK_H
#define REDIS_LOCK_LOCK_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

#include <gio/gio.h>
#include <redislock/redislock-macros.h>
#include <redislock/redislock-version.h>
#include <redislock/redislock-registry.h>

G_BEGIN_DECLS

/**
 * redis_lock_ref: (skip)
 * @lock: a lock
 *
 * Takes another reference. Only a holder of a reference may take another (or the
 * lease-lost callback, see #RedisLockLeaseLostFunc): a lock nobody references may be
 * dropped from the cache and freed at any moment, and taking a reference to such a
 * lock is a critical error. Not introspected: bindings hold references through the
 * boxed type %REDIS_LOCK_TYPE_LOCK.
 *
 * Thread safety: unlike the rest of this header, only a thread that already holds a
 * reference (or the lease-lost callback) may call it. See [method@Redislock.Lock.unref].
 *
 * Returns: (transfer full): @lock, with one more reference.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLock *redis_lock_ref (RedisLock *lock);

/**
 * redis_lock_unref: (skip)
 * @lock: (transfer full) (nullable): a lock
 *
 * Drops a reference. An unreferenced lock stays cached (same pointer on the next
 * obtain) until the cache drops it; keep a reference for as long as you call functions
 * on the lock. Not introspected, as [method@Redislock.Lock.ref].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_unref (RedisLock *lock);

/**
 * redis_lock_get_name:
 * @lock: a lock
 *
 * The name of @lock.
 *
 * Returns: (transfer none): the name given to [method@Redislock.LockRegistry.obtain].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_get_name (RedisLock *lock);

/**
 * redis_lock_get_key:
 * @lock: a lock
 *
 * The Redis key that the lease of @lock is stored under. See [Spring](spring.html).
 *
 * Returns: (transfer none): the Redis key of the lock, `registry_key:name`.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_get_key (RedisLock *lock);

/**
 * redis_lock_lock:
 * @lock: a lock
 * @error: return location for a #GError
 *
 * Blocks until the calling thread holds @lock. Re-entry raises the hold count without
 * contacting Redis.
 * See [error@Redislock.LockErrorCode] and [Threads, processes and lifetime](threads.html).
 *
 * Returns: %TRUE when held; %FALSE with @error set only when Redis fails
 *   (%REDIS_LOCK_ERROR_CONNECTION, %REDIS_LOCK_ERROR_REDIS) or the registry is closed
 *   or forked.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_lock (RedisLock *lock, GError **error);

/**
 * redis_lock_try_lock:
 * @lock: a lock
 * @error: return location for a #GError
 *
 * One attempt that never waits: fails at once if another thread of this registry holds
 * the lock, otherwise one Redis round trip.
 * See [error@Redislock.LockErrorCode] and [Threads, processes and lifetime](threads.html).
 *
 * Returns: %TRUE = now held; %FALSE with @error unset = held by someone else;
 *   %FALSE with @error set = failure.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_try_lock (RedisLock *lock, GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_lock_try_lock_for:
 * @lock: a lock
 * @wait_ms: total wait in milliseconds, local and Redis together; < 0 (or a value too
 *   large to add to the clock, such as %G_MAXINT64) waits forever, 0 makes one attempt
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @error: return location for a #GError
 *
 * With @wait_ms > 0 every request to Redis is bounded by the time left as well as by
 * the command timeout, so a slow or frozen server cannot stretch the wait: a request
 * that gets no answer in the time left fails with %REDIS_LOCK_ERROR_CONNECTION (or,
 * when less than 20 ms of the wait was left for it, counts as not acquired in time),
 * and if it took the key after all, the registry releases it in the background. With
 * @wait_ms = 0 the one attempt is bounded by the command timeout.
 *
 * How the wait is spent follows the registry's settings: its
 * [enum@Redislock.LockWaitMode] ([method@Redislock.LockRegistry.set_wait_mode]), its
 * timeouts ([method@Redislock.LockRegistry.set_command_timeout_ms]) and its lease TTL
 * ([method@Redislock.LockRegistry.set_expire_after_ms]). Failures are of the
 * [error@Redislock.LockErrorCode] domain, or %G_IO_ERROR_CANCELLED; release the lock
 * with [method@Redislock.Lock.unlock] from the same thread (see
 * [Threads, processes and lifetime](threads.html) and
 * [Restarts, failovers and fault histories](faults.html)).
 *
 * Returns: %TRUE = now held; %FALSE with @error unset = not acquired within @wait_ms;
 *   %FALSE with @error set = failure (Redis, cancelled, closed, forked).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_try_lock_for (RedisLock *lock,
                                                    gint64 wait_ms,
                                                    GCancellable *cancellable,
                                                    GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_lock_try_lock_full:
 * @lock: a lock
 * @wait_ms: as for [method@Redislock.Lock.try_lock_for]
 * @ttl_ms: TTL of this acquisition's lease; 0: the registry TTL; < 0 or more than
 *   100 years is %REDIS_LOCK_ERROR_INVALID. The watchdog renews with this TTL. Ignored
 *   on re-entry and when the lease is handed over by another thread of the registry.
 * @cancellable: (nullable): cancels the wait
 * @error: return location for a #GError
 *
 * As [method@Redislock.Lock.try_lock_for], with a TTL of its own for the lease this call
 * takes.
 *
 * Returns: as [method@Redislock.Lock.try_lock_for].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_try_lock_full (RedisLock *lock,
                                                     gint64 wait_ms,
                                                     gint64 ttl_ms,
                                                     GCancellable *cancellable,
                                                     GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_lock_unlock:
 * @lock: a lock
 * @error: return location for a #GError
 *
 * Releases one hold of the calling thread. An inner unlock only lowers the hold count.
 * The outermost unlock deletes the key only if it still holds this acquisition's value
 * (see [method@Redislock.Lock.dup_lease_value]), and publishes the unlock notification (when the
 * Redis user may not publish on the channel, the key is deleted all the same and one
 * warning is logged). In every case where the caller held the lock, its local hold is
 * released, so the lock stays usable.
 *
 * With other threads of this registry waiting, the outermost unlock may hand the lease
 * to the next of them instead of releasing it (see
 * [method@Redislock.LockRegistry.set_max_local_handoffs]). Such an unlock does not ask Redis: it
 * returns %TRUE when the lease was confirmed recently enough, and a loss since that
 * confirmation is reported to the next local holder (its lease is lost, or, when found
 * before it got the lock, it acquires afresh).
 *
 * Thread safety: any thread may call it, but only the calls of a thread that holds
 * @lock release anything; the others fail with %REDIS_LOCK_ERROR_NOT_OWNER.
 *
 * Returns: %TRUE on success; %FALSE with %REDIS_LOCK_ERROR_NOT_OWNER (the calling thread
 *   does not hold the lock; nothing changes), %REDIS_LOCK_ERROR_LEASE_LOST (the lease had
 *   expired or belongs to another owner, whose key is untouched; or it was found lost
 *   while held, and the unlock then returns at once without waiting for Redis, which
 *   may be what lost it, the key being deleted in the background if it is still this
 *   acquisition's; or the release failed after the lease had gone unconfirmed past its
 *   TTL), %REDIS_LOCK_ERROR_CONNECTION / %REDIS_LOCK_ERROR_REDIS (the release did not
 *   complete, or its outcome is unknown; a lease left behind is released in the
 *   background, or expires with its TTL),
 *   %REDIS_LOCK_ERROR_CLOSED or %REDIS_LOCK_ERROR_FORKED.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_unlock (RedisLock *lock, GError **error);

/**
 * redis_lock_lock_async:
 * @lock: a lock
 * @wait_ms: total wait in milliseconds, as for [method@Redislock.Lock.try_lock_for]: < 0 waits
 *   forever, 0 makes one attempt (and completes with %FALSE at once when another
 *   thread or call of this registry holds the lock)
 * @ttl_ms: TTL of this acquisition's lease, as for [method@Redislock.Lock.try_lock_full]; 0: the
 *   registry TTL
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @callback: (scope async) (closure user_data): called when the call completes
 * @user_data: (closure): data for @callback
 *
 * Takes @lock for the calling thread without blocking it, for code that runs a
 * #GMainLoop. @callback is called in the thread-default main context of the calling
 * thread (see g_main_context_push_thread_default()); call [method@Redislock.Lock.lock_finish]
 * there. That context must be running for the call to complete, and for its
 * @wait_ms to end it.
 *
 * When the result is %TRUE the calling thread holds @lock exactly as after
 * [method@Redislock.Lock.lock]: re-entry, [method@Redislock.Lock.is_held_by_current_thread],
 * [method@Redislock.Lock.get_lease_cancellable] and [method@Redislock.Lock.unlock] (or
 * [method@Redislock.Lock.unlock_async]) from that thread. The hold begins when the call
 * completes, just before @callback is dispatched. When the calling thread holds @lock
 * already, the call completes with one more hold: calls made from one thread do not
 * exclude each other while it holds @lock, so a loop that serves several requests
 * with one lock takes them one at a time itself. A blocking lock call made by the
 * calling thread while its own call is pending waits like any other and, when the
 * pending call is granted, returns with the hold as a re-entry; but a pending call
 * whose wake-up is a timer (the holder's remaining TTL, @wait_ms) needs this thread's
 * context to run, so block this thread with a bound, if at all.
 *
 * A pending call costs no thread: it waits in the lock's queue, in order of arrival,
 * together with the threads of this registry that wait in [method@Redislock.Lock.lock] (the two
 * kinds take turns), and an unlock in this registry may hand the lease to it as to a
 * waiting thread (see [method@Redislock.Lock.unlock]), without a Redis command. Requests to
 * Redis run on a small pool of worker threads of the registry, so a server that
 * stops answering delays the calls of its own registry only; a call whose request
 * could not be sent within @wait_ms (every worker blocked on such a server) completes
 * with %REDIS_LOCK_ERROR_CONNECTION, not as "not acquired". While a call
 * waits for the lease itself, it is woken by the unlock notification, the holder's
 * remaining TTL or @wait_ms, as [method@Redislock.Lock.try_lock_for] is.
 *
 * Cancelling @cancellable, or closing the registry ([method@Redislock.LockRegistry.close]),
 * completes a pending call with %G_IO_ERROR_CANCELLED or %REDIS_LOCK_ERROR_CLOSED, in
 * its own context. A call that completed before the cancellation keeps its result: if
 * it is %TRUE, the lock is held and must be unlocked.
 *
 * Thread safety: any thread may call it; the result belongs to the calling thread,
 * in whose thread-default main context @callback runs.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_lock_async (RedisLock *lock,
                                              gint64 wait_ms,
                                              gint64 ttl_ms,
                                              GCancellable *cancellable,
                                              GAsyncReadyCallback callback,
                                              gpointer user_data);

/**
 * redis_lock_lock_finish:
 * @lock: the lock given to [method@Redislock.Lock.lock_async]
 * @result: the #GAsyncResult given to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Redislock.Lock.lock_async]; call it in @callback.
 *
 * Returns: %TRUE = the calling thread of [method@Redislock.Lock.lock_async] holds @lock now;
 *   %FALSE with @error unset = not acquired within @wait_ms; %FALSE with @error set =
 *   failure (Redis, %G_IO_ERROR_CANCELLED, %REDIS_LOCK_ERROR_CLOSED, forked, an
 *   invalid @ttl_ms), as for [method@Redislock.Lock.try_lock_full].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_lock_finish (RedisLock *lock,
                                                   GAsyncResult *result,
                                                   GError **error);

/**
 * redis_lock_unlock_async:
 * @lock: a lock the calling thread holds
 * @cancellable: (nullable): when already cancelled, the call completes with
 *   %G_IO_ERROR_CANCELLED and changes nothing; a release under way is not
 *   interrupted
 * @callback: (nullable) (scope async) (closure user_data): called when the call completes
 * @user_data: (closure): data for @callback
 *
 * Releases one hold of the calling thread as [method@Redislock.Lock.unlock] does, without
 * blocking it: the outermost release's request to Redis runs on a worker thread, and
 * @callback is called in the thread-default main context of the calling thread; call
 * [method@Redislock.Lock.unlock_finish] there. The calling thread stops holding @lock when this
 * function returns (an inner unlock only lowers the hold count).
 *
 * Thread safety: as [method@Redislock.Lock.unlock]; @callback runs in the calling thread's
 * thread-default main context.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_unlock_async (RedisLock *lock,
                                                GCancellable *cancellable,
                                                GAsyncReadyCallback callback,
                                                gpointer user_data);

/**
 * redis_lock_unlock_finish:
 * @lock: the lock given to [method@Redislock.Lock.unlock_async]
 * @result: the #GAsyncResult given to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Redislock.Lock.unlock_async]; call it in @callback.
 *
 * Returns: as [method@Redislock.Lock.unlock]; %FALSE with %G_IO_ERROR_CANCELLED when the
 *   cancellable was cancelled before the call.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_unlock_finish (RedisLock *lock,
                                                     GAsyncResult *result,
                                                     GError **error);

/**
 * redis_lock_is_held_by_current_thread:
 * @lock: a lock
 *
 * Whether the calling thread holds @lock, at any hold count. Local only: never asks
 * Redis. See [method@Redislock.Lock.get_hold_count].
 *
 * Returns: whether the calling thread holds @lock.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_is_held_by_current_thread (RedisLock *lock);

/**
 * redis_lock_get_hold_count:
 * @lock: a lock
 *
 * How many times the calling thread holds @lock: re-entry raises the count, each
 * unlock lowers it. Local only: never asks Redis.
 * See [method@Redislock.Lock.is_held_by_current_thread].
 *
 * Returns: the calling thread's hold count (0 when it does not hold @lock).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_lock_get_hold_count (RedisLock *lock);

/**
 * redis_lock_is_acquired_in_this_process:
 * @lock: a lock
 *
 * Local only: never asks Redis. See [method@Redislock.Lock.is_held_by_current_thread].
 *
 * Returns: whether some thread of this registry holds @lock.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_is_acquired_in_this_process (RedisLock *lock);

/**
 * redis_lock_is_lease_lost:
 * @lock: a lock
 *
 * Whether the lease of the calling thread's current hold has been found lost (by
 * the watchdog, a renewal or a read-back). Local only: never asks Redis.
 * See [method@Redislock.Lock.get_lease_cancellable] and [Restarts and failovers](faults.html).
 *
 * Returns: %TRUE when the calling thread holds @lock and its lease has been found lost
 *   (it stays lost until the outermost unlock); %FALSE otherwise.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_is_lease_lost (RedisLock *lock);

/**
 * redis_lock_get_lease_cancellable:
 * @lock: a lock
 *
 * A cancellable that is cancelled when the lease of the calling thread's current hold
 * is lost, so the holder can pass it to its own GIO calls and have them abort. Code
 * running a #GMainLoop can hear of the loss in its loop: attach
 * `g_cancellable_source_new (cancellable)` to the thread-default main context with a
 * #GCancellableSourceFunc, and destroy the source at the outermost unlock (GLib 2.74
 * may leak a source destroyed while another thread still reports the loss; a source
 * of your own that a g_cancellable_connect() handler makes ready, the handler
 * disconnected with g_cancellable_disconnect() at the outermost unlock, does not leak:
 * see docs/main-loops.md).
 *
 * Thread safety: the answer is the calling thread's; other threads may use the
 * cancellable only while this thread holds @lock. See [method@Redislock.Lock.is_lease_lost].
 *
 * Returns: (transfer none) (nullable): the cancellable, valid while the calling thread
 *   holds @lock (until its outermost unlock); %NULL when it does not hold @lock.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GCancellable *redis_lock_get_lease_cancellable (RedisLock *lock);

/**
 * redis_lock_dup_lease_value:
 * @lock: a lock
 *
 * The value the key of @lock holds in Redis for the calling thread's current hold:
 * the registry's client id ([method@Redislock.LockRegistry.get_client_id]), `:`, and a number
 * unique to the acquisition. A local hand-off and a kept streak keep the value, as
 * the lease does not change hands in Redis. Local only: never asks Redis.
 *
 * Returns: (transfer full) (nullable): the value, free with g_free(); %NULL when the
 *   calling thread does not hold @lock.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 char *redis_lock_dup_lease_value (RedisLock *lock);

/**
 * redis_lock_get_fencing_token:
 * @lock: a lock
 *
 * The fencing token of the calling thread's current hold (see
 * [method@Redislock.LockRegistry.set_fencing]): the value of the name's counter when the lease
 * was taken, max (the counter before + 1, the server's clock in microseconds). Pass it
 * with every write to the resource the lock protects, and have the resource refuse a
 * token lower than the highest it has seen. Re-entry, a local
 * hand-off and a kept streak keep the token, as they keep the lease. Local only: never
 * asks Redis.
 *
 * Returns: the token (>= 1); 0 when the calling thread does not hold @lock or its
 *   lease was taken with fencing off.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint64 redis_lock_get_fencing_token (RedisLock *lock);

/**
 * redis_lock_try_lock_all:
 * @locks: (array length=n): the locks to take; they may come from different
 *   registries, and a lock may be listed more than once (it is taken once)
 * @n: the number of locks in @locks, > 0
 * @wait_ms: total wait for all of them, as for [method@Redislock.Lock.try_lock_for] (0: one
 *   attempt, < 0: forever)
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @error: return location for a #GError
 *
 * Takes every lock of @locks, or none. The locks are taken in one canonical order
 * (registry, then key), the local mutexes first and then the leases, so two threads
 * that take overlapping sets in any order never deadlock. The leases of one registry
 * are requested together: one round trip for those on one server (on a Cluster, one per
 * master, the leases of one slot taken all or none in one step); when one of them is
 * held elsewhere, the ones this attempt took are released at once and the call waits
 * for the holder's release (or its TTL) before trying the whole set again, so it never
 * keeps some while waiting for others. Locks the calling thread already holds count
 * one more hold, without Redis, and lose it again on failure. With fencing on (see
 * [method@Redislock.LockRegistry.set_fencing]) each lease gets its own token. The order covers
 * the locks a call takes: a thread that already holds a lock of another thread's set,
 * taken before and outside its own set, can still deadlock with it as with any two
 * locks taken in opposite orders (a finite @wait_ms bounds that).
 *
 * %NULL @locks, @n == 0 or a %NULL element is a programming error (a critical).
 *
 * Returns: %TRUE when the calling thread holds every lock (each one hold more);
 *   %FALSE with @error unset when not all could be had within @wait_ms; %FALSE with
 *   @error set on failure (Redis, cancelled, a closed or forked registry, a name that
 *   cannot be fenced). When it returns %FALSE this call holds none of them: every
 *   lease it took was released before it returned, or, when the store did not answer
 *   that release, is released in the background as soon as it does.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_try_lock_all (RedisLock *const *locks,
                                                    guint n,
                                                    gint64 wait_ms,
                                                    GCancellable *cancellable,
                                                    GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_lock_try_lock_all_async:
 * @locks: (array length=n): the locks to take, as for redis_lock_try_lock_all()
 * @n: the number of locks in @locks, > 0
 * @wait_ms: total wait for all of them, as for redis_lock_try_lock_all()
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @callback: (scope async) (closure user_data): called when the call completes
 * @user_data: (closure): data for @callback
 *
 * redis_lock_try_lock_all() without blocking the calling thread, for code that runs a
 * #GMainLoop: every lock of @locks, or none, for the calling thread. @callback is
 * called in the thread-default main context of the calling thread (see
 * g_main_context_push_thread_default()); call redis_lock_try_lock_all_finish() there.
 * That context must be running for the call to complete.
 *
 * The set is taken as redis_lock_try_lock_all() takes it (canonical order, local
 * mutexes first, then the leases, never keeping some while waiting for others), by a
 * thread of its own, which then hands each hold to the calling thread: when
 * the result is %TRUE, the calling thread holds every lock exactly as after the
 * blocking call, and unlocks them (redis_lock_unlock_all(), redis_lock_unlock()) from
 * that thread. A blocking lock call the calling thread makes meanwhile for a lock of
 * the set waits like any other and, once the set is handed over, returns with the
 * hold as a re-entry. Locks the calling thread holds already count one hold more
 * from the start of the call, and lose it again when the call completes with %FALSE;
 * but a lock of the set that the calling thread takes itself while the call is
 * pending is, for that thread, another thread's hold, waited for until @wait_ms. A
 * pending call costs that thread for its wait (a blocking wait, recorded for deadlock
 * detection as that thread's).
 *
 * Cancelling @cancellable, or closing a registry of the set, completes a pending call
 * with %G_IO_ERROR_CANCELLED or %REDIS_LOCK_ERROR_CLOSED. A call that took the set
 * before the cancellation keeps its result: the locks are held and must be unlocked.
 *
 * %NULL @locks, @n == 0 or a %NULL element is a programming error (a critical).
 *
 * Thread safety: any thread may call it; the result belongs to the calling thread, in
 * whose thread-default main context @callback runs.
 *
 * Its blocking twin is [func@Redislock.Lock.try_lock_all]; see also
 * [method@Redislock.Lock.lock_async].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_try_lock_all_async (RedisLock *const *locks,
                                                      guint n,
                                                      gint64 wait_ms,
                                                      GCancellable *cancellable,
                                                      GAsyncReadyCallback callback,
                                                      gpointer user_data);

/**
 * redis_lock_try_lock_all_finish:
 * @result: the #GAsyncResult given to the callback of redis_lock_try_lock_all_async()
 * @error: return location for a #GError
 *
 * Finishes redis_lock_try_lock_all_async().
 *
 * Returns: as redis_lock_try_lock_all(): %TRUE = the calling thread of
 *   redis_lock_try_lock_all_async() holds every lock (each one hold more); %FALSE with
 *   @error unset = not all within @wait_ms; %FALSE with @error set = failure. With
 *   %FALSE it holds none of them.
 *
 * See [func@Redislock.Lock.try_lock_all_async] and [func@Redislock.Lock.unlock_all].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_try_lock_all_finish (GAsyncResult *result,
                                                           GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_lock_unlock_all:
 * @locks: (array length=n): the locks to release; a lock listed more than once is
 *   released once
 * @n: the number of locks in @locks, > 0
 * @error: return location for a #GError
 *
 * Releases one hold of the calling thread on every lock of @locks, as
 * [method@Redislock.Lock.unlock] does each, in the reverse of the canonical order; the outermost
 * releases of one registry's leases go to Redis together (one round trip per server).
 * A failure does not stop it: every lock is released, and the first error is
 * reported.
 *
 * %NULL @locks, @n == 0 or a %NULL element is a programming error (a critical).
 *
 * Returns: %TRUE when every unlock succeeded; %FALSE with the first error otherwise
 *   (as [method@Redislock.Lock.unlock]: %REDIS_LOCK_ERROR_NOT_OWNER,
 *   %REDIS_LOCK_ERROR_LEASE_LOST…).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_unlock_all (RedisLock *const *locks,
                                                  guint n,
                                                  GError **error);

/**
 * RedisLockLocker: (skip)
 *
 * Holds a lock for a scope: [method@Redislock.Lock.locker_new] locks,
 * [method@Redislock.LockLocker.free] unlocks. Use with g_autoptr(RedisLockLocker). Not
 * introspected: it is a C scope guard; bindings call [method@Redislock.Lock.lock] and
 * [method@Redislock.Lock.unlock] (Python: try/finally).
 *
 * Since: 0.1
 */
typedef struct _RedisLockLocker RedisLockLocker;

/**
 * redis_lock_locker_new: (skip)
 * @lock: a lock
 * @error: return location for a #GError
 *
 * Calls [method@Redislock.Lock.lock].
 *
 * Returns: (transfer full) (nullable): a locker, or %NULL with @error set.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockLocker *redis_lock_locker_new (RedisLock *lock, GError **error);

/**
 * redis_lock_locker_free: (skip)
 * @locker: (transfer full) (nullable): a locker
 *
 * Unlocks; a failure (for example a lost lease) is logged with g_warning().
 *
 * Thread safety: call it on the thread that called [method@Redislock.Lock.locker_new], as a
 * g_autoptr() scope does.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_locker_free (RedisLockLocker *locker);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLock, redis_lock_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockLocker, redis_lock_locker_free)

G_END_DECLS

#endif /* REDIS_LOCK_LOCK_H */
