/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-once.h: one blocking call of the lock family (a release: of a permit, of a
 * read-write lock's lease) run once on the registry's worker pool, its outcome
 * delivered through a GTask in the caller's thread-default main context, so that an
 * _async release never blocks the loop that asked for it.
 *
 * It is async-driver.c with nothing to wait for: the local step asks for one job, the
 * job runs the member's function on a worker, and the next local step ends the call;
 * no timer, no sleep, no attempt of the acquisition machine.
 */
#ifndef RL_ASYNC_ONCE_H
#define RL_ASYNC_ONCE_H

#include "internal.h"

/* On a worker: the blocking call; FALSE with @error on failure. */
typedef gboolean (*RlAsyncOnceFunc) (gpointer data, GError **error);

/* Runs @func (@data) on a worker of @anchor's registry (its lane: @anchor's key's) and
 * returns its outcome with g_task_return_boolean() or g_task_return_error() on @task
 * (whose reference it takes) in the calling thread's thread-default main context;
 * then @free_data (@data) there. The caller keeps @anchor alive until then (through
 * @data). */
void rl_async_once (RedisLock *anchor, RlAsyncOnceFunc func, gpointer data,
                    GDestroyNotify free_data, GTask *task);

#endif /* RL_ASYNC_ONCE_H */
