/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-run.c: `redislock run NAME -- COMMAND`, a distributed flock(1).
 *
 * Takes the lock NAME through libredislock (the registry's watchdog keeps renewing the
 * lease) on a holder thread (several locks, all or none, with `--lock A --lock B`; a
 * fencing token for each with `--fencing`; a permit of the semaphore NAME of N permits
 * with `--permits N`), runs COMMAND as a child process, a job of its own (its own
 * process group, given the terminal while redislock has it, with signals forwarded to
 * it), releases the lock when it ends and exits with its status; if the lease is lost
 * while the command runs, the command is terminated, SIGKILL coming before the key can
 * expire. The main thread runs a GLib main loop fed by two pipes: the holder's wake-ups
 * and the signals caught.
 */
#include "config.h"

#include "redislock-run.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <unistd.h>

/* What the holder thread, the lease-lost callback and the main loop share. The holder
 * thread takes and releases the lock (a lock belongs to the thread that took it); the
 * main thread runs the command. Fields under @mu; a byte on @wake_fd tells the main loop
 * to look. pthread primitives so ThreadSanitizer sees the ordering. */
typedef struct
{
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int wake_fd[2];

  /* read-only while the holder thread runs */
  RedisLock **locks;
  guint n_locks;
  RedisRWLock *rw; /* --read: a read hold of this read-write lock instead (n_locks 0) */
  RedisSemaphore *semaphore; /* --permits: a permit of it instead (locks NULL, n_locks 1) */
  gint64 wait_ms;
  gint64 ttl_ms;
  GCancellable *cancellable;

  /* holder thread → main */
  gboolean acquire_done;
  gboolean acquired;
  char **lease_values; /* each key's value while held: redis_lock_dup_lease_value() */
  guint64 *tokens;     /* each hold's fencing token (0: fencing off) */
  GError *acquire_error;
  gboolean release_done;
  GError *release_error;
  /* main → holder thread */
  gboolean release_requested;
  /* lease-lost callback → main */
  gboolean lease_lost;
  gint64 lease_lost_us; /* monotonic time of the report */
  char *lost_name;      /* the name of the first lock whose lease was lost */
  /* holder thread only */
  RedisPermit *permit;  /* --permits: the permit held */
} Holder;

/* The command runs as a job of its own: its own process group, which is given the
 * terminal while redislock has it (see start_command()). */
typedef struct
{
  Holder *holder;
  GMainLoop *loop;
  RedisLockRegistry *registry;
  const char *name;         /* the name of the lock, or the first of several */
  const char *const *names; /* every name, in the order given */
  char **command;
  gint64 kill_after_us; /* SIGTERM to SIGKILL on a lost lease, at most the lease margin */

  /* main thread only */
  gboolean acquire_handled;
  gboolean lease_lost_handled;
  GPid child;              /* the command, leader of its process group */
  gboolean child_running;  /* not reaped yet */
  gboolean child_stopped;  /* stopped (Ctrl-Z, SIGTTIN...), not continued since */
  int child_status;        /* exit status to report for the child */
  int interrupted_by;      /* signal received before the command started */
  int exit_status;         /* decided before the command started, or -1 */
  guint kill_timer;
  int tty_fd;              /* redislock's controlling terminal, or -1 */
} RunState;

static void
holder_wake (Holder *h)
{
  char b = 'x';
  ssize_t n;

  do
    n = write (h->wake_fd[1], &b, 1);
  while (n < 0 && errno == EINTR);
  /* EAGAIN: a wake-up is already pending, which is enough. */
}

