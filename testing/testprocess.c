/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testprocess.c: the process plumbing of the test helpers (redislock-test.h).
 *
 * A single test server, each node of a test Cluster and each data node and Sentinel of
 * a Sentinel deployment are the same kind of thing: a redis-server (or Sentinel)
 * process with a configuration file, a log and nothing else in a temporary directory of
 * its own, started, probed, frozen, killed and restarted by the test's thread. This
 * file does that once for all of them.
 *
 * A process is a plain child tracked by pid (g_spawn without reaping) rather than a
 * GSubprocess: fault tests need to SIGKILL it and reap it synchronously (an outage with
 * no clean shutdown), start it again on the same address, and freeze it with SIGSTOP,
 * all from the test's own thread and without a main loop. On Linux the child also asks
 * for SIGKILL when its parent goes away, so an aborted test leaves no stray server
 * behind. Its stdout and stderr go to redis.log next to redis.conf, so both can be read
 * after a failure, and the end of the log is quoted in start-up errors.
 *
 * Readiness is polled, never waited for with a fixed sleep: a process on a Unix socket
 * in its private directory is ready when anything answers PING there (NOAUTH counts:
 * a password may be configured). A process on a TCP port of 127.0.0.1 must also prove
 * it is the one listening: `INFO server` must name its pid, since a port picked free
 * (rl_test_pick_free_ports()) can be taken by someone else before the process binds it.
 * When that happens the process exits, the log says "Address already in use", and the
 * start fails with G_IO_ERROR_ADDRESS_IN_USE so the caller can pick another port. The
 * same rule holds for every later state a helper waits for (a cluster that agrees, a
 * failover that is over): rl_test_wait_until() looks every few milliseconds until a
 * deadline, and its error says what was still missing at the last look.
 *
 * Every connection to a process has a timeout on connecting and on each reply, so a
 * frozen or dead process never hangs a test; the connection of
 * rl_test_process_command() is cached, because polling a cluster every few
 * milliseconds over fresh connections would leave thousands of sockets in TIME_WAIT.
 *
 * Some processes need files made by other programs first (the certificates of a TLS
 * test server, made with the openssl command line). rl_test_run_programs() runs such
 * short commands side by side, since each costs a few tens of milliseconds that are
 * mostly its own start-up, with stdin on /dev/null so that none can wait for an answer,
 * each one's output in a log of its own to quote when it fails, and a deadline. They
 * run in the test's working directory (their paths are absolute), because a tool that
 * runs the test and follows its children, valgrind, was given paths relative to it.
 */
/* kill(), waitpid(WCONTINUED), O_CLOEXEC and prctl() are POSIX/Linux, not ISO C. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "testprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
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

#ifndef REDIS_SERVER_PATH
#define REDIS_SERVER_PATH "no"
#endif

/* Pause between two readiness probes, and between two looks of rl_test_wait_until(). */
#define READY_POLL_US (5 * 1000)
#define WAIT_POLL_US (5 * 1000)
/* Timeout of one readiness probe, on connecting and on the reply. */
#define PROBE_TIMEOUT_MS 250
/* Pause between two looks of rl_test_run_programs(), and how much of a failed
 * program's output its error quotes. */
#define RUN_POLL_US (1 * 1000)
#define RUN_LOG_QUOTE 2000

char *
rl_test_find_program (const char *name, const char *configured_path)
{
  const char *const dirs[] = { "/usr/sbin", "/usr/bin" };
  char *found = g_find_program_in_path (name);

  if (found != NULL)
    return found;
  for (gsize i = 0; i < G_N_ELEMENTS (dirs); i++)
    {
      char *path = g_build_filename (dirs[i], name, NULL);

      if (g_file_test (path, G_FILE_TEST_IS_EXECUTABLE))
        return path;
      g_free (path);
    }
  if (configured_path != NULL && g_path_is_absolute (configured_path)
      && g_file_test (configured_path, G_FILE_TEST_IS_EXECUTABLE))
    return g_strdup (configured_path);
  return NULL;
}

char *
rl_test_find_redis_server (void)
{
  return rl_test_find_program ("redis-server", REDIS_SERVER_PATH);
}

/* redis.conf splits lines like a shell, honouring "..." with backslash escapes, so a
 * temporary directory with spaces still works. */
void
rl_test_append_quoted (GString *out, const char *value)
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

