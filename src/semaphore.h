/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore.h: semaphore.c's steps, for the drivers of its acquisition other than the
 * blocking call, and the permit's reference counting behind its boxed type (types.c).
 */
#ifndef RL_SEMAPHORE_H
#define RL_SEMAPHORE_H

#include "internal.h"

/* The size check's shortcut. A permit taken through the store's full check (the size
 * compared, the first free permit searched: one script on Redis) lets this process,
 * for RL_SEMAPHORE_VERIFIED_MS from the moment it asked, take the permit it gave back
 * last by the cheapest request there is (a plain SET NX PX on Redis), without the size.
 * The size cannot change meanwhile: a store keeps a record of the size it checked for
 * RL_SEMAPHORE_RECORD_MS (longer, so that it outlives every shortcut it allows), and
 * refuses to store another size while the record stands, even when the size itself was
 * deleted. */
#define RL_SEMAPHORE_VERIFIED_MS 10000
#define RL_SEMAPHORE_RECORD_MS (2 * RL_SEMAPHORE_VERIFIED_MS)

/* The permit's references: the holder's (given back by redis_permit_release()) and a
 * binding's copies; the last one gives an unreleased permit back. */
RedisPermit *rl_permit_ref (RedisPermit *permit);
void rl_permit_unref (RedisPermit *permit);

/* FALSE with CLOSED, FORKED or CANCELLED when an acquisition may not start. */
gboolean rl_semaphore_begin (RedisSemaphore *semaphore, GCancellable *cancellable,
                             GError **error);
/* The cached lock of the semaphore's key: its notification number moves when a permit
 * is released, and close wakes its sleepers (rl_lock_sleep() and the queued form). */
RedisLock *rl_semaphore_anchor (RedisSemaphore *semaphore);
/* The machine's RL_ACQUIRE_ATTEMPT for a permit: one request, reported to @acq; a
 * permit taken is in *@permit (its lease in the table). As rl_lock_attempt_step(). */
RlAcquireAction rl_semaphore_attempt_step (RedisSemaphore *semaphore, RlAcquire *acq,
                                           gboolean pubsub, gboolean bounded, gint64 ttl_ms,
                                           RedisPermit **permit, GError **error);

#endif /* RL_SEMAPHORE_H */