static gpointer
holder_thread (gpointer data)
{
  Holder *h = data;
  GError *error = NULL;
  gboolean ok;

  /* Several locks: all or none, the leases of one registry requested together. The
   * registry's TTL is the --ttl then. */
  if (h->rw != NULL)
    ok = redis_rw_lock_try_read_lock_for (h->rw, h->wait_ms, h->cancellable, &error);
  else if (h->semaphore != NULL)
    ok = (h->permit = redis_semaphore_try_acquire_for (h->semaphore, h->wait_ms, h->cancellable,
                                                       &error))
         != NULL;
  else if (h->n_locks == 1)
    ok = redis_lock_try_lock_full (h->locks[0], h->wait_ms, h->ttl_ms, h->cancellable, &error);
  else
    ok = redis_lock_try_lock_all (h->locks, h->n_locks, h->wait_ms, h->cancellable, &error);
  pthread_mutex_lock (&h->mu);
  h->acquire_done = TRUE;
  h->acquired = ok;
  /* only the holding thread may ask for the value and token of its hold */
  h->lease_values = g_new0 (char *, h->n_locks + 1);
  h->tokens = g_new0 (guint64, h->n_locks);
  if (ok && h->semaphore != NULL)
    h->lease_values[0] = redis_permit_dup_lease_value (h->permit);
  for (guint i = 0; ok && h->semaphore == NULL && i < h->n_locks; i++)
    {
      h->lease_values[i] = redis_lock_dup_lease_value (h->locks[i]);
      h->tokens[i] = redis_lock_get_fencing_token (h->locks[i]);
    }
  h->acquire_error = error;
  pthread_mutex_unlock (&h->mu);
  holder_wake (h);

  pthread_mutex_lock (&h->mu);
  while (!h->release_requested)
    pthread_cond_wait (&h->cond, &h->mu);
  pthread_mutex_unlock (&h->mu);

  error = NULL;
  if (ok && h->rw != NULL)
    redis_rw_lock_read_unlock (h->rw, &error);
  else if (ok && h->semaphore != NULL)
    redis_permit_release (h->permit, &error);
  else if (ok && h->n_locks == 1)
    redis_lock_unlock (h->locks[0], &error);
  else if (ok)
    redis_lock_unlock_all (h->locks, h->n_locks, &error);
  pthread_mutex_lock (&h->mu);
  h->release_error = error;
  h->release_done = TRUE;
  pthread_mutex_unlock (&h->mu);
  holder_wake (h);
  return NULL;
}

static void
holder_request_release (Holder *h)
{
  pthread_mutex_lock (&h->mu);
  h->release_requested = TRUE;
  pthread_cond_signal (&h->cond);
  pthread_mutex_unlock (&h->mu);
}

/* Called from a library thread: only record and wake the main loop. */
static void
on_lease_lost (RedisLock *lock, gpointer user_data)
{
  Holder *h = user_data;
  gint64 now = g_get_monotonic_time ();

  pthread_mutex_lock (&h->mu);
  if (!h->lease_lost)
    {
      h->lease_lost_us = now;
      /* NULL: the read-write lock's lease or the permit (the only one then), named by
       * st->name */
      h->lost_name = lock != NULL ? g_strdup (redis_lock_get_name (lock)) : NULL;
    }
  h->lease_lost = TRUE;
  pthread_mutex_unlock (&h->mu);
  holder_wake (h);
}


static int ttou_disposition_ignored;
static pid_t redislock_pid;
static int child_tty_fd = -1; /* for child_setup(): the terminal to take, or -1 */

/* In the child between fork and exec (async-signal-safe calls only): become the leader
 * of a process group of its own, and its terminal's foreground group when redislock was
 * (so that Ctrl-C reaches the command once, from the terminal, and redislock not at all);
 * give SIGTTOU and SIGPIPE back their inherited dispositions (redislock ignores SIGTTOU
 * to hand the terminal over from the background, and SIGPIPE so that a dropped Redis
 * connection is an error, not a death); and on Linux have the command killed if
 * redislock dies without ending it: nothing would renew the lease any more. */
