/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-handoff.c: a lock handed from one process to another, in both wait modes.
 *
 * A cross-process hand-off needs the release, the unlock notification and the
 * waiter's acquire, so it is compared with raw round trips and with the same ping-pong
 * done by hand (a release script that publishes, a process blocked reading SUBSCRIBE,
 * one SET NX PX): the floor.
 * The other process is a second copy of this program (`--child=handoff`, started with
 * exec so that it never inherits a registry across fork()), and the two ping-pong one
 * lock.
 * Each side tells the other through a pipe that it is about to wait, and the holder
 * keeps the lock HANDOFF_HOLD_US longer so the waiter is really blocked in Redis when
 * the release happens; the waiter's `contended_attempts` counter confirms each wait,
 * and hand-offs it does not confirm are left out. Both processes read the same
 * CLOCK_MONOTONIC, so "release returned in A" and "acquire returned in B" subtract.
 * That latency depends on when A runs again after its reply, which the waiter's wake-up
 * races: so each hand-off is also timed from the release's call, which nothing after
 * it can move, and the floor's blocks are reported by state too (handoff_floor_states()). The
 * holder times two raw round trips at the start of each hold, so the baseline is
 * measured in the same conditions as the hand-offs, interleaved with them.
 * The floor is interleaved with the library in the same way, on a coarser grain: in
 * PUBSUB mode the parent runs HANDOFF_BLOCKS blocks of the library's ping-pong, each
 * followed by a block of the floor with as many hand-offs, every block with a child of
 * its own and warm-up hand-offs of its own. On a busy machine the ratio of two
 * measurements made one after the other says more about the machine than about the
 * code; blocks that alternate see the same load, short of its faster changes. The rows
 * pool the counted hand-offs of all blocks of each kind, and the median over the blocks
 * of (library p50 / floor p50) shows how steady the ratio is.
 *
 * The file reads top-down: the messages of the pipe protocol, the two roles of the
 * ping-pong, the child process and its floor variant, then the parent's runs.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* Hand-offs at the start of a ping-pong run that are not counted (subscription set-up,
 * first connections). */
#define HANDOFF_WARMUP 10

/* PUBSUB mode: pairs of blocks (the library's ping-pong, then the floor's), each block
 * with b->handoffs / HANDOFF_BLOCKS counted hand-offs. */
#define HANDOFF_BLOCKS 10

/* No word from the other process, or no acquisition, for this long is a failure. */
#define HANDOFF_TIMEOUT_MS 10000

/* --- The pipe protocol ------------------------------------------------------------- */

/* The ping-pong protocol between the two processes. Every message is one Msg written
 * whole to a pipe (smaller than PIPE_BUF, so never split). */
typedef struct
{
  gint32 kind;
  gint32 waited; /* MSG_ACQUIRED: the acquisition found the lock held first */
  gint64 value;  /* MSG_RELEASED: CLOCK_MONOTONIC ns; MSG_ACQUIRED: hand-off latency, ns */
  gint64 called; /* MSG_RELEASED: when the release was called; MSG_ACQUIRED: the
                    latency from then, ns */
} Msg;

enum
{
  MSG_WAITING = 'W',  /* "I am about to lock: keep holding for a moment" */
  MSG_RELEASED = 'R', /* "my unlock returned at value" */
  MSG_ACQUIRED = 'A', /* "my lock returned, value ns after your unlock did" */
};

static gboolean
msg_send (int fd, char kind, gboolean waited, gint64 value, gint64 called, GError **error)
{
  Msg m;
  ssize_t n;

  memset (&m, 0, sizeof m);
  m.kind = kind;
  m.waited = waited ? 1 : 0;
  m.value = value;
  m.called = called;
  do
    n = write (fd, &m, sizeof m);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof m)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE,
                   "cannot write to the other process: %s",
                   n < 0 ? g_strerror (errno) : "short write");
      return FALSE;
    }
  return TRUE;
}