void
rl_test_process_append_conf (RlTestProcess *process, GString *conf)
{
  g_string_append (conf, "daemonize no\n"
                         "logfile \"\"\n"
                         "dir ");
  rl_test_append_quoted (conf, process->dir);
  g_string_append_c (conf, '\n');
}

gboolean
rl_test_process_write_conf (RlTestProcess *process, const GString *conf, GError **error)
{
  return g_file_set_contents (process->conf_path, conf->str, (gssize) conf->len, error);
}

gboolean
rl_test_pick_free_ports (int *ports, guint n, GError **error)
{
  g_autofree int *fds = g_new (int, n);
  gboolean ok = TRUE;
  guint opened = 0;

  for (; opened < n; opened++)
    {
      struct sockaddr_in sin;
      socklen_t len = sizeof sin;
      int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

      if (fd < 0)
        {
          int saved = errno;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved), "socket(): %s",
                       g_strerror (saved));
          ok = FALSE;
          break;
        }
      memset (&sin, 0, sizeof sin);
      sin.sin_family = AF_INET;
      sin.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
      sin.sin_port = 0;
      if (bind (fd, (struct sockaddr *)&sin, sizeof sin) != 0
          || getsockname (fd, (struct sockaddr *)&sin, &len) != 0)
        {
          int saved = errno;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                       "Cannot bind a socket to 127.0.0.1: %s", g_strerror (saved));
          close (fd);
          ok = FALSE;
          break;
        }
      fds[opened] = fd;
      ports[opened] = ntohs (sin.sin_port);
    }
  /* All were bound at once, so the ports are distinct. */
  for (guint i = 0; i < opened; i++)
    close (fds[i]);
  return ok;
}

/* Removes @path and everything under it; the processes only write plain files, but
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
        g_warning ("redislock test helpers: cannot remove %s: %s", path, g_strerror (errno));
    }
  else if (g_unlink (path) != 0 && errno != ENOENT)
    g_warning ("redislock test helpers: cannot remove %s: %s", path, g_strerror (errno));
}

/* Makes the temporary directory. With @socket_name the socket path must fit in
 * sockaddr_un, so a long $TMPDIR falls back to /tmp. */
