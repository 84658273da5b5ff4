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
 * The server is a plain child process tracked by pid (g_spawn without reaping) rather
 * than a GSubprocess: fault tests need to SIGKILL it and reap it synchronously
 * (an outage with no clean shutdown), start it again on the same socket path, and
 * freeze it with SIGSTOP, all from the test's own thread and without a main loop. On
 * Linux the child also asks for SIGKILL when its parent goes away, so an aborted test
 * leaves no stray server behind. Readiness means "answers PING" (any reply, including
 * NOAUTH when a password is required), polled over hiredis for up to 10 seconds.
 */
/* kill(), waitpid(WCONTINUED), O_CLOEXEC and syscall() are POSIX/Linux, not ISO C. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include <redislock/redislock-test.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <hiredis/hiredis.h>

#ifndef REDIS_SERVER_PATH
#define REDIS_SERVER_PATH "no"
#endif

/* How long a (re)started server may take to answer PING. */
#define READY_TIMEOUT_US (10 * G_USEC_PER_SEC)
/* Pause between two readiness probes. */
#define READY_POLL_US (5 * 1000)

struct _RedisLockTestServer
{
  char *executable;  /* absolute path of redis-server */
  char *dir;         /* the temporary directory holding everything below */
  char *conf_path;   /* dir/redis.conf */
  char *log_path;    /* dir/redis.log: the server's stdout and stderr */
  char *socket_path; /* dir/redis.sock */
  char *url;         /* unix://socket_path[?password=...] */
  GPid pid;          /* 0 while stopped */
  gboolean paused;   /* frozen by SIGSTOP */
};

/* Finds redis-server: $PATH first, then the usual Debian locations, then the path
 * configure found. */
static char *
find_redis_server (void)
{
  static const char *const fallbacks[] = {
    "/usr/sbin/redis-server",
    "/usr/bin/redis-server",
    REDIS_SERVER_PATH,
  };
  char *found = g_find_program_in_path ("redis-server");

  if (found != NULL)
    return found;
  for (gsize i = 0; i < G_N_ELEMENTS (fallbacks); i++)
    if (g_path_is_absolute (fallbacks[i]) && g_file_test (fallbacks[i], G_FILE_TEST_IS_EXECUTABLE))
      return g_strdup (fallbacks[i]);
  return NULL;
}

/* Quotes a value for redis.conf (which splits lines like a shell, honouring "..." with
 * backslash escapes), so a temporary directory with spaces still works. */
static void
append_quoted (GString *out, const char *value)
{
  g_string_append_c (out, '"');
  for (const char *p = value; *p != '\0'; p++)
    {
      if (*p == '"' || *p == '\\')
        g_string_append_c (out, '\\');
      g_string_append_c (out, *p);
    }
  g_string_append_c (out, '"');
}

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

/* The last few lines of redis.log, to explain a failed start. */
static char *
read_log_tail (RedisLockTestServer *server)
{
  g_autofree char *contents = NULL;
  gsize len = 0;
  const char *start;
  int lines = 0;

  if (!g_file_get_contents (server->log_path, &contents, &len, NULL) || len == 0)
    return g_strdup ("(redis.log is empty)");
  start = contents + len;
  while (start > contents && lines <= 12)
    {
      start--;
      if (*start == '\n')
        lines++;
    }
  return g_strdup (start);
}

/* Removes @path and everything under it; the server only writes plain files, but
 * directories are handled too. Symbolic links are removed, never followed. */
static void
remove_recursively (const char *path)
{
  GDir *dir;
  const char *entry;

  if (!g_file_test (path, G_FILE_TEST_IS_SYMLINK) && g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      dir = g_dir_open (path, 0, NULL);
      if (dir != NULL)
        {
          while ((entry = g_dir_read_name (dir)) != NULL)
            {
              g_autofree char *child = g_build_filename (path, entry, NULL);
              remove_recursively (child);
            }
          g_dir_close (dir);
        }
      if (g_rmdir (path) != 0)
        g_warning ("redislock test server: cannot remove %s: %s", path, g_strerror (errno));
    }
  else if (g_unlink (path) != 0 && errno != ENOENT)
    g_warning ("redislock test server: cannot remove %s: %s", path, g_strerror (errno));
}

#ifdef __linux__
/* Runs in the forked child before exec: die with the test program. (Linux delivers the
 * signal when the thread that forked exits, hence "drive it from one thread".) */