static gboolean
msg_expect (int fd, char kind, Msg *m, GError **error)
{
  gsize done = 0;

  while (done < sizeof *m)
    {
      struct pollfd p = { fd, POLLIN, 0 };
      ssize_t n;
      int ready = poll (&p, 1, HANDOFF_TIMEOUT_MS);

      if (ready < 0 && errno == EINTR)
        continue;
      if (ready <= 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                       "no word from the other process for %d ms", HANDOFF_TIMEOUT_MS);
          return FALSE;
        }
      n = read (fd, (char *)m + done, sizeof *m - done);
      if (n < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (n <= 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE,
                       "the other process went away (see its messages above)");
          return FALSE;
        }
      done += (gsize)n;
    }
  if (m->kind != kind)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "protocol error: expected '%c' from the other process, got '%c'", kind,
                   (char)m->kind);
      return FALSE;
    }
  return TRUE;
}

/* --- The two roles of the ping-pong ------------------------------------------------ */

/* One side of the ping-pong: the parent's or the child's. */
typedef struct
{
  RedisLockRegistry *registry;
  RedisLock *lock;
  int in_fd;
  int out_fd;
  gint64 hold_us;
  gboolean held;
  /* per hand-off results, kept by the parent only (NULL in the child): from the
   * release's return, and from its call */
  gint64 *latency_ns;
  gint64 *from_call_ns;
  gboolean *waited;
  /* the parent measures raw round trips while it holds the lock (NULL in the child) */
  RawConn *raw;
  gint64 *raw_samples;
  guint n_raw;
} PingPong;

static void
pingpong_record (PingPong *pp, guint step, gint64 latency_ns, gint64 from_call_ns,
                 gboolean waited)
{
  if (pp->latency_ns == NULL)
    return;
  pp->latency_ns[step] = latency_ns;
  pp->from_call_ns[step] = from_call_ns;
  pp->waited[step] = waited;
}

/* The holder's idle time, hold_us. The parent spends the start of it timing two raw
 * round trips: a baseline taken in the same conditions as the hand-offs (the peer
 * blocked, both processes alive), interleaved with them. */
static gboolean
pingpong_idle (PingPong *pp, GError **error)
{
  gint64 until = now_ns () + pp->hold_us * 1000;
  gint64 left;
  guint k;

  for (k = 0; pp->raw != NULL && k < 2; k++)
    {
      gint64 t0 = now_ns ();

      if (!raw_call (pp->raw, error))
        return FALSE;
      pp->raw_samples[pp->n_raw++] = now_ns () - t0;
    }
  left = until - now_ns ();
  if (left > 0)
    g_usleep ((gulong)(left / 1000));
  return TRUE;
}

/* Holds the lock: waits until the peer is about to lock, keeps holding for hold_us so
 * the peer is blocked in its wait, releases, and learns the hand-off latency. */
static gboolean
pingpong_hold (PingPong *pp, guint step, GError **error)
{
  Msg m;
  gint64 called, released;

  if (!msg_expect (pp->in_fd, MSG_WAITING, &m, error) || !pingpong_idle (pp, error))
    return FALSE;
  pp->held = FALSE;
  called = now_ns ();
  if (!redis_lock_unlock (pp->lock, error))
    return FALSE;
  released = now_ns ();
  if (!msg_send (pp->out_fd, MSG_RELEASED, FALSE, released, called, error))
    return FALSE;
  if (!msg_expect (pp->in_fd, MSG_ACQUIRED, &m, error))
    return FALSE;
  pingpong_record (pp, step, m.value, m.called, m.waited != 0);
  return TRUE;
}

/* Waits for the lock the peer holds, then measures the hand-off from the peer's
 * release. The acquisition counts as a real wait when the registry's
 * contended_attempts moved during it (the first attempt found the lock held). A
 * try_lock_for with a generous bound waits exactly as redis_lock_lock() does, but turns
 * a lost wake-up into a reported failure instead of a hung benchmark. */
static gboolean
pingpong_wait (PingPong *pp, guint step, GError **error)
{
  RedisLockRegistryStats before, after;
  gint64 acquired, latency;
  gboolean waited;
  Msg m;

  redis_lock_registry_get_stats (pp->registry, &before);
  if (!msg_send (pp->out_fd, MSG_WAITING, FALSE, 0, 0, error))
    return FALSE;
  if (!redis_lock_try_lock_for (pp->lock, HANDOFF_TIMEOUT_MS, NULL, error))
    {
      if (error != NULL && *error == NULL)
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                     "the lock released by the other process was not acquired within %d ms",
                     HANDOFF_TIMEOUT_MS);
      return FALSE;
    }
  acquired = now_ns ();
  pp->held = TRUE;
  redis_lock_registry_get_stats (pp->registry, &after);
  waited = after.contended_attempts > before.contended_attempts;
  if (!msg_expect (pp->in_fd, MSG_RELEASED, &m, error))
    return FALSE;
  latency = acquired - m.value;
  if (!msg_send (pp->out_fd, MSG_ACQUIRED, waited, latency, acquired - m.called, error))
    return FALSE;
  pingpong_record (pp, step, latency, acquired - m.called, waited);
  return TRUE;
}

