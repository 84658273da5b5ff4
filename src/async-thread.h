/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-thread.h: one blocking job on a thread of its own, its end reported in the
 * caller's main context (async-thread.c). */
#ifndef RL_ASYNC_THREAD_H
#define RL_ASYNC_THREAD_H

#include <glib.h>

/* The job: runs on its own thread; TRUE, or FALSE with or without @error. */
typedef gboolean (*RlAsyncThreadFunc) (gpointer data, GError **error);
/* Its end, in the caller's context: the job's outcome (@error is the callee's). */
typedef void (*RlAsyncThreadDone) (gpointer data, gboolean ok, GError *error);

/* Runs @func (@data) on a new thread named @name, then @done (@data, …) in the calling
 * thread's thread-default main context, which must be running. */
void rl_async_thread (const char *name, RlAsyncThreadFunc func, RlAsyncThreadDone done,
                      gpointer data);

#endif /* RL_ASYNC_THREAD_H */
