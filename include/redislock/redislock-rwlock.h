/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-rwlock.h: a named read-write lock: many readers (threads of any process)
 * or one writer.
 *
 * It pairs a local level (the threads of one registry share readers and exclude
 * writers in memory) with leases in Redis: one writer lease, and one reader lease per
 * registry that the registry's reading threads share. Its keys differ from those of
 * a plain lock of the same name (`registry_key:{name}:rw:…`), so the two are
 * independent. The leases are renewed by the registry's watchdog and a loss is
 * reported as a plain lock's is. All functions are thread-safe.
 */
#ifndef REDIS_LOCK_RWLOCK_H
#define REDIS_LOCK_RWLOCK_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

#include <gio/gio.h>
#include <redislock/redislock-macros.h>
#include <redislock/redislock-registry.h>

G_BEGIN_DECLS

/**
 * RedisRWLock:
 *
 * A named read-write lock of a registry: opaque, reference counted, thread-safe.
 * Obtained with [method@Redislock.LockRegistry.obtain_rw].
 *
 * Since: 0.1
 */
typedef struct _RedisRWLock RedisRWLock;

/**
 * REDIS_LOCK_TYPE_RW_LOCK:
 *
 * The #GType of #RedisRWLock: a boxed type whose copy is [method@Redislock.RWLock.ref] and whose
 * free is [method@Redislock.RWLock.unref].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_RW_LOCK (redis_rw_lock_get_type ())
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_rw_lock_get_type (void) G_GNUC_CONST;

/**
 * redis_lock_registry_obtain_rw:
 * @registry: a registry
 * @name: the lock's name: 1 to 1024 bytes, any but NUL
 * @error: return location for a #GError
 *
 * The read-write lock @name of @registry. While any reference, hold or waiter exists,
 * every call for the same name returns the same object. Its Redis keys are
 * `registry_key:{name}:rw:w` (the writer lease), `registry_key:{name}:rw:r:CLIENT_ID`
 * (one reader lease per registry), `registry_key:{name}:rw:readers` (the index, a
 * sorted set, of the registries that took a reader lease; a reader lease whose
 * registration vanished from it is reported lost) and `registry_key:{name}:rw:ww`
 * (a waiting writer's mark), all in one Redis Cluster slot. See [Read-write locks](rwlock.html).
 *
 * Returns: (transfer full): a new reference to the lock, or %NULL with @error:
 *   %REDIS_LOCK_ERROR_INVALID for a bad name, %REDIS_LOCK_ERROR_CLOSED,
 *   %REDIS_LOCK_ERROR_FORKED.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisRWLock *redis_lock_registry_obtain_rw (RedisLockRegistry *registry,
                                                              const char *name,
                                                              GError **error);

/**
 * redis_rw_lock_ref: (skip)
 * @lock: a read-write lock
 *
 * Takes another reference; only a holder of a reference may take another. Not
 * introspected: bindings hold references through the boxed type
 * %REDIS_LOCK_TYPE_RW_LOCK. See [method@Redislock.RWLock.unref].
 *
 * Returns: (transfer full): @lock, with one more reference.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisRWLock *redis_rw_lock_ref (RedisRWLock *lock);

/**
 * redis_rw_lock_unref: (skip)
 * @lock: (transfer full) (nullable): a read-write lock
 *
 * Drops a reference. Keep one for as long as you call functions on the lock.
 * See [method@Redislock.RWLock.ref].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_rw_lock_unref (RedisRWLock *lock);

/**
 * redis_rw_lock_get_name:
 * @lock: a read-write lock
 *
 * Gives the name of the read-write lock.
 *
 * Returns: (transfer none): the name given to [method@Redislock.LockRegistry.obtain_rw].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_rw_lock_get_name (RedisRWLock *lock);

/**
 * redis_rw_lock_try_read_lock_for:
 * @lock: a read-write lock
 * @wait_ms: total wait in milliseconds, local and Redis together; < 0 waits forever, 0
 *   makes one attempt
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @error: return location for a #GError
 *
 * Takes a read hold for the calling thread. Many threads of any process may read at
 * once; none while a writer holds the lock, and no new reader while a writer waits
 * for it (in any process), so writers are not starved. Re-entrant: a thread that
 * reads may read again (the count rises, Redis is not contacted), and so may the
 * thread that writes (see [method@Redislock.RWLock.write_unlock] for the downgrade). The first
 * reading thread of the registry takes its reader lease in Redis; the others share it
 * without a request of their own.
 *
 * Returns: %TRUE = now reading; %FALSE with @error unset = not within @wait_ms;
 *   %FALSE with @error set = failure (Redis, cancelled, closed, forked;
 *   %REDIS_LOCK_ERROR_DEADLOCK when this wait closes a cycle of waits;
 *   %REDIS_LOCK_ERROR_INVALID on a registry whose store cannot hold read-write locks,
 *   the quorum store).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_try_read_lock_for (RedisRWLock *lock,
                                                            gint64 wait_ms,
                                                            GCancellable *cancellable,
                                                            GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_rw_lock_read_unlock:
 * @lock: a read-write lock
 * @error: return location for a #GError
 *
 * Releases one read hold of the calling thread. The last reading thread of the
 * registry releases the reader lease in Redis (and notifies waiting writers). The
 * local hold is released in every case where the caller had one.
 * See [method@Redislock.RWLock.try_read_lock_for] and [Read-write locks](rwlock.html).
 *
 * Returns: %TRUE on success; %FALSE with %REDIS_LOCK_ERROR_NOT_OWNER (the calling thread
 *   does not read; nothing changes), %REDIS_LOCK_ERROR_LEASE_LOST (the thread's
 *   outermost read hold ends and the reader lease had been lost: the data it protected
 *   may have changed), a Redis error, %REDIS_LOCK_ERROR_CLOSED or
 *   %REDIS_LOCK_ERROR_FORKED.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_read_unlock (RedisRWLock *lock, GError **error);

/**
 * redis_rw_lock_try_write_lock_for:
 * @lock: a read-write lock
 * @wait_ms: as for [method@Redislock.RWLock.try_read_lock_for]
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @error: return location for a #GError
 *
 * Takes the write hold for the calling thread: no other thread of any process reads or
 * writes meanwhile. Re-entrant. While it waits, new readers of every process wait
 * behind it. A thread that reads (and does not write) cannot upgrade: that would
 * deadlock two upgraders, so it fails at once with %REDIS_LOCK_ERROR_INVALID.
 *
 * Returns: %TRUE = now writing; %FALSE with @error unset = not within @wait_ms;
 *   %FALSE with @error set = failure (%REDIS_LOCK_ERROR_INVALID for an upgrade or a
 *   quorum store, %REDIS_LOCK_ERROR_DEADLOCK when this wait closes a cycle of waits,
 *   Redis, cancelled, closed, forked).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_try_write_lock_for (RedisRWLock *lock,
                                                             gint64 wait_ms,
                                                             GCancellable *cancellable,
                                                             GError **error) G_GNUC_WARN_UNUSED_RESULT;

/**
 * redis_rw_lock_write_unlock:
 * @lock: a read-write lock
 * @error: return location for a #GError
 *
 * Releases one write hold of the calling thread. The outermost one releases the writer
 * lease. When the thread also reads (it took read holds while writing), it keeps
 * reading: the registry's reader lease is taken before the writer lease is released
 * (a downgrade), so no writer of another process can come between.
 * See [method@Redislock.RWLock.try_write_lock_for] and [Read-write locks](rwlock.html).
 *
 * Returns: %TRUE on success; %FALSE with %REDIS_LOCK_ERROR_NOT_OWNER (the calling thread
 *   does not write; nothing changes), %REDIS_LOCK_ERROR_LEASE_LOST, a Redis error (a
 *   downgrade whose reader lease could not be taken also ends the thread's read holds),
 *   %REDIS_LOCK_ERROR_CLOSED or %REDIS_LOCK_ERROR_FORKED. The write hold is released in
 *   every case where the caller had one.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_write_unlock (RedisRWLock *lock, GError **error);

/**
 * redis_rw_lock_read_lock_async:
 * @lock: a read-write lock
 * @wait_ms: as for [method@Redislock.RWLock.try_read_lock_for]
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @callback: (scope async): called in the thread-default main context of the calling
 *   thread when the call ends
 * @user_data: (closure): data for @callback
 *
 * [method@Redislock.RWLock.try_read_lock_for] without blocking: the read hold, when taken, is the
 * calling thread's, exactly as after the blocking call (release it with
 * [method@Redislock.RWLock.read_unlock] from that thread). A pending call blocks no thread: it
 * waits in that main context and sends its Redis requests from the registry's worker
 * pool; the callback runs in the calling thread's thread-default main
 * context (which must be running). Call [method@Redislock.RWLock.read_lock_finish] there. A call
 * that completed with %TRUE keeps its hold even if @cancellable was cancelled
 * meanwhile.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_rw_lock_read_lock_async (RedisRWLock *lock,
                                                      gint64 wait_ms,
                                                      GCancellable *cancellable,
                                                      GAsyncReadyCallback callback,
                                                      gpointer user_data);

/**
 * redis_rw_lock_read_lock_finish:
 * @lock: the lock given to [method@Redislock.RWLock.read_lock_async]
 * @result: the #GAsyncResult given to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Redislock.RWLock.read_lock_async].
 *
 * Returns: as [method@Redislock.RWLock.try_read_lock_for]: %TRUE = the calling thread of
 *   [method@Redislock.RWLock.read_lock_async] reads now; %FALSE with @error unset = not within
 *   its wait; %FALSE with @error set = failure.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_read_lock_finish (RedisRWLock *lock,
                                                           GAsyncResult *result,
                                                           GError **error);

/**
 * redis_rw_lock_write_lock_async:
 * @lock: a read-write lock
 * @wait_ms: as for [method@Redislock.RWLock.try_write_lock_for]
 * @cancellable: (nullable): cancels the wait with %G_IO_ERROR_CANCELLED
 * @callback: (scope async): called in the thread-default main context of the calling
 *   thread when the call ends
 * @user_data: (closure): data for @callback
 *
 * [method@Redislock.RWLock.try_write_lock_for] without blocking, as
 * [method@Redislock.RWLock.read_lock_async] is for reading: the write hold, when taken, is the
 * calling thread's (release it with [method@Redislock.RWLock.write_unlock] from that thread). A
 * calling thread that reads gets %REDIS_LOCK_ERROR_INVALID (no upgrade).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_rw_lock_write_lock_async (RedisRWLock *lock,
                                                       gint64 wait_ms,
                                                       GCancellable *cancellable,
                                                       GAsyncReadyCallback callback,
                                                       gpointer user_data);

/**
 * redis_rw_lock_write_lock_finish:
 * @lock: the lock given to [method@Redislock.RWLock.write_lock_async]
 * @result: the #GAsyncResult given to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Redislock.RWLock.write_lock_async].
 *
 * Returns: as [method@Redislock.RWLock.try_write_lock_for]: %TRUE = the calling thread of
 *   [method@Redislock.RWLock.write_lock_async] writes now; %FALSE with @error unset = not within
 *   its wait; %FALSE with @error set = failure.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_write_lock_finish (RedisRWLock *lock,
                                                            GAsyncResult *result,
                                                            GError **error);

/**
 * redis_rw_lock_read_unlock_async:
 * @lock: a read-write lock
 * @cancellable: (nullable): a #GCancellable: when cancelled before the call, nothing
 *   changes and the call fails with %G_IO_ERROR_CANCELLED; once the hold ended, the
 *   release is made all the same
 * @callback: (scope async): called in the thread-default main context of the calling
 *   thread when the call ends
 * @user_data: (closure): data for @callback
 *
 * redis_rw_lock_read_unlock() without blocking: one read hold of the calling thread
 * ends at once, in this call (the thread reads no more when it was its outermost
 * one); when the registry's reader lease is to be given back (the last reading
 * thread), the request is sent from a worker of the registry and @callback runs once
 * it is answered, in the calling thread's thread-default main context (which must be
 * running). Call redis_rw_lock_read_unlock_finish() there.
 *
 * Its blocking twin is [method@Redislock.RWLock.read_unlock].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_rw_lock_read_unlock_async (RedisRWLock *lock,
                                                                  GCancellable *cancellable,
                                                                  GAsyncReadyCallback callback,
                                                                  gpointer user_data);

/**
 * redis_rw_lock_read_unlock_finish:
 * @lock: the lock given to redis_rw_lock_read_unlock_async()
 * @result: the #GAsyncResult given to the callback
 * @error: return location for a #GError
 *
 * Finishes redis_rw_lock_read_unlock_async().
 *
 * Returns: as redis_rw_lock_read_unlock().
 *
 * See [method@Redislock.RWLock.read_unlock_async].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_read_unlock_finish (RedisRWLock *lock,
                                                                       GAsyncResult *result,
                                                                       GError **error);

/**
 * redis_rw_lock_write_unlock_async:
 * @lock: a read-write lock
 * @cancellable: (nullable): as for redis_rw_lock_read_unlock_async()
 * @callback: (scope async): called in the thread-default main context of the calling
 *   thread when the call ends
 * @user_data: (closure): data for @callback
 *
 * redis_rw_lock_write_unlock() without blocking: one write hold of the calling thread
 * ends at once, in this call. The outermost one's writer lease is given back from a
 * worker of the registry; until @callback runs, the lock stays written (by the call:
 * the calling thread writes no more, and a write lock it asks for meanwhile waits for
 * the release instead of counting as a re-entry). Call
 * redis_rw_lock_write_unlock_finish() in the calling thread's thread-default main
 * context. A thread that also reads ends its last write hold with a downgrade, which
 * only the blocking redis_rw_lock_write_unlock() makes: here it fails with
 * %REDIS_LOCK_ERROR_INVALID and nothing changes.
 *
 * Its blocking twin is [method@Redislock.RWLock.write_unlock].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_rw_lock_write_unlock_async (RedisRWLock *lock,
                                                                   GCancellable *cancellable,
                                                                   GAsyncReadyCallback callback,
                                                                   gpointer user_data);

/**
 * redis_rw_lock_write_unlock_finish:
 * @lock: the lock given to redis_rw_lock_write_unlock_async()
 * @result: the #GAsyncResult given to the callback
 * @error: return location for a #GError
 *
 * Finishes redis_rw_lock_write_unlock_async().
 *
 * Returns: as redis_rw_lock_write_unlock().
 *
 * See [method@Redislock.RWLock.write_unlock_async].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_write_unlock_finish (RedisRWLock *lock,
                                                                        GAsyncResult *result,
                                                                        GError **error);

/**
 * redis_rw_lock_is_lease_lost:
 * @lock: a read-write lock
 *
 * Whether the lease behind the calling thread's hold (the writer lease when it writes,
 * else the registry's reader lease) was lost: it expired, another owner took it, or
 * renewal could not confirm it in time. Stays %TRUE until the hold ends.
 * See [method@Redislock.RWLock.get_lease_cancellable].
 *
 * Returns: %TRUE when lost; %FALSE when not, or when the thread holds nothing.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_rw_lock_is_lease_lost (RedisRWLock *lock);

/**
 * redis_rw_lock_get_lease_cancellable:
 * @lock: a read-write lock
 *
 * The cancellable of the lease behind the calling thread's hold (as for
 * [method@Redislock.RWLock.is_lease_lost]), cancelled when that lease is lost: pass it to the
 * work done under the lock.
 *
 * Returns: (transfer none) (nullable): the cancellable, valid while the calling thread
 *   holds the lock; %NULL when it holds nothing.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GCancellable *redis_rw_lock_get_lease_cancellable (RedisRWLock *lock);

/**
 * RedisRWLockReaderLocker: (skip)
 *
 * Holds a read-write lock for reading for a scope, as #GRWLockReaderLocker does a
 * #GRWLock: redis_rw_lock_reader_locker_new() takes the read hold,
 * redis_rw_lock_reader_locker_free() ends it. Use with
 * g_autoptr(RedisRWLockReaderLocker). Not introspected: it is a C scope guard;
 * bindings call redis_rw_lock_try_read_lock_for() and redis_rw_lock_read_unlock().
 *
 * Since: 0.1
 */