static void
child_setup (gpointer data)
{
  setpgid (0, 0);
  if (child_tty_fd >= 0)
    tcsetpgrp (child_tty_fd, getpid ());
  signal (SIGTTOU, ttou_disposition_ignored ? SIG_IGN : SIG_DFL);
  signal (SIGPIPE, pipe_disposition_ignored ? SIG_IGN : SIG_DFL);
#ifdef __linux__
  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != redislock_pid)
    _exit (EXIT_CANNOT_EXEC);
#endif
}

/* Sends @signum to the command's process group (the command and what it started), and
 * to the command itself should it have left that group. */
static void
signal_command (RunState *st, int signum)
{
  if (kill (-st->child, signum) != 0 || getpgid (st->child) != st->child)
    kill (st->child, signum);
}

static gboolean
terminal_owned_by (RunState *st, pid_t pgrp)
{
  return st->tty_fd >= 0 && tcgetpgrp (st->tty_fd) == pgrp;
}

/* Makes @pgrp the terminal's foreground process group (SIGTTOU is ignored, so this works
 * from the background too). */
static void
give_terminal (RunState *st, pid_t pgrp)
{
  if (st->tty_fd >= 0)
    while (tcsetpgrp (st->tty_fd, pgrp) != 0 && errno == EINTR)
      ;
}

/* redislock was continued, or is in the foreground again: so is the command. */
static void
resume_command (RunState *st)
{
  if (!st->child_running)
    return;
  if (terminal_owned_by (st, getpgrp ()))
    give_terminal (st, st->child);
  if (st->child_stopped)
    {
      st->child_stopped = FALSE;
      signal_command (st, SIGCONT);
    }
}

/* The command stopped. When it had the terminal (Ctrl-Z), or wanted it from the
 * background (SIGTTIN, SIGTTOU), redislock takes the terminal back and stops its own
 * job too, so that the shell sees the job stopped and can resume it with fg or bg; if
 * redislock has the terminal itself (it was brought to the foreground while the
 * command was not), the command just gets it. A stop by anyone else (a debugger,
 * SIGSTOP) is left alone. */
static void
handle_child_stopped (RunState *st, int signum)
{
  gboolean had_terminal = terminal_owned_by (st, st->child);
  gboolean wants_terminal = st->tty_fd >= 0 && (signum == SIGTTIN || signum == SIGTTOU);

  st->child_stopped = TRUE;
  if (!had_terminal && !wants_terminal)
    return;
  if (wants_terminal && terminal_owned_by (st, getpgrp ()))
    {
      resume_command (st);
      return;
    }
  if (had_terminal)
    give_terminal (st, getpgrp ());
  /* Returns once continued; at once when this job is orphaned or ignores SIGTSTP. */
  kill (0, SIGTSTP);
  if (terminal_owned_by (st, getpgrp ()))
    resume_command (st);
}

static void
handle_child_exit (RunState *st, int wait_status)
{
  st->child_running = FALSE;
  if (WIFEXITED (wait_status))
    st->child_status = WEXITSTATUS (wait_status);
  else if (WIFSIGNALED (wait_status))
    st->child_status = 128 + WTERMSIG (wait_status);
  else
    st->child_status = EXIT_CANNOT_EXEC;
  g_spawn_close_pid (st->child);
  if (terminal_owned_by (st, st->child))
    give_terminal (st, getpgrp ());
  if (st->kill_timer)
    {
      /* The lease is lost: whatever the command left running works without the lock. */
      g_source_remove (st->kill_timer);
      st->kill_timer = 0;
      kill (-st->child, SIGKILL);
    }
  holder_request_release (st->holder);
}

/* Collects what happened to the command (SIGCHLD woke the main loop). */
static void
check_child (RunState *st)
{
  while (st->child_running)
    {
      int wait_status = 0;
      pid_t pid = waitpid (st->child, &wait_status, WNOHANG | WUNTRACED | WCONTINUED);

      if (pid == 0)
        break;
      if (pid < 0 && errno == EINTR)
        continue;
      if (pid < 0)
        handle_child_exit (st, 0xff00); /* reaped elsewhere: status unknown */
      else if (WIFSTOPPED (wait_status))
        handle_child_stopped (st, WSTOPSIG (wait_status));
      else if (WIFCONTINUED (wait_status))
        st->child_stopped = FALSE;
      else
        handle_child_exit (st, wait_status);
    }
}