static char *
make_dir (const char *prefix, const char *socket_name, GError **error)
{
  struct sockaddr_un sun;
  g_autofree char *template = g_strdup_printf ("%s-XXXXXX", prefix);
  char *dir = g_dir_make_tmp (template, error);

  if (dir == NULL)
    return NULL;
  if (socket_name == NULL || strlen (dir) + 1 + strlen (socket_name) < sizeof sun.sun_path)
    return dir;

  g_rmdir (dir);
  g_free (dir);
  dir = g_strdup_printf ("/tmp/%s", template);
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

RlTestProcess *
rl_test_process_new (const char *executable, const char *extra_arg, const char *prefix,
                     const char *socket_name, int port, GError **error)
{
  g_autoptr (RlTestProcess) process = g_new0 (RlTestProcess, 1);

  process->executable = g_strdup (executable);
  process->extra_arg = g_strdup (extra_arg);
  process->dir = make_dir (prefix, socket_name, error);
  if (process->dir == NULL)
    return NULL;
  process->conf_path = g_build_filename (process->dir, "redis.conf", NULL);
  process->log_path = g_build_filename (process->dir, "redis.log", NULL);
  if (socket_name != NULL)
    {
      process->socket_path = g_build_filename (process->dir, socket_name, NULL);
      process->address = g_strdup (process->socket_path);
    }
  else
    rl_test_process_set_port (process, port);
  return g_steal_pointer (&process);
}

void
rl_test_process_set_port (RlTestProcess *process, int port)
{
  g_return_if_fail (process->socket_path == NULL);
  process->port = port;
  g_free (process->address);
  process->address = g_strdup_printf ("127.0.0.1:%d", port);
}

/* The log from byte @from on, or its last dozen lines when @from is negative. */
static char *
read_log (RlTestProcess *process, goffset from)
{
  g_autofree char *contents = NULL;
  gsize len = 0;
  const char *start;
  int lines = 0;

  if (!g_file_get_contents (process->log_path, &contents, &len, NULL))
    return g_strdup ("");
  if (from >= 0)
    return g_strdup (contents + MIN ((gsize)from, len));
  start = contents + len;
  while (start > contents && lines <= 12)
    {
      start--;
      if (*start == '\n')
        lines++;
    }
  return g_strdup (start);
}

char *
rl_test_process_log_tail (RlTestProcess *process)
{
  char *tail = read_log (process, -1);

  if (*tail != '\0')
    return tail;
  g_free (tail);
  return g_strdup ("(redis.log is empty)");
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
reap_if_exited (RlTestProcess *process, int *status)
{
  pid_t r;

  do
    r = waitpid (process->pid, status, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == process->pid || (r < 0 && errno == ECHILD))
    {
      g_spawn_close_pid (process->pid);
      process->pid = 0;
      process->paused = FALSE;
      return TRUE;
    }
  return FALSE;
}

static redisContext *
connect_to (RlTestProcess *process, int timeout_ms)
{
  struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };

  if (process->socket_path != NULL)
    return redisConnectUnixWithTimeout (process->socket_path, tv);
  return redisConnectWithTimeout ("127.0.0.1", process->port, tv);
}

/* One probe over a fresh connection. On a Unix socket: TRUE when anything replied to
 * PING (PONG, or NOAUTH when a password is required). On TCP: TRUE when `INFO server`
 * names our pid. */
static gboolean
answers (RlTestProcess *process)
{
  struct timeval tv = { 0, PROBE_TIMEOUT_MS * 1000 };
  redisContext *c = connect_to (process, PROBE_TIMEOUT_MS);
  redisReply *reply;
  gboolean ok = FALSE;

  if (c == NULL)
    return FALSE;
  if (c->err == 0 && redisSetTimeout (c, tv) == REDIS_OK)
    {
      if (process->socket_path != NULL)
        {
          reply = redisCommand (c, "PING");
          ok = reply != NULL
               && (reply->type == REDIS_REPLY_STATUS || reply->type == REDIS_REPLY_ERROR);
        }
      else
        {
          g_autofree char *line = g_strdup_printf ("\nprocess_id:%d\r", (int)process->pid);

          reply = redisCommand (c, "INFO server");
          ok = reply != NULL && reply->type == REDIS_REPLY_STRING
               && strstr (reply->str, line) != NULL;
        }
      if (reply != NULL)
        freeReplyObject (reply);
    }
  redisFree (c);
  return ok;
}

static goffset
file_size (const char *path)
{
  GStatBuf st;

  return g_stat (path, &st) == 0 ? (goffset)st.st_size : 0;
}

static void
drop_connection (RlTestProcess *process)
{
  if (process->ctx != NULL)
    {
      redisFree (process->ctx);
      process->ctx = NULL;
    }
}

gboolean
rl_test_process_start (RlTestProcess *process, GError **error)
{
  const char *argv[4];
  int log_fd;
  int null_fd;
  gint64 deadline;
  GPid pid = 0;
  gboolean spawned;
  GError *spawn_error = NULL;

  g_return_val_if_fail (process != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (process->pid != 0)
    return TRUE;
  drop_connection (process);

  process->log_start = file_size (process->log_path);
  log_fd = g_open (process->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0)
    {
      int saved = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved), "Cannot open %s: %s",
                   process->log_path, g_strerror (saved));
      return FALSE;
    }
  null_fd = g_open ("/dev/null", O_RDONLY | O_CLOEXEC, 0);

  argv[0] = process->executable;
  argv[1] = process->conf_path;
  argv[2] = process->extra_arg;
  argv[3] = NULL;
  spawned = g_spawn_async_with_fds (process->dir, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
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
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "Cannot run %s: %s", process->executable,
                   spawn_error->message);
      g_error_free (spawn_error);
      return FALSE;
    }
  process->pid = pid;
  process->paused = FALSE;

  deadline = g_get_monotonic_time () + RL_TEST_READY_TIMEOUT_MS * G_TIME_SPAN_MILLISECOND;
  for (;;)
    {
      int status = 0;

      if (reap_if_exited (process, &status))
        {
          g_autofree char *since = read_log (process, process->log_start);
          g_autofree char *tail = rl_test_process_log_tail (process);
          gboolean clash = strstr (since, "Address already in use") != NULL;

          g_set_error (error, G_IO_ERROR, clash ? G_IO_ERROR_ADDRESS_IN_USE : G_IO_ERROR_FAILED,
                       "%s %s %d during start-up%s; %s says:\n%s", process->executable,
                       WIFEXITED (status) ? "exited with code" : "was killed by signal",
                       WIFEXITED (status) ? WEXITSTATUS (status) : WTERMSIG (status),
                       clash ? " (its port was taken)" : "", process->log_path, tail);
          return FALSE;
        }
      if (answers (process))
        return TRUE;
      if (g_get_monotonic_time () >= deadline)
        {
          g_autofree char *tail = rl_test_process_log_tail (process);
          rl_test_process_stop (process);
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "%s did not answer PING on %s within %d s; %s says:\n%s",
                       process->executable, process->address, RL_TEST_READY_TIMEOUT_MS / 1000,
                       process->log_path, tail);
          return FALSE;
        }
      g_usleep (READY_POLL_US);
    }
}