typedef struct _RedisRWLockReaderLocker RedisRWLockReaderLocker;

/**
 * redis_rw_lock_reader_locker_new: (skip)
 * @lock: a read-write lock
 * @error: return location for a #GError
 *
 * Takes a read hold for the calling thread, waiting as long as it takes:
 * redis_rw_lock_try_read_lock_for() with a wait of -1 and no cancellable.
 *
 * Returns: (transfer full) (nullable): a locker, or %NULL with @error set (the read
 *   hold was not taken).
 *
 * It holds as [method@Redislock.RWLock.try_read_lock_for] does, waiting forever;
 * [method@Redislock.RWLockReaderLocker.free] ends the hold.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisRWLockReaderLocker *redis_rw_lock_reader_locker_new (RedisRWLock *lock,
                                                                                     GError **error);

/**
 * redis_rw_lock_reader_locker_free: (skip)
 * @locker: (transfer full) (nullable): a reader locker
 *
 * Ends the read hold with redis_rw_lock_read_unlock(); a failure (for example a lost
 * reader lease) is logged with g_warning().
 *
 * Thread safety: call it on the thread that called redis_rw_lock_reader_locker_new(),
 * as a g_autoptr() scope does: the hold is that thread's.
 *
 * See [method@Redislock.RWLock.reader_locker_new] and
 * [method@Redislock.RWLock.read_unlock].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_rw_lock_reader_locker_free (RedisRWLockReaderLocker *locker);

/**
 * RedisRWLockWriterLocker: (skip)
 *
 * Holds a read-write lock for writing for a scope, as #GRWLockWriterLocker does a
 * #GRWLock: redis_rw_lock_writer_locker_new() takes the write hold,
 * redis_rw_lock_writer_locker_free() ends it. Use with
 * g_autoptr(RedisRWLockWriterLocker). Not introspected, as
 * #RedisRWLockReaderLocker.
 *
 * Since: 0.1
 */