static gboolean
on_kill_timer (gpointer data)
{
  RunState *st = data;

  st->kill_timer = 0;
  if (st->child_running)
    {
      g_autofree char *grace = format_duration (st->kill_after_us / 1000);

      die_message ("the command did not end within %s of SIGTERM; sending SIGKILL", grace);
      signal_command (st, SIGKILL);
    }
  return G_SOURCE_REMOVE;
}

/* One line per lock held (one lock: no newline), for the command's environment. */
static char *
join_lines (const Holder *h, const char *(*item) (const Holder *h, guint i, char buf[24]))
{
  GString *out = g_string_new (NULL);
  char buf[24];

  for (guint i = 0; i < h->n_locks; i++)
    {
      if (i > 0)
        g_string_append_c (out, '\n');
      g_string_append (out, item (h, i, buf));
    }
  return g_string_free (out, FALSE);
}

static const char *
item_key (const Holder *h, guint i, char buf[24])
{
  /* --permits: the key of the permit held (set before acquire_done) */
  if (h->semaphore != NULL)
    return redis_permit_get_key (h->permit);
  return redis_lock_get_key (h->locks[i]);
}

static const char *
item_name (const Holder *h, guint i, char buf[24])
{
  if (h->semaphore != NULL)
    return redis_semaphore_get_name (h->semaphore);
  return redis_lock_get_name (h->locks[i]);
}

/* written by the holder thread before acquire_done, which on_wake() read under the
 * mutex */
static const char *
item_owner (const Holder *h, guint i, char buf[24])
{
  return h->lease_values[i] != NULL ? h->lease_values[i] : "";
}

static const char *
item_token (const Holder *h, guint i, char buf[24])
{
  g_snprintf (buf, 24, "%" G_GUINT64_FORMAT, h->tokens[i]);
  return buf;
}

static void
start_command (RunState *st)
{
  g_autoptr (GError) error = NULL;
  g_auto (GStrv) env = g_get_environ ();
  g_autofree char *keys = join_lines (st->holder, item_key);
  g_autofree char *owners = join_lines (st->holder, item_owner);
  g_autofree char *names = join_lines (st->holder, item_name);
  gboolean spawned;

  /* With several locks, each variable has one line per lock, in the order given. */
  env = g_environ_setenv (env, "REDIS_LOCK_KEY", keys, TRUE);
  env = g_environ_setenv (env, "REDIS_LOCK_OWNER", owners, TRUE);
  env = g_environ_setenv (env, "REDIS_LOCK_NAME", names, TRUE);
  if (st->holder->rw != NULL)
    {
      /* A read hold: the lease is the registry's, shared with its other readers. */
      env = g_environ_setenv (env, "REDIS_LOCK_NAME", st->name, TRUE);
      env = g_environ_unsetenv (env, "REDIS_LOCK_KEY");
      env = g_environ_unsetenv (env, "REDIS_LOCK_OWNER");
    }
  if (redis_lock_registry_get_fencing (st->registry))
    {
      g_autofree char *tokens = join_lines (st->holder, item_token);
      env = g_environ_setenv (env, "REDIS_LOCK_TOKEN", tokens, TRUE);
    }
  else
    env = g_environ_unsetenv (env, "REDIS_LOCK_TOKEN");
  /* The command's group gets the terminal only if redislock's group has it: a job in the
   * background stays there. */
  child_tty_fd = terminal_owned_by (st, getpgrp ()) ? st->tty_fd : -1;
  spawned = g_spawn_async (NULL, st->command, env,
                           G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_SEARCH_PATH
                             | G_SPAWN_CHILD_INHERITS_STDIN,
                           child_setup, NULL, &st->child, &error);
  child_tty_fd = -1;
  if (!spawned)
    {
      g_autofree char *shown = escape_for_display (st->command[0]);

      die_message ("cannot run %s: %s", shown, error->message);
      st->exit_status = g_error_matches (error, G_SPAWN_ERROR, G_SPAWN_ERROR_NOENT)
                          ? EXIT_NOT_FOUND
                          : EXIT_CANNOT_EXEC;
      holder_request_release (st->holder);
      return;
    }
  st->child_running = TRUE;
  check_child (st);
}