/* Runs @steps hand-offs, alternating roles; the side that starts as holder must hold
 * the lock already. Whoever holds at the end unlocks. */
static gboolean
pingpong_run (PingPong *pp, guint steps, gboolean first_holder, GError **error)
{
  gboolean ok = TRUE;
  guint i;

  for (i = 0; ok && i < steps; i++)
    {
      gboolean holder = ((i % 2) == 0) == (first_holder != FALSE);

      ok = holder ? pingpong_hold (pp, i, error) : pingpong_wait (pp, i, error);
    }
  if (pp->held)
    {
      g_autoptr (GError) local = NULL;

      pp->held = FALSE;
      if (!redis_lock_unlock (pp->lock, ok ? error : &local))
        ok = FALSE;
    }
  return ok;
}

/* --- The child process ------------------------------------------------------------- */

/* The floor, the child's side: the same hand-off shape without the library. The child
 * blocks reading a SUBSCRIBE connection; the parent's release (the hand-made release
 * script: GET, UNLINK, PUBLISH) wakes it and it takes the key with one `SET NX PX`, as a
 * waiter woken by an unlock notification makes one acquire attempt; the SET must
 * succeed. Once it has reported, it deletes the key again (untimed) for the next hold. */
static gboolean
floor_child (guint steps, int in_fd, int out_fd, GError **error)
{
  const char *url = g_getenv ("REDISLOCK_BENCH_URL");
  g_autofree char *channel = g_strdup_printf ("%s-floor", g_getenv ("REDISLOCK_BENCH_KEY"));
  g_autofree char *key = g_strdup_printf ("%s-floor:lock", g_getenv ("REDISLOCK_BENCH_KEY"));
  g_autoptr (RawConn) cmd = NULL;
  redisContext *sub = NULL;
  redisReply *reply = NULL;
  RawTarget t;
  gboolean ok = FALSE;
  guint i;

  if (!raw_target_parse (url != NULL && *url != '\0' ? url : NULL, &t, error))
    return FALSE;
  cmd = raw_open (&t, error);
  sub = cmd != NULL ? raw_connect (&t, error) : NULL;
  if (sub == NULL)
    goto out;
  reply = raw_command (sub, error, "SUBSCRIBE %s", channel);
  if (reply == NULL)
    goto out;
  freeReplyObject (reply);
  for (i = 0; i < steps; i++)
    {
      Msg m;
      gint64 acquired;
      gboolean taken;

      if (!msg_send (out_fd, MSG_WAITING, FALSE, 0, 0, error))
        goto out;
      if (redisGetReply (sub, (void **)&reply) != REDIS_OK)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", sub->errstr);
          goto out;
        }
      freeReplyObject (reply);
      reply = raw_command (cmd->c, error, "SET %s floor-child NX PX 30000", key);
      if (reply == NULL)
        goto out;
      acquired = now_ns ();
      taken = reply->type == REDIS_REPLY_STATUS;
      freeReplyObject (reply);
      if (!taken)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "the floor's SET NX found the key still held");
          goto out;
        }
      if (!msg_expect (in_fd, MSG_RELEASED, &m, error)
          || !msg_send (out_fd, MSG_ACQUIRED, TRUE, acquired - m.value, acquired - m.called,
                        error))
        goto out;
      reply = raw_command (cmd->c, error, "DEL %s", key);
      if (reply == NULL)
        goto out;
      freeReplyObject (reply);
    }
  ok = TRUE;
out:
  if (sub != NULL)
    redisFree (sub);
  raw_target_clear (&t);
  return ok;
}

/* The other side of the hand-off: `redislock-bench --child=handoff`, started with exec
 * by the parent, stdin and stdout being the pipes. The URL and registry key come from
 * the environment so that a password never shows in the process list. Mode "raw" runs
 * the floor instead of the library. */
