/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-error.h: the error domain and codes of redislock.
 *
 * Every call that can fail takes a GError ** last, and every failure is one GError in
 * the REDIS_LOCK_ERROR domain, except cancellation, which is G_IO_ERROR_CANCELLED as in
 * every GIO API.
 */
#ifndef REDIS_LOCK_ERROR_H
#define REDIS_LOCK_ERROR_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

#include <glib-object.h>
#include <redislock/redislock-macros.h>
#include <redislock/redislock-version.h>

G_BEGIN_DECLS

/**
 * REDIS_LOCK_ERROR:
 * The error domain of redislock.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_ERROR (redis_lock_error_quark ())

/**
 * RedisLockErrorCode:
 * @REDIS_LOCK_ERROR_INVALID: bad argument: NULL, empty or oversized name, bad URL, bad
 *   option value.
 * @REDIS_LOCK_ERROR_CONNECTION: Redis unreachable, I/O error, or a command timed out.
 * @REDIS_LOCK_ERROR_REDIS: Redis replied with an error: authentication refused, wrong
 *   type, script error.
 * @REDIS_LOCK_ERROR_NOT_OWNER: unlock by a thread that does not hold the lock; renew of a
 *   lock that no thread of this registry holds.
 * @REDIS_LOCK_ERROR_LEASE_LOST: the Redis lease expired or now belongs to another owner.
 * @REDIS_LOCK_ERROR_CACHE_FULL: [method@Redislock.LockRegistry.obtain] found the cache at
 *   capacity and every cached lock in use.
 * @REDIS_LOCK_ERROR_FORKED: a registry was used in a child process after fork().
 * @REDIS_LOCK_ERROR_CLOSED: the registry was closed.
 * @REDIS_LOCK_ERROR_NOT_REPLICATED: fewer replicas than
 *   [method@Redislock.LockRegistry.set_min_replicas] asks for acknowledged the acquisition within
 *   its timeout; the lease was released again.
 * @REDIS_LOCK_ERROR_DEADLOCK: this wait closes a cycle of waits (a thread holds a lock
 *   another waits for while it waits for one that other holds, across any number of
 *   threads, registries and processes of one deployment): of the waiters of the
 *   cycle, the one whose wait began last fails with it, its message naming the cycle,
 *   and the others go on (see [method@Redislock.LockRegistry.set_deadlock_detection]).
 *   Since: 0.1
 *
 * Error codes of the %REDIS_LOCK_ERROR domain.
 *
 * Since: 0.1
 */
typedef enum
{
  REDIS_LOCK_ERROR_INVALID,
  REDIS_LOCK_ERROR_CONNECTION,
  REDIS_LOCK_ERROR_REDIS,
  REDIS_LOCK_ERROR_NOT_OWNER,
  REDIS_LOCK_ERROR_LEASE_LOST,
  REDIS_LOCK_ERROR_CACHE_FULL,
  REDIS_LOCK_ERROR_FORKED,
  REDIS_LOCK_ERROR_CLOSED,
  REDIS_LOCK_ERROR_NOT_REPLICATED,
  REDIS_LOCK_ERROR_DEADLOCK,
} RedisLockErrorCode;

/**
 * REDIS_LOCK_TYPE_ERROR:
 *
 * The #GType of #RedisLockErrorCode, a #GEnum. It is named after the error domain
 * rather than the enumeration, as GLib names the types of its error enumerations, so
 * that introspection pairs the codes with %REDIS_LOCK_ERROR.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_ERROR (redis_lock_error_get_type ())

/**
 * redis_lock_error_get_type:
 *
 * The #GType of the error codes, for bindings and #GValue.
 *
 * Returns: the #GType of #RedisLockErrorCode, %REDIS_LOCK_TYPE_ERROR.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_error_get_type (void) G_GNUC_CONST;

/**
 * redis_lock_error_quark:
 *
 * The error domain of redislock, as a #GQuark; use %REDIS_LOCK_ERROR.
 * See [error@Redislock.LockErrorCode].
 *
 * Returns: the quark of the %REDIS_LOCK_ERROR domain.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GQuark redis_lock_error_quark (void);

G_END_DECLS

#endif /* REDIS_LOCK_ERROR_H */