gboolean
rl_test_process_start_new (RlTestProcess *process, guint n_ports, RlTestConfigureFunc configure,
                           gpointer data, GError **error)
{
  g_return_val_if_fail (n_ports >= 1 && n_ports <= RL_TEST_MAX_PORTS, FALSE);
  for (int attempt = 1;; attempt++)
    {
      GError *local = NULL;
      int ports[RL_TEST_MAX_PORTS];

      if (!rl_test_pick_free_ports (ports, n_ports, error)
          || !configure (process, ports, data, error))
        return FALSE;
      if (rl_test_process_start (process, &local))
        return TRUE;
      if (!g_error_matches (local, G_IO_ERROR, G_IO_ERROR_ADDRESS_IN_USE)
          || attempt == RL_TEST_PORT_TRIES)
        {
          g_propagate_error (error, local);
          return FALSE;
        }
      g_clear_error (&local);
    }
}

gboolean
rl_test_process_restart (RlTestProcess *process, GError **error)
{
  gint64 deadline = g_get_monotonic_time () + RL_TEST_READY_TIMEOUT_MS * G_TIME_SPAN_MILLISECOND;
  GError *local = NULL;

  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  while (!rl_test_process_start (process, &local))
    {
      if (!g_error_matches (local, G_IO_ERROR, G_IO_ERROR_ADDRESS_IN_USE)
          || g_get_monotonic_time () >= deadline)
        {
          g_propagate_error (error, local);
          return FALSE;
        }
      g_clear_error (&local);
      /* Until whoever holds the port lets it go. */
      g_usleep (50 * 1000);
    }
  return TRUE;
}

void
rl_test_process_stop (RlTestProcess *process)
{
  int status;
  pid_t r;

  g_return_if_fail (process != NULL);
  drop_connection (process);
  if (process->pid == 0)
    return;
  /* SIGKILL also ends a stopped (paused) process. */
  kill (process->pid, SIGKILL);
  do
    r = waitpid (process->pid, &status, 0);
  while (r < 0 && errno == EINTR);
  g_spawn_close_pid (process->pid);
  process->pid = 0;
  process->paused = FALSE;
}

/* Sends @signum and waits until the child reports the matching state change
 * (@options: WUNTRACED for a stop, WCONTINUED for a continue), so the process is really
 * frozen (or running) when pause (or resume) returns. */
static void
signal_and_wait (RlTestProcess *process, int signum, int options)
{
  int status = 0;
  pid_t r;

  if (kill (process->pid, signum) != 0)
    {
      g_warning ("redislock test helpers: kill(%d, %d): %s", (int)process->pid, signum,
                 g_strerror (errno));
      return;
    }
  do
    r = waitpid (process->pid, &status, options);
  while (r < 0 && errno == EINTR);
  if (r == process->pid && (WIFEXITED (status) || WIFSIGNALED (status)))
    {
      g_spawn_close_pid (process->pid);
      process->pid = 0;
      drop_connection (process);
    }
}

void
rl_test_process_pause (RlTestProcess *process)
{
  g_return_if_fail (process != NULL);
  g_return_if_fail (process->pid != 0);
  if (process->paused)
    return;
  signal_and_wait (process, SIGSTOP, WUNTRACED);
  process->paused = process->pid != 0;
}

void
rl_test_process_resume (RlTestProcess *process)
{
  g_return_if_fail (process != NULL);
  g_return_if_fail (process->pid != 0);
  if (!process->paused)
    return;
  signal_and_wait (process, SIGCONT, WCONTINUED);
  process->paused = FALSE;
}

gboolean
rl_test_process_is_up (RlTestProcess *process)
{
  return process->pid != 0 && !process->paused;
}