int
handoff_child (const char *mode, const char *name, guint steps, gint64 hold_us)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  const char *url = g_getenv ("REDISLOCK_BENCH_URL");
  const char *key = g_getenv ("REDISLOCK_BENCH_KEY");
  PingPong pp;

  memset (&pp, 0, sizeof pp);
  /* Keep the protocol pipe for ourselves; anything else printed goes to stderr. */
  pp.in_fd = dup (STDIN_FILENO);
  pp.out_fd = dup (STDOUT_FILENO);
  dup2 (STDERR_FILENO, STDOUT_FILENO);
  pp.hold_us = hold_us;

  if (g_strcmp0 (mode, "raw") == 0)
    {
      if (!floor_child (steps, pp.in_fd, pp.out_fd, &error))
        goto fail;
      return 0;
    }
  registry = redis_lock_registry_new (url != NULL && *url != '\0' ? url : NULL,
                                      key != NULL ? key : "", &error);
  if (registry == NULL)
    goto fail;
  bench_registry_settings (registry);
  redis_lock_registry_set_wait_mode (
      registry, g_strcmp0 (mode, "spin") == 0 ? REDIS_LOCK_WAIT_SPIN : REDIS_LOCK_WAIT_PUBSUB);
  lock = redis_lock_registry_obtain (registry, name, &error);
  if (lock == NULL)
    goto fail;
  pp.registry = registry;
  pp.lock = lock;
  if (!pingpong_run (&pp, steps, FALSE, &error))
    goto fail;
  return 0;

fail:
  g_printerr ("redislock-bench --child=handoff: %s\n", error->message);
  return 1;
}

/* --- The parent's runs ------------------------------------------------------------- */

/* The --child-mode of @mode, also the tail of the lock's name. */
static const char *
wait_mode_name (RedisLockWaitMode mode)
{
  return mode == REDIS_LOCK_WAIT_SPIN ? "spin" : "pubsub";
}

/* Starts `redislock-bench --child=handoff` with pipes for its stdin and stdout. */
static gboolean
child_spawn (Bench *b, const char *mode, const char *name, guint steps, GPid *pid, int *to_child,
             int *from_child, GError **error)
{
  g_autofree char *mode_arg = g_strdup_printf ("--child-mode=%s", mode);
  g_autofree char *name_arg = g_strdup_printf ("--child-name=%s", name);
  g_autofree char *steps_arg = g_strdup_printf ("--child-steps=%u", steps);
  g_autofree char *hold_arg = g_strdup_printf ("--child-hold-us=%d", HANDOFF_HOLD_US);
  const char *argv[] = { b->self_path, "--child=handoff", mode_arg, name_arg, steps_arg, hold_arg,
                         NULL };
  g_auto (GStrv) envp = g_get_environ ();

  envp = g_environ_setenv (envp, "REDISLOCK_BENCH_URL", b->url != NULL ? b->url : "", TRUE);
  envp = g_environ_setenv (envp, "REDISLOCK_BENCH_KEY", b->key, TRUE);
  return g_spawn_async_with_pipes (NULL, (char **)argv, envp, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL,
                                   pid, to_child, from_child, NULL, error);
}

/* Closes the pipes and waits for the child, killing it first when the run failed
 * (@ok FALSE). Returns FALSE with @error set when a run that went well ends with a
 * failed child. */
static gboolean
child_reap (GPid pid, int to_child, int from_child, gboolean ok, GError **error)
{
  int status = 0;

  close (to_child);
  close (from_child);
  if (!ok)
    kill (pid, SIGKILL);
  while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
    ;
  g_spawn_close_pid (pid);
  if (ok && (!WIFEXITED (status) || WEXITSTATUS (status) != 0))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "the child process failed (status %d)",
                   status);
      return FALSE;
    }
  return ok;
}

/* What the parent measured over one or more blocks, each a ping-pong with a child of its
 * own. Block k's hand-offs are entries [k * steps, (k + 1) * steps) of the per-hand-off
 * arrays, and the first HANDOFF_WARMUP of each block are not counted. */
