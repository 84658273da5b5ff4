/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-driver.h: one way for a member of the lock family to run an asynchronous
 * acquisition: the acquisition machine (acquire.h) stepped in the caller's main
 * context, each attempt a job on the registry's worker pool (async-pool.h), each sleep
 * a timer plus a sleep on an anchor lock's notification number, cancellation and close
 * ending it. A member supplies only what an attempt is and what the caller gets at the
 * end, so its _async call is a thin driver over this.
 */
#ifndef RL_ASYNC_DRIVER_H
#define RL_ASYNC_DRIVER_H

#include "acquire.h"
#include "internal.h"

typedef struct
{
  /* On a worker: one attempt for the member's call @data, reported to @acq (as
   * rl_lock_attempt_step() does); the error of a failed attempt in @error. */
  RlAcquireAction (*attempt) (gpointer data, RlAcquire *acq, gboolean pubsub,
                              gboolean bounded, GError **error);
  /* In the caller's context, once: the acquisition ended, @taken or not (@error: why it
   * failed, owned by the callee; NULL with !@taken: not in time). Frees @data. */
  void (*done) (gpointer data, gboolean taken, GError *error);
} RlAsyncDriverClass;

/* Starts an acquisition for @data in the calling thread's thread-default main context:
 * it waits up to @wait_ms (< 0: without end) and sleeps on @anchor, whose registry's
 * workers make the attempts; @cancellable ends the wait. Calls klass->done() in that
 * context, never from within this call unless the call cannot be set up. */
void rl_async_drive (RedisLock *anchor, gint64 wait_ms, GCancellable *cancellable,
                     const RlAsyncDriverClass *klass, gpointer data);

#endif /* RL_ASYNC_DRIVER_H */