typedef struct _RedisRWLockWriterLocker RedisRWLockWriterLocker;

/**
 * redis_rw_lock_writer_locker_new: (skip)
 * @lock: a read-write lock
 * @error: return location for a #GError
 *
 * Takes the write hold for the calling thread, waiting as long as it takes:
 * redis_rw_lock_try_write_lock_for() with a wait of -1 and no cancellable (a thread
 * that reads cannot upgrade: %REDIS_LOCK_ERROR_INVALID).
 *
 * Returns: (transfer full) (nullable): a locker, or %NULL with @error set (the write
 *   hold was not taken).
 *
 * It holds as [method@Redislock.RWLock.try_write_lock_for] does, waiting forever;
 * [method@Redislock.RWLockWriterLocker.free] ends the hold.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisRWLockWriterLocker *redis_rw_lock_writer_locker_new (RedisRWLock *lock,
                                                                                     GError **error);

/**
 * redis_rw_lock_writer_locker_free: (skip)
 * @locker: (transfer full) (nullable): a writer locker
 *
 * Ends the write hold with redis_rw_lock_write_unlock(); a failure (for example a
 * lost writer lease) is logged with g_warning().
 *
 * Thread safety: call it on the thread that called redis_rw_lock_writer_locker_new().
 *
 * See [method@Redislock.RWLock.writer_locker_new] and
 * [method@Redislock.RWLock.write_unlock].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_rw_lock_writer_locker_free (RedisRWLockWriterLocker *locker);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisRWLock, redis_rw_lock_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisRWLockReaderLocker, redis_rw_lock_reader_locker_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisRWLockWriterLocker, redis_rw_lock_writer_locker_free)

G_END_DECLS

#endif /* REDIS_LOCK_RWLOCK_H */