typedef struct
{
  guint blocks;
  guint steps;         /* per block, warm-up included */
  gint64 *latency;     /* the library's hand-offs, ns */
  gboolean *waited;    /* per library hand-off: the waiter confirmed its wait */
  gint64 *raw_samples; /* raw round trips timed at the start of each library hold */
  guint n_raw;
  gint64 *from_call;     /* the same hand-offs from the release's call, ns */
  gint64 *floor_latency; /* the floor's hand-offs, ns, same layout; NULL: no floor */
  gint64 *floor_from_call;
  GError *floor_error;   /* why a floor block failed; no floor figures then */
} HandoffRun;

/* The floor, the parent's side: after the same hold, the hand-made release (GET,
 * UNLINK, PUBLISH in one script, as the library's release), one direction only: the
 * parent takes the key with `SET NX PX` on @raw when the child announces its wait (the
 * child deleted its own hold by then). Block @block of @run: fills its entries of
 * floor_latency. */
static gboolean
floor_run (Bench *b, RawConn *raw, HandoffRun *run, guint block, GError **error)
{
  g_autofree char *channel = g_strdup_printf ("%s-floor", b->key);
  g_autofree char *key = g_strdup_printf ("%s-floor:lock", b->key);
  gint64 *latency = run->floor_latency + block * run->steps;
  gint64 *from_call = run->floor_from_call + block * run->steps;
  GPid pid = 0;
  int to_child = -1, from_child = -1;
  gboolean ok = TRUE;
  guint i;

  if (!child_spawn (b, "raw", "floor", run->steps, &pid, &to_child, &from_child, error))
    return FALSE;
  for (i = 0; ok && i < run->steps; i++)
    {
      redisReply *reply;
      gint64 called;
      Msg m;

      ok = msg_expect (from_child, MSG_WAITING, &m, error);
      if (!ok)
        break;
      reply = raw_command (raw->c, error, "SET %s floor-parent NX PX 30000", key);
      ok = reply != NULL;
      if (ok && reply->type != REDIS_REPLY_STATUS)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "the floor's key was not free");
          ok = FALSE;
        }
      if (reply != NULL)
        freeReplyObject (reply);
      if (!ok)
        break;
      g_usleep (HANDOFF_HOLD_US);
      called = now_ns ();
      reply = raw_command (raw->c, error, "EVALSHA %s 1 %s floor-parent %s", raw->release_sha, key,
                           channel);
      ok = reply != NULL;
      if (ok && (reply->type != REDIS_REPLY_INTEGER || reply->integer != 1))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "the floor's release failed");
          ok = FALSE;
        }
      if (reply != NULL)
        freeReplyObject (reply);
      ok = ok && msg_send (to_child, MSG_RELEASED, FALSE, now_ns (), called, error)
           && msg_expect (from_child, MSG_ACQUIRED, &m, error);
      if (ok)
        {
          latency[i] = m.value;
          from_call[i] = m.called;
        }
    }
  return child_reap (pid, to_child, from_child, ok, error);
}

/* The parent's side of the library hand-off, block @block of @run: locks @lock, starts
 * the child, ping-pongs run->steps hand-offs with it and reaps it. FALSE with @error set
 * when the lock, the child or a hand-off failed. */
static gboolean
handoff_pingpong (Bench *b, RedisLockRegistry *registry, RedisLock *lock, RawConn *raw,
                  RedisLockWaitMode mode, const char *name, HandoffRun *run, guint block,
                  GError **error)
{
  GPid pid = 0;
  int to_child = -1, from_child = -1;
  PingPong pp;
  gboolean ok;

  if (!redis_lock_lock (lock, error))
    return FALSE;
  if (!child_spawn (b, wait_mode_name (mode), name, run->steps, &pid, &to_child, &from_child,
                    error))
    {
      g_autoptr (GError) local = NULL;

      redis_lock_unlock (lock, &local);
      return FALSE;
    }

  memset (&pp, 0, sizeof pp);
  pp.registry = registry;
  pp.lock = lock;
  pp.in_fd = from_child;
  pp.out_fd = to_child;
  pp.hold_us = HANDOFF_HOLD_US;
  pp.held = TRUE;
  pp.latency_ns = run->latency + block * run->steps;
  pp.from_call_ns = run->from_call + block * run->steps;
  pp.waited = run->waited + block * run->steps;
  pp.raw = raw;
  pp.raw_samples = run->raw_samples + run->n_raw;
  ok = pingpong_run (&pp, run->steps, TRUE, error);
  run->n_raw += pp.n_raw;
  return child_reap (pid, to_child, from_child, ok, error);
}

