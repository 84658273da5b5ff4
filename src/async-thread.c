/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-thread.c: one blocking job on a thread of its own, for the _async calls whose
 * work is a blocking call of this library (a set of locks, a registry's creation),
 * its end reported in the caller's main context (async-thread.h).
 *
 * The job's outcome reaches the context as async-driver.c's do: the thread writes it
 * into the call, then one byte to the call's pipe, which a source of the context reads
 * before it touches the outcome. The thread's start and the pipe are edges
 * ThreadSanitizer sees (GLib's own locks, behind GTask's pool and
 * g_main_context_invoke(), it cannot), so no mutex guards the call.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <unistd.h>

#include "async-thread.h"

typedef struct
{
  RlAsyncThreadFunc func;
  RlAsyncThreadDone done;
  gpointer data;
  int pipe[2];
  GSource *source;
  gboolean ok;
  GError *error;
} ThreadCall;

static gboolean
on_ended (gint fd, GIOCondition condition, gpointer user_data)
{
  ThreadCall *call = user_data;
  char byte;
  gssize n;

  (void) condition;
  do
    n = read (fd, &byte, 1);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN)
    return G_SOURCE_CONTINUE;
  g_source_destroy (call->source);
  g_source_unref (call->source);
  close (call->pipe[0]);
  close (call->pipe[1]);
  call->done (call->data, call->ok, call->error);
  g_free (call);
  return G_SOURCE_REMOVE;
}

static gpointer
thread_main (gpointer data)
{
  ThreadCall *call = data;
  char byte = 'd';
  gssize n;

  call->ok = call->func (call->data, &call->error);
  /* The last thing this thread does with the call. */
  do
    n = write (call->pipe[1], &byte, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1)
    g_error ("async-thread: cannot report a job's end: %s", g_strerror (errno));
  return NULL;
}

void
rl_async_thread (const char *name, RlAsyncThreadFunc func, RlAsyncThreadDone done,
                 gpointer data)
{
  g_autoptr (GMainContext) context = g_main_context_ref_thread_default ();
  g_autoptr (GError) error = NULL;
  ThreadCall *call = g_new0 (ThreadCall, 1);

  call->func = func;
  call->done = done;
  call->data = data;
  if (!g_unix_open_pipe (call->pipe, FD_CLOEXEC, &error)
      || !g_unix_set_fd_nonblocking (call->pipe[0], TRUE, &error))
    g_error ("async-thread: cannot make a pipe: %s", error->message);
  call->source = g_unix_fd_source_new (call->pipe[0], G_IO_IN);
  g_source_set_callback (call->source, G_SOURCE_FUNC (on_ended), call, NULL);
  g_source_set_static_name (call->source, "redislock blocking job");
  g_source_attach (call->source, context);
  g_thread_unref (g_thread_new (name, thread_main, call));
}