static void
child_setup (gpointer user_data)
{
  pid_t parent = (pid_t)GPOINTER_TO_INT (user_data);

  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != parent)
    _exit (1);
}
#endif

/* TRUE when the child has exited (and was reaped); fills @status. */
static gboolean
reap_if_exited (RedisLockTestServer *server, int *status)
{
  pid_t r;

  do
    r = waitpid (server->pid, status, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == server->pid || (r < 0 && errno == ECHILD))
    {
      server->pid = 0;
      return TRUE;
    }
  return FALSE;
}

/* One PING over a fresh connection: TRUE when the server replied anything at all
 * (PONG, or NOAUTH when a password is required). */
static gboolean
answers_ping (const char *socket_path)
{
  struct timeval tv = { 0, 250 * 1000 };
  redisContext *c = redisConnectUnixWithTimeout (socket_path, tv);
  redisReply *reply;
  gboolean ok = FALSE;

  if (c == NULL)
    return FALSE;
  if (c->err == 0 && redisSetTimeout (c, tv) == REDIS_OK)
    {
      reply = redisCommand (c, "PING");
      if (reply != NULL)
        {
          ok = reply->type == REDIS_REPLY_STATUS || reply->type == REDIS_REPLY_ERROR;
          freeReplyObject (reply);
        }
    }
  redisFree (c);
  return ok;
}

static void
kill_and_reap (RedisLockTestServer *server)
{
  int status;
  pid_t r;

  if (server->pid == 0)
    return;
  /* SIGKILL also ends a stopped (paused) process. */
  kill (server->pid, SIGKILL);
  do
    r = waitpid (server->pid, &status, 0);
  while (r < 0 && errno == EINTR);
  g_spawn_close_pid (server->pid);
  server->pid = 0;
  server->paused = FALSE;
}

gboolean
redis_lock_test_server_start (RedisLockTestServer *server, GError **error)
{
  const char *argv[3];
  int log_fd;
  int null_fd;
  gint64 deadline;
  GPid pid = 0;
  gboolean spawned;
  GError *spawn_error = NULL;

  g_return_val_if_fail (server != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (server->pid != 0)
    return TRUE;

  log_fd = g_open (server->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0)
    {
      int saved = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved), "Cannot open %s: %s",
                   server->log_path, g_strerror (saved));
      return FALSE;
    }
  null_fd = g_open ("/dev/null", O_RDONLY | O_CLOEXEC, 0);

  argv[0] = server->executable;
  argv[1] = server->conf_path;
  argv[2] = NULL;
  spawned = g_spawn_async_with_fds (server->dir, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
#ifdef __linux__
                                    child_setup, GINT_TO_POINTER ((int)getpid ()),
#else
                                    NULL, NULL,
#endif
                                    &pid, null_fd, log_fd, log_fd, &spawn_error);
  close (log_fd);
  if (null_fd >= 0)
    close (null_fd);
  if (!spawned)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "Cannot run %s: %s", server->executable,
                   spawn_error->message);
      g_error_free (spawn_error);
      return FALSE;
    }
  server->pid = pid;

  deadline = g_get_monotonic_time () + READY_TIMEOUT_US;
  for (;;)
    {
      int status = 0;

      if (reap_if_exited (server, &status))
        {
          g_autofree char *tail = read_log_tail (server);
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "%s %s %d during start-up; %s says:\n%s", server->executable,
                       WIFEXITED (status) ? "exited with code" : "was killed by signal",
                       WIFEXITED (status) ? WEXITSTATUS (status) : WTERMSIG (status),
                       server->log_path, tail);
          g_spawn_close_pid (pid);
          return FALSE;
        }
      if (answers_ping (server->socket_path))
        return TRUE;
      if (g_get_monotonic_time () >= deadline)
        {
          g_autofree char *tail = read_log_tail (server);
          kill_and_reap (server);
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "%s did not answer PING on %s within 10 s; %s says:\n%s", server->executable,
                       server->socket_path, server->log_path, tail);
          return FALSE;
        }
      g_usleep (READY_POLL_US);
    }
}

/* Makes the temporary directory; the socket path must fit in sockaddr_un, so a long
 * $TMPDIR falls back to /tmp. */