/* Copies into @out the counted hand-offs (warm-ups left out) of the @n blocks of @run
 * from @first on, taken from @latency; with @waited, only those whose wait the waiter
 * confirmed. Returns how many. */
static guint
handoff_counted (const HandoffRun *run, const gint64 *latency, const gboolean *waited, guint first,
                 guint n, gint64 *out)
{
  guint count = 0, k, i;

  for (k = first; k < first + n; k++)
    for (i = k * run->steps + HANDOFF_WARMUP; i < (k + 1) * run->steps; i++)
      if (waited == NULL || waited[i])
        out[count++] = latency[i];
  return count;
}

/* The p50 of the counted hand-offs of block @k, NAN when it has none. */
static double
block_p50 (const HandoffRun *run, const gint64 *latency, const gboolean *waited, guint k,
           gint64 *scratch)
{
  return dist_of (scratch, handoff_counted (run, latency, waited, k, 1, scratch), 1).p50;
}

/* The floor has two states on some machines, block by block (each block is a child
 * process of its own): its waiter's SET NX PX either overlaps the holder's reading of
 * its release reply, and the hand-off takes less than one raw round trip, or it does
 * not, and it takes about two. The library's hand-off has no such overlap to win or
 * lose. The pairs of blocks are split by the floor's block p50 against the raw round
 * trip @rt, and each state is reported with the library's hand-offs of the same pairs,
 * pooled: the ratio the target speaks of is the one against the fast state. */
static void
handoff_floor_states (Section *s, const HandoffRun *run, const gboolean *waited, const Dist *rt)
{
  g_autofree gint64 *scratch = g_new0 (gint64, run->blocks * run->steps);
  g_autofree gint64 *lib = g_new0 (gint64, run->blocks * run->steps);
  g_autofree gint64 *fl = g_new0 (gint64, run->blocks * run->steps);

  for (int fast = 1; fast >= 0; fast--)
    {
      guint n_lib = 0, n_fl = 0, blocks = 0, k;
      Dist dl, df;

      for (k = 0; k < run->blocks; k++)
        {
          double floor_p50 = block_p50 (run, run->floor_latency, NULL, k, scratch);

          if (isnan (floor_p50) || (floor_p50 < rt->p50) != (fast != 0))
            continue;
          blocks++;
          n_lib += handoff_counted (run, run->latency, waited, k, 1, lib + n_lib);
          n_fl += handoff_counted (run, run->floor_latency, NULL, k, 1, fl + n_fl);
        }
      if (n_lib == 0 || n_fl == 0)
        {
          add_note (s, "floor %s one raw round trip in no block", fast ? "below" : "at or above");
          continue;
        }
      dl = dist_of (lib, n_lib, 1);
      df = dist_of (fl, n_fl, 1);
      add_note (s,
                "floor %s one raw round trip in %u of %u blocks: floor p50 %.1f us, library "
                "p50 %.1f us in the same pairs, %.2fx",
                fast ? "below" : "at or above", blocks, run->blocks, df.p50 / 1000,
                dl.p50 / 1000, dl.p50 / df.p50);
    }
}

/* The floor's figures: its pooled distribution, the library's pooled hand-off @d over
 * it, and the same ratio block by block. @waited selects the library's hand-offs as
 * handoff_report() did; @rt is the raw round trip. */
