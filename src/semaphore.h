/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore.h: semaphore.c's steps, for the drivers of its acquisition other than the
 * blocking call, and the permit's reference counting behind its boxed type (types.c).
 */
#ifndef RL_SEMAPHORE_H
#define RL_SEMAPHORE_H

#include "internal.h"

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