/* The cached connection, opened when needed, with @timeout_ms on each reply. */
static redisContext *
get_connection (RlTestProcess *process, int timeout_ms, GError **error)
{
  struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };

  if (!rl_test_process_is_up (process))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED, "%s is %s", process->address,
                   process->pid == 0 ? "stopped" : "paused");
      return NULL;
    }
  if (process->ctx == NULL)
    {
      process->ctx = connect_to (process, timeout_ms);
      if (process->ctx == NULL || process->ctx->err != 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "Cannot connect to %s: %s",
                       process->address,
                       process->ctx != NULL ? process->ctx->errstr : "out of memory");
          drop_connection (process);
          return NULL;
        }
    }
  if (redisSetTimeout (process->ctx, tv) != REDIS_OK)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "Cannot set a timeout on %s",
                   process->address);
      drop_connection (process);
      return NULL;
    }
  return process->ctx;
}

/* A NULL @reply is an I/O error: report it and drop the connection. */
static redisReply *
check_reply (RlTestProcess *process, redisReply *reply, GError **error)
{
  if (reply != NULL)
    return reply;
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "No reply from %s: %s", process->address,
               process->ctx->errstr[0] != '\0' ? process->ctx->errstr : "connection lost");
  drop_connection (process);
  return NULL;
}

redisReply *
rl_test_process_vcommand (RlTestProcess *process, int timeout_ms, GError **error,
                          const char *format, va_list ap)
{
  redisContext *c = get_connection (process, timeout_ms, error);
  redisReply *reply;
  va_list copy;

  if (c == NULL)
    return NULL;
  va_copy (copy, ap);
  reply = check_reply (process, redisvCommand (c, format, ap), error);
  if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
    {
      g_autofree char *command = g_strdup_vprintf (format, copy);

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "%s: %s: %s", process->address, command,
                   reply->str);
      freeReplyObject (reply);
      reply = NULL;
    }
  va_end (copy);
  return reply;
}

redisReply *
rl_test_process_command (RlTestProcess *process, int timeout_ms, GError **error, const char *format,
                         ...)
{
  redisReply *reply;
  va_list ap;

  va_start (ap, format);
  reply = rl_test_process_vcommand (process, timeout_ms, error, format, ap);
  va_end (ap);
  return reply;
}

redisReply *
rl_test_process_command_argv (RlTestProcess *process, int timeout_ms, int argc, const char **argv,
                              const size_t *argv_len, GError **error)
{
  redisContext *c = get_connection (process, timeout_ms, error);

  if (c == NULL)
    return NULL;
  return check_reply (process, redisCommandArgv (c, argc, argv, argv_len), error);
}

char *
rl_test_info_field (const char *info, const char *name)
{
  gsize len = strlen (name);
  const char *p = info;

  while (p != NULL)
    {
      if (strncmp (p, name, len) == 0 && p[len] == ':')
        return g_strndup (p + len + 1, strcspn (p + len + 1, "\r\n"));
      p = strchr (p, '\n');
      if (p != NULL)
        p++;
    }
  return NULL;
}

gboolean
rl_test_wait_until (RlTestCheckFunc check, gpointer data, gint64 timeout_ms, const char *what,
                    GError **error)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * G_TIME_SPAN_MILLISECOND;
  g_autoptr (GString) why = g_string_new (NULL);

  for (;;)
    {
      g_string_truncate (why, 0);
      if (check (data, why))
        return TRUE;
      if (g_get_monotonic_time () >= deadline)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                       "%s within %" G_GINT64_FORMAT " ms: %s", what, timeout_ms, why->str);
          return FALSE;
        }
      g_usleep (WAIT_POLL_US);
    }
}

/* The output a failed program left in @log_path, its last RUN_LOG_QUOTE bytes at most. */
static char *
quote_program_log (const char *log_path)
{
  g_autofree char *contents = NULL;
  gsize len = 0;

  if (!g_file_get_contents (log_path, &contents, &len, NULL) || len == 0)
    return g_strdup ("(no output)");
  g_strchomp (contents);
  len = strlen (contents);
  if (len > RUN_LOG_QUOTE)
    return g_strdup_printf ("…%s", contents + len - RUN_LOG_QUOTE);
  return g_steal_pointer (&contents);
}