/* Tells why the lock was not acquired, with the holder when the store says who it is. */
static void
report_not_acquired (RunState *st)
{
  g_autofree char *name = NULL;
  g_autofree char *holder = NULL;
  g_autofree char *waited = format_duration (st->holder->wait_ms);
  RedisLockLeaseInfo *lease = NULL;

  if (st->holder->semaphore != NULL)
    {
      g_autofree char *shown = escape_for_display (st->name);
      die_message ("no permit of semaphore '%s' came free within %s", shown, waited);
      return;
    }
  /* Of several locks, the first that the store says is held. */
  for (guint i = 0; lease == NULL && st->names[i] != NULL; i++)
    {
      /* A read-write lock's holders are not a plain lease's. */
      if (st->holder->rw == NULL)
        lease = redis_lock_registry_get_lease_info (st->registry, st->names[i], NULL);
      if (lease != NULL || st->names[i + 1] == NULL)
        name = escape_for_display (st->names[i]);
    }

  if (lease != NULL)
    {
      g_autofree char *shown = escape_for_display (lease->owner);

      holder = g_strdup_printf (" (held by %s)", shown);
      redis_lock_lease_info_free (lease);
    }
  if (st->holder->wait_ms == 0)
    die_message ("lock '%s' is busy%s", name, holder ? holder : "");
  else
    die_message ("timed out after %s waiting for lock '%s'%s", waited, name, holder ? holder : "");
}

static void
handle_acquired (RunState *st, gboolean acquired, const GError *error)
{
  st->acquire_handled = TRUE;
  if (!acquired)
    {
      if (st->interrupted_by)
        st->exit_status = 128 + st->interrupted_by;
      else if (error != NULL)
        {
          die_message ("%s", error->message);
          st->exit_status = exit_status_for_error (error);
        }
      else
        {
          report_not_acquired (st);
          st->exit_status = EXIT_NOT_ACQUIRED;
        }
      holder_request_release (st->holder);
      return;
    }
  if (st->interrupted_by)
    {
      st->exit_status = 128 + st->interrupted_by;
      holder_request_release (st->holder);
      return;
    }
  start_command (st);
}

/* SIGTERM now, SIGKILL once the grace is over, counted from the loss report: by then at
 * the latest, since the grace is at most the lease margin, before the key can expire. */
static void
handle_lease_lost (RunState *st, gint64 lost_us)
{
  g_autofree char *name = NULL;
  g_autofree char *grace = format_duration (st->kill_after_us / 1000);
  gint64 remaining_us;

  pthread_mutex_lock (&st->holder->mu);
  name = escape_for_display (st->holder->lost_name != NULL ? st->holder->lost_name : st->name);
  pthread_mutex_unlock (&st->holder->mu);

  st->lease_lost_handled = TRUE;
  if (!st->child_running)
    return;
  die_message ("lost the lease on lock '%s'; terminating the command (SIGKILL in %s at most)",
               name, grace);
  signal_command (st, SIGTERM);
  if (st->child_stopped)
    {
      st->child_stopped = FALSE;
      signal_command (st, SIGCONT);
    }
  remaining_us = lost_us + st->kill_after_us - g_get_monotonic_time ();
  if (remaining_us <= 0)
    on_kill_timer (st);
  else
    st->kill_timer = g_timeout_add ((guint) MIN (remaining_us / 1000, (gint64) G_MAXUINT),
                                    on_kill_timer, st);
}

