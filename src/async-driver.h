/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-driver.h: one way for a member of the lock family to run an asynchronous
 * acquisition: an optional local level first (the member's own wait among the threads
 * and calls of this process, looked at again whenever the member pokes the call), then
 * the acquisition machine (acquire.h) stepped in the caller's main context, each attempt
 * a job on the registry's worker pool (async-pool.h), each sleep a timer plus a sleep on
 * an anchor lock's notification number, cancellation and close ending it. A member
 * supplies only what its local step and an attempt are and what the caller gets at the
 * end, so its _async call is a thin driver over this.
 */
#ifndef RL_ASYNC_DRIVER_H
#define RL_ASYNC_DRIVER_H

#include "acquire.h"
#include "internal.h"

/* What a member's local step says. */
typedef enum
{
  RL_ASYNC_LOCAL_WAIT,  /* not yet: the member queued the call's waiter and pokes it when
                           its local state changes */
  RL_ASYNC_LOCAL_JOB,   /* a store request first: local_job() on a worker, then the local
                           step again */
  RL_ASYNC_LOCAL_GO,    /* the local level let the call in: the machine starts */
  RL_ASYNC_LOCAL_TAKEN, /* taken without the store: done */
  RL_ASYNC_LOCAL_ENDED, /* the call gave up (the member undid its part): done, not taken */
} RlAsyncLocal;

typedef struct
{
  /* Optional (NULL: the machine starts at once). In the caller's context: the local
   * step, at the start and whenever the call is poked while it waits there. @waiter
   * is the call's, for the member to queue and poke (RlLockWaiter.poke; its granted is
   * unused); @may_wait: FALSE when the call must end rather than wait (closed,
   * cancelled, the deadline passed), the member then answering ENDED. */
  RlAsyncLocal (*local) (gpointer data, RlLockWaiter *waiter, gboolean may_wait);
  /* On a worker, for RL_ASYNC_LOCAL_JOB. */
  void (*local_job) (gpointer data);
  /* On a worker: one attempt for the member's call @data, reported to @acq (as
   * rl_lock_attempt_step() does); the error of a failed attempt in @error. */
  RlAcquireAction (*attempt) (gpointer data, RlAcquire *acq, gboolean pubsub,
                              gboolean bounded, GError **error);
  /* Optional. On a worker, when the machine ended without taking it, before done():
   * what the member must still ask the store. */
  void (*settle) (gpointer data);
  /* In the caller's context, once: the acquisition ended, @taken or not (@error: why it
   * failed, owned by the callee; NULL with !@taken: not in time). Frees @data. */
  void (*done) (gpointer data, gboolean taken, GError *error);
} RlAsyncDriverClass;

/* Defines `static const RlAsyncDriverClass PREFIX_driver` with the entries every
 * member has, PREFIX_attempt and PREFIX_done, so that one lacking is a compile error;
 * the optional ones (local, local_job, settle) are named in the arguments after PREFIX,
 * as designated initializers (`.local = NULL` for a member without a local level). */
#define RL_DEFINE_ASYNC_DRIVER(PREFIX, ...)                                                        \
  static const RlAsyncDriverClass PREFIX##_driver = {                                              \
    .attempt = PREFIX##_attempt,                                                                   \
    .done = PREFIX##_done,                                                                         \
    __VA_ARGS__                                                                                    \
  }

/* Starts an acquisition for @data in the calling thread's thread-default main context:
 * it waits up to @wait_ms (< 0: without end), locally and in the store together, and
 * sleeps on @anchor, whose registry's workers make the attempts; @cancellable ends the
 * wait. The member keeps @anchor (and so its registry) alive until done(). Calls
 * klass->done() in that context, never from within this call unless the call cannot be
 * set up or the local step ends it at once. */
void rl_async_drive (RedisLock *anchor, gint64 wait_ms, GCancellable *cancellable,
                     const RlAsyncDriverClass *klass, gpointer data);

#endif /* RL_ASYNC_DRIVER_H */
