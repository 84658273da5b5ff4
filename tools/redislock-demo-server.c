/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-demo-server.c: the throwaway redis-server of `redislock demo`.
 *
 * When no server is given, the demo starts redis-server itself: on a Unix socket in a
 * private temporary directory, no TCP port, no persistence, and stops it and removes
 * the directory when the sale is over. Kept in the tool rather than taken from the
 * testing library (libredislock-testing), so that the installed command needs no test
 * utilities: this is all the demo wants of a server.
 */
#include "config.h"

#include "redislock-tool.h"

#include <errno.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long the server has to answer PING. */
#define DEMO_SERVER_START_US (10 * G_USEC_PER_SEC)

struct _DemoServer
{
  GPid pid;
  char *dir;
  char *socket_path;
  char *url;
};

/* redis-server from PATH, else where Debian installs it (/usr/sbin is not in every
 * user's PATH). */
static char *
find_redis_server (void)
{
  static const char *const dirs[] = { "/usr/sbin", "/usr/bin" };
  char *found = g_find_program_in_path ("redis-server");

  for (gsize i = 0; found == NULL && i < G_N_ELEMENTS (dirs); i++)
    {
      char *candidate = g_build_filename (dirs[i], "redis-server", NULL);

      if (g_file_test (candidate, G_FILE_TEST_IS_EXECUTABLE))
        found = candidate;
      else
        g_free (candidate);
    }
  return found;
}

/* Whether the server on @path answers PING. */
static gboolean
answers_ping (const char *path)
{
  struct timeval timeout = { 1, 0 };
  redisContext *c = redisConnectUnixWithTimeout (path, timeout);
  redisReply *reply;
  gboolean ok = FALSE;

  if (c == NULL)
    return FALSE;
  if (c->err == 0 && (reply = redisCommand (c, "PING")) != NULL)
    {
      ok = reply->type == REDIS_REPLY_STATUS;
      freeReplyObject (reply);
    }
  redisFree (c);
  return ok;
}

/* Whether the server process has ended (reaped then, so that it is not killed twice). */
static gboolean
has_exited (DemoServer *server)
{
  int status;

  if (server->pid == 0)
    return TRUE;
  if (waitpid (server->pid, &status, WNOHANG) == server->pid)
    {
      server->pid = 0;
      return TRUE;
    }
  return FALSE;
}

void
demo_server_free (DemoServer *server)
{
  if (server == NULL)
    return;
  if (server->pid != 0)
    {
      int status;

      kill (server->pid, SIGKILL);
      while (waitpid (server->pid, &status, 0) < 0 && errno == EINTR)
        ;
    }
  if (server->dir != NULL)
    {
      /* the socket, and whatever the server wrote in its directory (its --dir) */
      g_autoptr (GDir) dir = g_dir_open (server->dir, 0, NULL);
      const char *name;

      while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
        {
          g_autofree char *path = g_build_filename (server->dir, name, NULL);

          g_unlink (path);
        }
      g_rmdir (server->dir);
    }
  g_free (server->dir);
  g_free (server->socket_path);
  g_free (server->url);
  g_free (server);
}

DemoServer *
demo_server_start (GError **error)
{
  g_autoptr (DemoServer) server = g_new0 (DemoServer, 1);
  g_autofree char *executable = find_redis_server ();
  gint64 deadline;

  if (executable == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   "redis-server is not installed (looked in PATH, /usr/sbin and /usr/bin)");
      return NULL;
    }
  server->dir = g_dir_make_tmp ("redislock-demo-XXXXXX", error);
  if (server->dir == NULL)
    return NULL;
  server->socket_path = g_build_filename (server->dir, "redis.sock", NULL);
  {
    const char *argv[] = { executable,   "--port",           "0",    "--unixsocket",
                           server->socket_path, "--unixsocketperm", "700", "--save",
                           "",           "--appendonly",     "no",   "--dir",
                           server->dir,  NULL };

    if (!g_spawn_async (NULL, (char **) argv, NULL,
                        G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL,
                        &server->pid, error))
      return NULL;
  }
  deadline = g_get_monotonic_time () + DEMO_SERVER_START_US;
  while (!answers_ping (server->socket_path))
    {
      if (has_exited (server))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "%s ended before it answered",
                       executable);
          return NULL;
        }
      if (g_get_monotonic_time () > deadline)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                       "%s did not answer within %d seconds", executable,
                       (int) (DEMO_SERVER_START_US / G_USEC_PER_SEC));
          return NULL;
        }
      g_usleep (20 * 1000); /* polled: the server gives no sign when it is ready */
    }
  server->url = g_strconcat ("unix://", server->socket_path, NULL);
  return g_steal_pointer (&server);
}

const char *
demo_server_get_url (DemoServer *server)
{
  return server->url;
}