static char *
make_server_dir (GError **error)
{
  struct sockaddr_un sun;
  char *dir = g_dir_make_tmp ("redislock-test-XXXXXX", error);

  if (dir == NULL)
    return NULL;
  if (strlen (dir) + strlen ("/redis.sock") < sizeof sun.sun_path)
    return dir;

  g_rmdir (dir);
  g_free (dir);
  dir = g_strdup ("/tmp/redislock-test-XXXXXX");
  if (g_mkdtemp (dir) == NULL)
    {
      int saved = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                   "Cannot create a temporary directory in /tmp: %s", g_strerror (saved));
      g_free (dir);
      return NULL;
    }
  return dir;
}

RedisLockTestServer *
redis_lock_test_server_new (const char *const *config_lines, GError **error)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GString) conf = NULL;
  g_autofree char *password = NULL;
  g_autofree char *executable = NULL;

  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  executable = find_redis_server ();
  if (executable == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   "redis-server is not installed (looked in PATH, /usr/sbin and /usr/bin); "
                   "install the redis-server package to run these tests");
      return NULL;
    }

  server = g_new0 (RedisLockTestServer, 1);
  server->executable = g_steal_pointer (&executable);
  server->dir = make_server_dir (error);
  if (server->dir == NULL)
    return NULL;
  server->conf_path = g_build_filename (server->dir, "redis.conf", NULL);
  server->log_path = g_build_filename (server->dir, "redis.log", NULL);
  server->socket_path = g_build_filename (server->dir, "redis.sock", NULL);

  conf = g_string_new (
      "# Written by redis_lock_test_server_new(): Unix socket only, no persistence.\n");
  g_string_append (conf, "port 0\n");
  g_string_append (conf, "unixsocket ");
  append_quoted (conf, server->socket_path);
  g_string_append (conf, "\nunixsocketperm 700\n");
  g_string_append (conf, "save \"\"\n");
  g_string_append (conf, "appendonly no\n");
  g_string_append (conf, "daemonize no\n");
  g_string_append (conf, "logfile \"\"\n");
  g_string_append (conf, "dir ");
  append_quoted (conf, server->dir);
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
  if (!g_file_set_contents (server->conf_path, conf->str, (gssize)conf->len, error))
    return NULL;

  if (password != NULL)
    {
      g_autofree char *escaped = g_uri_escape_string (password, "!$'()*+,;:@/", FALSE);
      server->url = g_strdup_printf ("unix://%s?password=%s", server->socket_path, escaped);
    }
  else
    server->url = g_strdup_printf ("unix://%s", server->socket_path);

  if (!redis_lock_test_server_start (server, error))
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
  return server->socket_path;
}

GPid
redis_lock_test_server_get_pid (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, 0);
  return server->pid;
}

void
redis_lock_test_server_stop (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  kill_and_reap (server);
}

/* Sends @signum and waits until the child reports the matching state change
 * (@options: WUNTRACED for a stop, WCONTINUED for a continue), so the server is really
 * frozen (or running) when pause (or resume) returns. */
static void
signal_and_wait (RedisLockTestServer *server, int signum, int options)
{
  int status = 0;
  pid_t r;

  if (kill (server->pid, signum) != 0)
    {
      g_warning ("redislock test server: kill(%d, %d): %s", (int)server->pid, signum,
                 g_strerror (errno));
      return;
    }
  do
    r = waitpid (server->pid, &status, options);
  while (r < 0 && errno == EINTR);
  if (r == server->pid && (WIFEXITED (status) || WIFSIGNALED (status)))
    server->pid = 0;
}

void
redis_lock_test_server_pause (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  g_return_if_fail (server->pid != 0);
  if (server->paused)
    return;
  signal_and_wait (server, SIGSTOP, WUNTRACED);
  server->paused = server->pid != 0;
}

void
redis_lock_test_server_resume (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  g_return_if_fail (server->pid != 0);
  if (!server->paused)
    return;
  signal_and_wait (server, SIGCONT, WCONTINUED);
  server->paused = FALSE;
}

void
redis_lock_test_server_free (RedisLockTestServer *server)
{
  if (server == NULL)
    return;
  kill_and_reap (server);
  if (server->dir != NULL)
    remove_recursively (server->dir);
  g_free (server->executable);
  g_free (server->dir);
  g_free (server->conf_path);
  g_free (server->log_path);
  g_free (server->socket_path);
  g_free (server->url);
  g_free (server);
}