static void
handoff_floor (Section *s, const HandoffRun *run, const gboolean *waited, const Dist *d,
               const Dist *rt)
{
  g_autofree gint64 *scratch = g_new0 (gint64, run->blocks * run->steps);
  g_autofree double *ratios = g_new0 (double, run->blocks);
  g_autoptr (GString) by_block = g_string_new (NULL);
  guint n_ratios = 0, k;
  double med;
  Dist fl, dc, fc;

  if (run->floor_error != NULL)
    {
      add_na (s, "raw hand-off floor", "%s", run->floor_error->message);
      return;
    }
  fl = dist_of (scratch, handoff_counted (run, run->floor_latency, NULL, 0, run->blocks, scratch),
                1);
  add_row (s, "raw hand-off floor p50", fl.p50 / 1000, "us", 1, fl.p50 / rt->p50, "raw p50", NULL,
           FALSE);
  add_row (s, "raw hand-off floor p99", fl.p99 / 1000, "us", 1, fl.p99 / rt->p50, "raw p50", NULL,
           FALSE);
  add_row (s, "hand-off p50 over the floor", (d->p50 - fl.p50) / 1000, "us", 1, d->p50 / fl.p50,
           "raw floor p50", "<= 1.3x", d->p50 <= 1.3 * fl.p50);
  /* From the release's call: what the holder's own wake-up after its reply cannot move. */
  dc = dist_of (scratch, handoff_counted (run, run->from_call, waited, 0, run->blocks, scratch), 1);
  fc = dist_of (scratch,
                handoff_counted (run, run->floor_from_call, NULL, 0, run->blocks, scratch), 1);
  add_row (s, "hand-off p50 from the release call", dc.p50 / 1000, "us", 1, dc.p50 / rt->p50,
           "raw p50", NULL, FALSE);
  add_row (s, "raw floor p50 from the release call", fc.p50 / 1000, "us", 1, fc.p50 / rt->p50,
           "raw p50", NULL, FALSE);
  add_row (s, "  from the call, library over floor", (dc.p50 - fc.p50) / 1000, "us", 1,
           dc.p50 / fc.p50, "floor from the call", NULL, FALSE);

  for (k = 0; k < run->blocks; k++)
    {
      double ratio = block_p50 (run, run->latency, waited, k, scratch)
                     / block_p50 (run, run->floor_latency, NULL, k, scratch);

      g_string_append_printf (by_block, "%s%.2f", k ? ", " : "", ratio);
      if (!isnan (ratio))
        ratios[n_ratios++] = ratio;
    }
  med = median (ratios, n_ratios);
  add_row (s, "  median of block ratios", med, "x", 2, NAN, NULL, NULL, FALSE);
  add_note (s,
            "library p50 / floor p50 in each pair of blocks: %s (median %.2fx, range "
            "%.2f-%.2fx)",
            by_block->str, med, n_ratios ? ratios[0] : NAN, n_ratios ? ratios[n_ratios - 1] : NAN);
  handoff_floor_states (s, run, waited, rt);
}

/* The figures of @run: the hand-offs whose wait the waiter confirmed (all of them, with
 * a note, when it confirmed none) against the raw round trips timed during the holds,
 * pooled over the blocks; with a floor, the floor's figures too. */
static void
handoff_report (Bench *b, Section *s, RedisLockWaitMode mode, HandoffRun *run)
{
  g_autofree gint64 *real = g_new0 (gint64, run->blocks * run->steps);
  const gboolean *waited = run->waited;
  gboolean pubsub = mode == REDIS_LOCK_WAIT_PUBSUB;
  guint per_block = run->steps - HANDOFF_WARMUP;
  guint counted = run->blocks * per_block;
  guint n_real;
  Dist d, rt;

  n_real = handoff_counted (run, run->latency, waited, 0, run->blocks, real);
  if (n_real == 0)
    {
      add_note (s, "contended_attempts never moved in the waiter: waits unconfirmed, "
                   "all hand-offs counted");
      waited = NULL;
      n_real = handoff_counted (run, run->latency, waited, 0, run->blocks, real);
    }
  d = dist_of (real, n_real, 1);
  rt = dist_of (run->raw_samples, run->n_raw, 1);

  add_row (s, "hand-off p50", d.p50 / 1000, "us", 1, d.p50 / rt.p50, "raw p50",
           pubsub ? "<= 3x" : NULL, d.p50 <= 3 * rt.p50);
  add_row (s, "hand-off p99", d.p99 / 1000, "us", 1, d.p99 / rt.p50, "raw p50",
           pubsub ? "<= 1000 us" : NULL, d.p99 <= 1e6);
  add_row (s, "hand-off max", d.max / 1000, "us", 1, d.max / rt.p50, "raw p50", NULL, FALSE);
  add_row (s, "hand-off mean", d.mean / 1000, "us", 1, d.mean / rt.p50, "raw p50", NULL, FALSE);
  add_row (s, "confirmed waits", (double)n_real, "", 0, (double)n_real / counted,
           "hand-offs counted", NULL, FALSE);
  add_row (s, "  hand-off p50 vs hot RTT", d.p50 / 1000, "us", 1, d.p50 / 1000 / raw_us (b),
           "reference p50", NULL, FALSE);
  add_row (s, "raw round trip p50 (baseline)", rt.p50 / 1000, "us", 1, 1.0, "raw p50", NULL, FALSE);
  if (run->floor_latency != NULL)
    handoff_floor (s, run, waited, &d, &rt);
  add_note (s,
            "%u hand-offs between two processes counted: %u block%s of %u after %d not "
            "counted, a child process per block; %s wait mode%s; the holder keeps the lock "
            "%d us after the waiter announces itself",
            counted, run->blocks, run->blocks > 1 ? "s" : "", per_block, HANDOFF_WARMUP,
            wait_mode_name (mode), pubsub ? "" : ", idle_between_tries 100 ms (the default)",
            HANDOFF_HOLD_US);
  add_note (s, "baseline (raw p50): two raw EVALSHA round trips timed by the holder at the "
               "start of each hold, while the waiter is blocked: like the hand-off, they find "
               "the server and the processes just woken; the reference p50 is back-to-back "
               "calls, a hot round trip");
  if (run->floor_latency != NULL)
    add_note (s,
              "floor: the same hand-off without the library: a release script (GET, UNLINK, "
              "PUBLISH) wakes a process blocked reading SUBSCRIBE, which takes the key with "
              "one SET NX PX; interleaved with the library in blocks (library block, then "
              "floor block, %u pairs, the same count of hand-offs in each) so that both see "
              "the same machine, and pooled as the library's are",
              run->blocks);
  if (!pubsub)
    add_note (s,
              "the waiter's first attempt fails about %d us before the release, so each "
              "hand-off waits out most of one idle period",
              HANDOFF_HOLD_US);
}