static gboolean
on_wake (int fd, GIOCondition condition, gpointer data)
{
  RunState *st = data;
  Holder *h = st->holder;
  char buf[64];
  gboolean acquire_done, acquired, lease_lost, release_done;
  gint64 lease_lost_us;
  GError *acquire_error;

  while (read (fd, buf, sizeof buf) > 0)
    ;
  pthread_mutex_lock (&h->mu);
  acquire_done = h->acquire_done;
  acquired = h->acquired;
  acquire_error = h->acquire_error;
  lease_lost = h->lease_lost;
  lease_lost_us = h->lease_lost_us;
  release_done = h->release_done;
  pthread_mutex_unlock (&h->mu);

  if (acquire_done && !st->acquire_handled)
    handle_acquired (st, acquired, acquire_error);
  if (lease_lost && !st->lease_lost_handled && st->acquire_handled)
    handle_lease_lost (st, lease_lost_us);
  if (release_done)
    g_main_loop_quit (st->loop);
  return G_SOURCE_CONTINUE;
}

/* Signals reach the main loop through a pipe (the handler only writes the signal
 * number), from the start of `run`, so one that arrives while redislock connects to
 * Redis is not lost: the forwarded ones, SIGCHLD (the command stopped or ended) and
 * SIGCONT (redislock was resumed). */
static const int forwarded_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 };
static int signal_pipe[2] = { -1, -1 };

static void
on_unix_signal (int signum)
{
  int saved_errno = errno;
  unsigned char b = (unsigned char) signum;

  if (getpid () != redislock_pid)
    {
      /* the command between fork and exec: the signal is its own */
      signal (signum, SIG_DFL);
      raise (signum);
      errno = saved_errno;
      return;
    }
  if (write (signal_pipe[1], &b, 1) < 0)
    {
      /* pipe full: the main loop has plenty of signals to act on already */
    }
  errno = saved_errno;
}

static gboolean
on_signal_pipe (int fd, GIOCondition condition, gpointer data)
{
  RunState *st = data;
  unsigned char buf[32];
  ssize_t n, i;

  while ((n = read (fd, buf, sizeof buf)) > 0)
    for (i = 0; i < n; i++)
      {
        int signum = buf[i];

        if (signum == SIGCHLD)
          continue; /* below */
        if (signum == SIGCONT)
          resume_command (st);
        else if (st->child_running)
          signal_command (st, signum);
        else if (!st->acquire_handled)
          {
            if (!st->interrupted_by)
              st->interrupted_by = signum;
            g_cancellable_cancel (st->holder->cancellable);
          }
      }
  check_child (st);
  return G_SOURCE_CONTINUE;
}

/* A signal ignored by whoever started redislock stays ignored (as nohup expects); SIGCHLD
 * is always caught, to learn when the command stops or ends. SIGTTOU is ignored, to hand
 * the terminal over from the background and write to it while the command has it. */
static gboolean
install_signal_handlers (void)
{
  struct sigaction sa;
  gsize i;

  redislock_pid = getpid ();
  if (!g_unix_open_pipe (signal_pipe, FD_CLOEXEC, NULL)
      || !g_unix_set_fd_nonblocking (signal_pipe[0], TRUE, NULL)
      || !g_unix_set_fd_nonblocking (signal_pipe[1], TRUE, NULL))
    return FALSE;
  memset (&sa, 0, sizeof sa);
  sa.sa_handler = on_unix_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset (&sa.sa_mask);
  for (i = 0; i < G_N_ELEMENTS (forwarded_signals); i++)
    if (!signal_is_ignored (forwarded_signals[i]))
      sigaction (forwarded_signals[i], &sa, NULL);
  if (!signal_is_ignored (SIGCONT))
    sigaction (SIGCONT, &sa, NULL);
  sigaction (SIGCHLD, &sa, NULL);
  ttou_disposition_ignored = signal_is_ignored (SIGTTOU);
  signal (SIGTTOU, SIG_IGN);
  return TRUE;
}