gboolean
rl_test_run_programs (const char *log_dir, const RlTestProgram *programs, guint n_programs,
                      GError **error)
{
  g_autofree GPid *pids = g_new0 (GPid, n_programs);         /* 0 once reaped */
  g_autofree gboolean *started = g_new0 (gboolean, n_programs);
  g_autofree int *statuses = g_new0 (int, n_programs);
  GError *local = NULL;
  guint running = 0;
  gint64 deadline;
  int null_fd;

  g_return_val_if_fail (log_dir != NULL, FALSE);
  g_return_val_if_fail (programs != NULL || n_programs == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  null_fd = g_open ("/dev/null", O_RDONLY | O_CLOEXEC, 0);
  for (guint i = 0; i < n_programs && local == NULL; i++)
    {
      g_autofree char *log_path = g_build_filename (log_dir, programs[i].log_name, NULL);
      int log_fd = g_open (log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

      if (log_fd < 0)
        {
          int saved = errno;
          g_set_error (&local, G_IO_ERROR, g_io_error_from_errno (saved), "Cannot open %s: %s",
                       log_path, g_strerror (saved));
          break;
        }
      if (g_spawn_async_with_fds (NULL, (char **)programs[i].argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
#ifdef __linux__
                                  child_setup, GINT_TO_POINTER ((int)getpid ()),
#else
                                  NULL, NULL,
#endif
                                  &pids[i], null_fd, log_fd, log_fd, &local))
        {
          started[i] = TRUE;
          running++;
        }
      else
        g_prefix_error (&local, "Cannot run %s: ", programs[i].argv[0]);
      close (log_fd);
    }
  if (null_fd >= 0)
    close (null_fd);

  /* Even after a failure to start one, the others are waited for: none is left behind. */
  deadline = g_get_monotonic_time () + RL_TEST_READY_TIMEOUT_MS * G_TIME_SPAN_MILLISECOND;
  while (running > 0)
    {
      gboolean late = g_get_monotonic_time () >= deadline;

      for (guint i = 0; i < n_programs; i++)
        {
          pid_t r;

          if (pids[i] == 0)
            continue;
          if (late)
            {
              kill (pids[i], SIGKILL);
              if (local == NULL)
                g_set_error (&local, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                             "%s did not finish within %d s", programs[i].argv[0],
                             RL_TEST_READY_TIMEOUT_MS / 1000);
            }
          do
            r = waitpid (pids[i], &statuses[i], late ? 0 : WNOHANG);
          while (r < 0 && errno == EINTR);
          if (r == pids[i] || (r < 0 && errno == ECHILD))
            {
              g_spawn_close_pid (pids[i]);
              pids[i] = 0;
              running--;
            }
        }
      if (running > 0)
        g_usleep (RUN_POLL_US);
    }

  for (guint i = 0; i < n_programs && local == NULL; i++)
    {
      int status = statuses[i];

      if (!started[i] || (WIFEXITED (status) && WEXITSTATUS (status) == 0))
        continue;
      {
        g_autofree char *log_path = g_build_filename (log_dir, programs[i].log_name, NULL);
        g_autofree char *command = g_strjoinv (" ", (char **)programs[i].argv);
        g_autofree char *output = quote_program_log (log_path);

        g_set_error (&local, G_IO_ERROR, G_IO_ERROR_FAILED, "`%s` %s %d; %s says:\n%s", command,
                     WIFEXITED (status) ? "exited with code" : "was killed by signal",
                     WIFEXITED (status) ? WEXITSTATUS (status) : WTERMSIG (status), log_path,
                     output);
      }
    }
  if (local != NULL)
    {
      g_propagate_error (error, local);
      return FALSE;
    }
  return TRUE;
}

void
rl_test_process_free (RlTestProcess *process)
{
  if (process == NULL)
    return;
  rl_test_process_stop (process);
  if (process->dir != NULL)
    remove_recursively (process->dir);
  g_free (process->executable);
  g_free (process->extra_arg);
  g_free (process->dir);
  g_free (process->conf_path);
  g_free (process->log_path);
  g_free (process->socket_path);
  g_free (process->address);
  g_free (process);
}

gpointer
rl_test_or_skip (gpointer object, GError *error, const char *what)
{
  if (object != NULL)
    return object;
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
    {
      g_test_skip (error->message);
      g_error_free (error);
      return NULL;
    }
  g_error ("%s: %s", what, error->message);
  return NULL;
}