/* The library's hand-off in @mode, @blocks blocks of @steps each (warm-up included),
 * each followed by a block of the floor's when @with_floor: the registry, the lock and
 * the raw connection stay open until the figures are in. A failed floor block stops
 * the floor, not the library's blocks. */
static void
handoff_run (Bench *b, Section *s, RedisLockWaitMode mode, guint blocks, guint steps,
             gboolean with_floor)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RawConn) raw = NULL;
  g_autofree char *name = g_strdup_printf ("handoff-%s", wait_mode_name (mode));
  g_autofree gint64 *latency = g_new0 (gint64, blocks * steps);
  g_autofree gboolean *waited = g_new0 (gboolean, blocks * steps);
  g_autofree gint64 *raw_samples = g_new0 (gint64, 2 * blocks * steps);
  g_autofree gint64 *from_call = g_new0 (gint64, blocks * steps);
  g_autofree gint64 *floor_latency = with_floor ? g_new0 (gint64, blocks * steps) : NULL;
  g_autofree gint64 *floor_from_call = with_floor ? g_new0 (gint64, blocks * steps) : NULL;
  HandoffRun run = { .blocks = blocks,
                     .steps = steps,
                     .latency = latency,
                     .waited = waited,
                     .raw_samples = raw_samples,
                     .from_call = from_call,
                     .floor_latency = floor_latency,
                     .floor_from_call = floor_from_call };
  guint k;

  g_assert (blocks > 0 && steps > HANDOFF_WARMUP);
  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_wait_mode (registry, mode);
  lock = redis_lock_registry_obtain (registry, name, &error);
  if (lock == NULL)
    goto fail;
  for (k = 0; k < blocks; k++)
    {
      if (!handoff_pingpong (b, registry, lock, raw, mode, name, &run, k, &error))
        goto fail;
      if (with_floor && run.floor_error == NULL)
        floor_run (b, raw, &run, k, &run.floor_error);
    }
  handoff_report (b, s, mode, &run);
  g_clear_error (&run.floor_error);
  return;

fail:
  g_clear_error (&run.floor_error);
  add_na (s, "hand-off", "%s", error->message);
}

void
section_handoff (Bench *b, Section *s)
{
  handoff_run (b, s, REDIS_LOCK_WAIT_PUBSUB, HANDOFF_BLOCKS,
               HANDOFF_WARMUP + b->handoffs / HANDOFF_BLOCKS, TRUE);
}

void
section_handoff_spin (Bench *b, Section *s)
{
  handoff_run (b, s, REDIS_LOCK_WAIT_SPIN, 1, b->spin_handoffs, FALSE);
}