/* A holder for @lock, its wake-up pipe open; NULL (errno set) when the pipe cannot be
 * made. */
static Holder *
holder_new (RedisLock **locks, guint n_locks, const RunArgs *args, GCancellable *cancellable)
{
  Holder *h = g_new0 (Holder, 1);

  if (!g_unix_open_pipe (h->wake_fd, FD_CLOEXEC, NULL)
      || !g_unix_set_fd_nonblocking (h->wake_fd[0], TRUE, NULL)
      || !g_unix_set_fd_nonblocking (h->wake_fd[1], TRUE, NULL))
    {
      g_free (h);
      return NULL;
    }
  pthread_mutex_init (&h->mu, NULL);
  pthread_cond_init (&h->cond, NULL);
  h->locks = locks;
  h->n_locks = n_locks;
  h->wait_ms = args->wait_ms;
  h->ttl_ms = args->ttl_ms;
  h->cancellable = cancellable;
  return h;
}

static void
holder_free (Holder *h)
{
  g_clear_error (&h->acquire_error);
  g_clear_error (&h->release_error);
  g_strfreev (h->lease_values);
  g_free (h->tokens);
  g_free (h->lost_name);
  close (h->wake_fd[0]);
  close (h->wake_fd[1]);
  pthread_mutex_destroy (&h->mu);
  pthread_cond_destroy (&h->cond);
  g_free (h);
}

/* Takes the lock on the holder thread and runs the command, until the lock is released
 * (or was never taken): the main loop of `run`. */
