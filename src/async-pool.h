/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-pool.h: the registry's bounded worker pool, on which every asynchronous call of
 * the lock family (lock-async.c, semaphore-async.c) runs the store requests that block,
 * so that they never run in the caller's main context.
 *
 * A job is a structure the caller embeds in its call (RlAsyncJob) and pushes with the
 * reference it needs for the run: a worker pops it and calls its run function, which
 * owns that reference, and touches the job no more afterwards. A job waits on one
 * server, its lane (the store's lane of the job's key: in a Cluster, the master of its
 * slot): at most RL_ASYNC_THREADS jobs of one lane run at once, and a registry has at
 * most RL_ASYNC_MAX_THREADS workers, which leave after RL_ASYNC_IDLE_MS idle. So no
 * thread is made per call or per attempt, a call that sleeps between attempts holds
 * none, and a server that does not answer ties up the workers of its own lane only:
 * never another registry's, nor a call of the same registry for a key that another
 * server serves.
 */
#ifndef RL_ASYNC_POOL_H
#define RL_ASYNC_POOL_H

#include "acquire.h"
#include "internal.h"

#define RL_ASYNC_THREADS 4
#define RL_ASYNC_MAX_THREADS 16
#define RL_ASYNC_IDLE_MS 2000

typedef struct _RlAsyncJob RlAsyncJob;

struct _RlAsyncJob
{
  void (*run) (RlAsyncJob *job); /* on a worker; set once by the job's owner */
  gint64 queued_at;              /* atomic: set by rl_async_pool_push() */
  gconstpointer lane;            /* set by rl_async_pool_push(), under the pool's mutex */
};

/* Queues @job, whose requests are for @key, on @registry's pool (made on first use),
 * starting a worker when none is idle, the job's lane has room and fewer than
 * RL_ASYNC_MAX_THREADS run. Any thread; takes the pool's mutex, and the store's
 * topology's for the lane. */
void rl_async_pool_push (RedisLockRegistry *registry, RlAsyncJob *job, const char *key);

/* Whether @job, about to make the first attempt of @acq for a call with a bounded wait,
 * was queued before the deadline and started only after it: every worker of the
 * registry was blocked on an earlier request (a server that does not answer). Having
 * never asked the store, the call cannot say "held": it fails with CONNECTION. */
gboolean rl_async_job_late (const RlAsyncJob *job, const RlAcquire *acq, gboolean bounded);

#endif /* RL_ASYNC_POOL_H */
