/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* wake-pipe.h: the wake-up pipe of a thread that polls sockets (the notification
 * subscribers, notify.c and notify-shard.c, and the Sentinel watcher, sentinel.c):
 * such a thread polls the pipe's read end with its sockets, and another thread writes
 * a byte to stop it or hand it news at once. Both ends are non-blocking, so a writer
 * never waits and the reader drains it in one go. Inline: a few lines each, shared
 * rather than written twice.
 */
#ifndef RL_WAKE_PIPE_H
#define RL_WAKE_PIPE_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <glib-unix.h>

#include "sync.h"

/* Opens @wake (both ends non-blocking and close-on-exec) and starts @main (@data) in
 * *@thread; FALSE when either failed. */
static inline gboolean
rl_wake_pipe_start (int wake[2], pthread_t *thread, void *(*main) (void *), void *data)
{
  return g_unix_open_pipe (wake, FD_CLOEXEC, NULL) && g_unix_set_fd_nonblocking (wake[0], TRUE, NULL)
         && g_unix_set_fd_nonblocking (wake[1], TRUE, NULL)
         && pthread_create (thread, NULL, main, data) == 0;
}

/* Writes @byte to wake[1]. */
static inline void
rl_wake_pipe_write (int wake[2], char byte)
{
  ssize_t rc;

  do
    rc = write (wake[1], &byte, 1);
  while (rc < 0 && errno == EINTR);
}

/* Reads everything written to wake[0] so far. */
static inline void
rl_wake_pipe_drain (int wake[2])
{
  char buf[16];

  while (read (wake[0], buf, sizeof buf) > 0)
    ;
}

/* Closes both ends, when open (-1: not). */
static inline void
rl_wake_pipe_close (int wake[2])
{
  if (wake[0] >= 0)
    {
      close (wake[0]);
      close (wake[1]);
    }
}

/* A thread that polls its pipe: what starting and joining it needs. Its owner's mutex
 * guards started and joined. */
typedef struct
{
  int wake[2]; /* -1 until started */
  pthread_t thread;
  gboolean started;
  gboolean joined;
} RlWakeThread;

static inline void
rl_wake_thread_init (RlWakeThread *t)
{
  t->wake[0] = t->wake[1] = -1;
}

/* Starts @main (@data) with its pipe open; FALSE when it could not. */
static inline gboolean
rl_wake_thread_start (RlWakeThread *t, void *(*main) (void *), void *data)
{
  t->started = rl_wake_pipe_start (t->wake, &t->thread, main, data);
  return t->started;
}

/* Sets *@stop under @mutex (waking the waiters on @cond, if not NULL), then wakes the
 * thread and joins it, once; idempotent. */
static inline void
rl_wake_thread_stop (RlWakeThread *t, RlMutex *mutex, RlCond *cond, gboolean *stop)
{
  gboolean join;

  rl_mutex_lock (mutex);
  *stop = TRUE;
  join = t->started && !t->joined;
  t->joined = TRUE;
  if (cond != NULL)
    rl_cond_broadcast (cond);
  rl_mutex_unlock (mutex);
  if (join)
    {
      rl_wake_pipe_write (t->wake, 'x');
      pthread_join (t->thread, NULL);
    }
}

#endif /* RL_WAKE_PIPE_H */