static void
run_holder (RunState *st)
{
  Holder *h = st->holder;
  guint wake_source, signal_source;
  GThread *thread;

  st->exit_status = -1;
  st->tty_fd = open ("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  wake_source = g_unix_fd_add (h->wake_fd[0], G_IO_IN, on_wake, st);
  signal_source = g_unix_fd_add (signal_pipe[0], G_IO_IN, on_signal_pipe, st);

  thread = g_thread_new ("redislock-holder", holder_thread, h);
  g_main_loop_run (st->loop);
  g_thread_join (thread);

  g_source_remove (signal_source);
  g_source_remove (wake_source);
  if (st->tty_fd >= 0)
    close (st->tty_fd);
}

/* The exit status of `run` once the lock is released, with the message it calls for. */
static int
run_result (const RunState *st)
{
  const Holder *h = st->holder;
  gboolean lease_lost;

  if (st->exit_status >= 0)
    return st->exit_status;
  lease_lost = h->lease_lost
               || g_error_matches (h->release_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  if (lease_lost)
    {
      if (!st->lease_lost_handled)
        {
          g_autofree char *shown
              = escape_for_display (h->lost_name != NULL ? h->lost_name : st->name);

          die_message ("lost the lease on lock '%s' while the command ran", shown);
        }
      return EXIT_LEASE_LOST;
    }
  if (h->release_error != NULL)
    die_message ("warning: releasing the lock failed (it expires by its TTL): %s",
                 h->release_error->message);
  return st->child_status;
}

/* Unrefs the @n locks of @locks and frees the array. */
static void
free_locks (RedisLock **locks, guint n)
{
  for (guint i = 0; locks != NULL && i < n; i++)
    redis_lock_unref (locks[i]);
  g_free (locks);
}

/* Holds @locks (@n of them, transfer full) of @registry, or with @rw (transfer full;
 * @locks NULL, @n 0) a read hold of it, or with @semaphore (transfer full; @locks NULL,
 * @n 1) one permit of it, while the command runs, then closes the registry; returns the
 * exit status of `run`. */
static int
run_with_locks (RedisLockRegistry *registry, RedisLock **locks, guint n, RedisRWLock *rw,
                RedisSemaphore *semaphore, const RunArgs *args)
{
  g_autoptr (GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  RunState st = { 0 };
  Holder *h;
  int result;

  h = holder_new (locks, n, args, cancellable);
  if (h == NULL)
    {
      die_message ("cannot create a pipe: %s", g_strerror (errno));
      free_locks (locks, n);
      g_clear_pointer (&rw, redis_rw_lock_unref);
      g_clear_pointer (&semaphore, redis_semaphore_unref);
      return EXIT_REDIS;
    }
  h->rw = rw;
  h->semaphore = semaphore;
  redis_lock_registry_set_lease_lost_callback (registry, on_lease_lost, h, NULL);
  st.holder = h;
  st.loop = loop;
  st.registry = registry;
  st.name = g_ptr_array_index (args->names, 0);
  st.names = (const char *const *) args->names->pdata;
  st.command = args->command;
  st.kill_after_us = MIN (args->kill_after_ms * 1000, lease_margin_us (args->ttl_ms));
  run_holder (&st);
  result = run_result (&st);

  /* The registry's threads stop before the state they may call back into is freed. */
  redis_lock_registry_set_lease_lost_callback (registry, NULL, NULL, NULL);
  free_locks (locks, n);
  g_clear_pointer (&rw, redis_rw_lock_unref);
  redis_lock_registry_close (registry);
  holder_free (h);
  g_clear_pointer (&semaphore, redis_semaphore_unref);
  return result;
}

int
cmd_run (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  RedisLock **locks;
  RunArgs args = { 0 };
  guint n;
  int rc;

  rc = parse_run_arguments (argc, argv, &args);
  if (rc >= 0)
    goto out;
  if (!install_signal_handlers ())
    {
      die_message ("cannot create a pipe: %s", g_strerror (errno));
      rc = EXIT_REDIS;
      goto out;
    }
  registry = tool_registry_new (&error);
  if (registry == NULL)
    {
      die_message ("%s", error->message);
      rc = exit_status_for_error (error);
      goto out;
    }
  if (args.min_replicas > 0)
    redis_lock_registry_set_min_replicas (registry, args.min_replicas, MIN_REPLICAS_TIMEOUT_MS);
  redis_lock_registry_set_fencing (registry, args.fencing);
  redis_lock_registry_set_wait_queue (registry, args.wait_queue);
  /* try_lock_all takes the registry's TTL. */
  redis_lock_registry_set_expire_after_ms (registry, args.ttl_ms);
  if (args.read)
    {
      RedisRWLock *rw = redis_lock_registry_obtain_rw (registry, args.names->pdata[0], &error);
      if (rw == NULL)
        {
          die_message ("%s", error->message);
          rc = exit_status_for_error (error);
          goto out;
        }
      rc = run_with_locks (registry, NULL, 0, rw, NULL, &args);
      goto out;
    }
  if (args.permits > 0)
    {
      RedisSemaphore *semaphore = redis_lock_registry_obtain_semaphore (
          registry, g_ptr_array_index (args.names, 0), args.permits, &error);
      if (semaphore == NULL)
        {
          die_message ("%s", error->message);
          rc = exit_status_for_error (error);
          goto out;
        }
      rc = run_with_locks (registry, NULL, 1, NULL, semaphore, &args);
      goto out;
    }
  n = args.names->len - 1;
  locks = g_new0 (RedisLock *, n);
  for (guint i = 0; i < n; i++)
    {
      locks[i] = redis_lock_registry_obtain (registry, g_ptr_array_index (args.names, i), &error);
      if (locks[i] == NULL)
        {
          die_message ("%s", error->message);
          rc = exit_status_for_error (error);
          free_locks (locks, i);
          goto out;
        }
    }
  rc = run_with_locks (registry, locks, n, NULL, NULL, &args);

out:
  if (args.names != NULL)
    g_ptr_array_unref (args.names);
  return rc;
}
