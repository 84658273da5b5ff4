/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testserver.c: a private, throwaway redis-server for test programs.
 *
 * Tests of a Redis lock library are only worth something against a real Redis, and
 * they must be able to run in parallel (`make -j check`) without touching anyone's
 * server. So each test starts its own redis-server from the Debian package, listening
 * only on a Unix socket (`port 0`) inside a fresh g_dir_make_tmp() directory, with
 * persistence off (`save ""`, `appendonly no`): nothing survives it and nothing collides.
 * The configuration is a redis.conf file written next to the socket, so its exact
 * content can be read after a failure together with redis.log (the server's stdout and
 * stderr, kept in the same directory).
 *
 * The process itself (a child tracked by pid, killed with SIGKILL, frozen with SIGSTOP,
 * ready when it answers PING, any reply including NOAUTH when a password is required,
 * polled for up to 10 seconds) is testprocess.c's, shared with the Cluster and Sentinel
 * helpers; this file writes the configuration and builds the URL.
 */
#include "config.h"

#include <redislock/redislock-test.h>

#include <string.h>

#include <gio/gio.h>

#include "testprocess.h"

struct _RedisLockTestServer
{
  RlTestProcess *process; /* listens on process->socket_path, dir/redis.sock */
  char *url;              /* unix://socket_path[?password=...] */
};

/* Returns the password of a `requirepass` line, or NULL when @line is something else.
 * Surrounding quotes are dropped, as redis.conf does. */
static char *
parse_requirepass (const char *line)
{
  const char *p = line;
  const char *value;
  gsize len;

  while (g_ascii_isspace (*p))
    p++;
  if (g_ascii_strncasecmp (p, "requirepass", strlen ("requirepass")) != 0)
    return NULL;
  p += strlen ("requirepass");
  if (!g_ascii_isspace (*p))
    return NULL;
  while (g_ascii_isspace (*p))
    p++;
  value = p;
  len = strlen (value);
  while (len > 0 && g_ascii_isspace (value[len - 1]))
    len--;
  if (len >= 2 && (value[0] == '"' || value[0] == '\'') && value[len - 1] == value[0])
    {
      value++;
      len -= 2;
    }
  return len > 0 ? g_strndup (value, len) : NULL;
}

RedisLockTestServer *
redis_lock_test_server_new (const char *const *config_lines, GError **error)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GString) conf = NULL;
  g_autofree char *password = NULL;
  g_autofree char *executable = NULL;
  RlTestProcess *process;

  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  executable = rl_test_find_redis_server ();
  if (executable == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   "redis-server is not installed (looked in PATH, /usr/sbin and /usr/bin); "
                   "install the redis-server package to run these tests");
      return NULL;
    }

  server = g_new0 (RedisLockTestServer, 1);
  server->process
      = rl_test_process_new (executable, NULL, "redislock-test", "redis.sock", 0, error);
  if (server->process == NULL)
    return NULL;
  process = server->process;

  conf = g_string_new (
      "# Written by redis_lock_test_server_new(): Unix socket only, no persistence.\n");
  g_string_append (conf, "port 0\n");
  g_string_append (conf, "unixsocket ");
  rl_test_append_quoted (conf, process->socket_path);
  g_string_append (conf, "\nunixsocketperm 700\n");
  g_string_append (conf, "save \"\"\n");
  g_string_append (conf, "appendonly no\n");
  g_string_append (conf, "daemonize no\n");
  g_string_append (conf, "logfile \"\"\n");
  g_string_append (conf, "dir ");
  rl_test_append_quoted (conf, process->dir);
  g_string_append_c (conf, '\n');
  for (gsize i = 0; config_lines != NULL && config_lines[i] != NULL; i++)
    {
      char *pw = parse_requirepass (config_lines[i]);

      if (pw != NULL)
        {
          g_free (password);
          password = pw;
        }
      g_string_append (conf, config_lines[i]);
      g_string_append_c (conf, '\n');
    }
  if (!g_file_set_contents (process->conf_path, conf->str, (gssize)conf->len, error))
    return NULL;

  if (password != NULL)
    {
      g_autofree char *escaped = g_uri_escape_string (password, "!$'()*+,;:@/", FALSE);
      server->url = g_strdup_printf ("unix://%s?password=%s", process->socket_path, escaped);
    }
  else
    server->url = g_strdup_printf ("unix://%s", process->socket_path);

  if (!rl_test_process_start (process, error))
    return NULL;
  return g_steal_pointer (&server);
}

RedisLockTestServer *
redis_lock_test_server_new_or_skip (const char *const *config_lines)
{
  GError *error = NULL;
  RedisLockTestServer *server = redis_lock_test_server_new (config_lines, &error);

  if (server != NULL)
    return server;
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
    {
      g_test_skip (error->message);
      g_error_free (error);
      return NULL;
    }
  g_error ("redislock test server: %s", error->message);
  return NULL;
}

const char *
redis_lock_test_server_get_url (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, NULL);
  return server->url;
}

const char *
redis_lock_test_server_get_socket_path (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, NULL);
  return server->process->socket_path;
}

GPid
redis_lock_test_server_get_pid (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, 0);
  return server->process->pid;
}

gboolean
redis_lock_test_server_start (RedisLockTestServer *server, GError **error)
{
  g_return_val_if_fail (server != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return rl_test_process_start (server->process, error);
}

void
redis_lock_test_server_stop (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  rl_test_process_stop (server->process);
}

void
redis_lock_test_server_pause (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  rl_test_process_pause (server->process);
}

void
redis_lock_test_server_resume (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  rl_test_process_resume (server->process);
}

void
redis_lock_test_server_free (RedisLockTestServer *server)
{
  if (server == NULL)
    return;
  rl_test_process_free (server->process);
  g_free (server->url);
  g_free (server);
}
