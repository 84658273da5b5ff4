/* redislock-bench.c: what a redislock lock costs, measured against what Redis itself costs.
 *
 * A Redis-backed lock can never be faster than the Redis round trips it needs, so every
 * figure here is put next to a baseline measured in the same run on the same server:
 * the round trip of an EVALSHA of a script that does nothing (`return 1`) on a plain
 * hiredis connection. An outermost lock+unlock needs two such round trips (acquire
 * script, release script), so its cost is reported as a multiple of two; a cross-process
 * hand-off needs the release, the unlock notification and the waiter's acquire, so it is
 * reported as a multiple of one; eight threads on eight names can at best reach half the
 * eight-connection EVALSHA rate. What the library promises to do without Redis
 * (re-entry, the lock cache) is measured against the GLib structure a user would
 * otherwise reach for (GRecMutex, a GHashTable of names), and checked against the
 * registry's own counters (redis_lock_registry_get_stats) so that "no Redis traffic" is
 * proved, not assumed.
 *
 * Latencies are timed one operation at a time on CLOCK_MONOTONIC and reported as
 * p50/p99; operations too short for that (re-entry, ~tens of ns) are timed in batches
 * and the batch means give the percentiles. The cross-process hand-off runs a second
 * copy of this program (`--child`, started with exec so that it never inherits a
 * registry across fork()) and ping-pongs one lock with it; each side tells the other
 * through a pipe that it is about to wait, and the holder keeps the lock a little longer
 * so the waiter is really blocked in Redis when the release happens. The waiter's
 * `contended_attempts` counter confirms each wait; hand-offs it does not confirm are left
 * out. Both processes read the same CLOCK_MONOTONIC, so "release returned in A" and
 * "acquire returned in B" can be subtracted.
 *
 * The program starts its own redis-server on a Unix socket (redislock-test.h) unless
 * REDIS_URL or --url names one, uses a registry key unique to the run, prints a table
 * (or JSON with --json), and prints "n/a" with the reason for any figure it cannot
 * produce instead of stopping.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <gio/gio.h>
#include <hiredis/hiredis.h>
#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

#define BENCH_THREADS 8

/* How long the holder keeps the lock after the waiter said it is about to wait: long
 * enough for the waiter's first (failing) attempt to reach Redis and for it to go to
 * sleep, even on a busy two-core machine. */
#define HANDOFF_HOLD_US 1000

/* Hand-offs at the start of a ping-pong run that are not counted (subscription set-up,
 * first connections). */
#define HANDOFF_WARMUP 10

/* No word from the other process, or no acquisition, for this long is a failure. */
#define HANDOFF_TIMEOUT_MS 10000

/* Re-entrant pairs are timed in batches of this many. */
#define REENTRANT_BATCH 1000

/* ------------------------------------------------------------------ clocks, statistics */

static gint64
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

/* A latency distribution, in nanoseconds per operation. */
typedef struct
{
  guint n;
  double p50;
  double p99;
  double max;
  double mean;
} Dist;

static int
cmp_gint64 (const void *a, const void *b)
{
  gint64 x = *(const gint64 *) a;
  gint64 y = *(const gint64 *) b;

  return (x > y) - (x < y);
}

/* Nearest-rank percentile of @sorted (per mille: 500 = p50). */
static gint64
percentile (const gint64 *sorted, guint n, guint per_mille)
{
  guint64 rank = ((guint64) per_mille * n + 999) / 1000;

  if (rank < 1)
    rank = 1;
  return sorted[rank - 1];
}

/* Sorts @samples in place. Each sample covers @ops_per_sample operations. */
static Dist
dist_of (gint64 *samples, guint n, guint ops_per_sample)
{
  Dist d = { 0, NAN, NAN, NAN, NAN };
  double sum = 0;
  guint i;

  if (n == 0)
    return d;
  qsort (samples, n, sizeof (gint64), cmp_gint64);
  for (i = 0; i < n; i++)
    sum += (double) samples[i];
  d.n = n;
  d.p50 = (double) percentile (samples, n, 500) / ops_per_sample;
  d.p99 = (double) percentile (samples, n, 990) / ops_per_sample;
  d.max = (double) samples[n - 1] / ops_per_sample;
  d.mean = sum / n / ops_per_sample;
  return d;
}

/* Resident set size of this process, from /proc/self/statm; -1 when unreadable. */
static gint64
rss_bytes (void)
{
  g_autofree char *contents = NULL;
  long long size = 0, resident = 0;

  if (!g_file_get_contents ("/proc/self/statm", &contents, NULL, NULL))
    return -1;
  if (sscanf (contents, "%lld %lld", &size, &resident) != 2)
    return -1;
  return (gint64) resident * sysconf (_SC_PAGESIZE);
}

/* Gives freed heap pages back to the kernel so that the next RSS delta measures what
 * the next phase allocates, not what an earlier phase left in malloc's free lists. */
static void
trim_heap (void)
{
#ifdef __GLIBC__
  malloc_trim (0);
#endif
}

/* ------------------------------------------------------------------ results */

/* One figure of a section. */
typedef struct
{
  char *metric;
  double value;   /* NAN when the figure could not be produced (see note) */
  const char *unit;
  int decimals;
  double ratio;   /* NAN when there is no ratio */
  char *ratio_to; /* what the ratio is relative to */
  char *target;   /* NULL when the figure has no target */
  int met;        /* 1 met, 0 missed, -1 no target */
  char *note;     /* reason of an n/a */
} Row;

static void
row_free (gpointer p)
{
  Row *r = p;

  g_free (r->metric);
  g_free (r->ratio_to);
  g_free (r->target);
  g_free (r->note);
  g_free (r);
}

typedef struct _Bench Bench;
typedef struct _Section Section;
typedef void (*SectionFunc) (Bench *b, Section *s);

/* A group of figures that one `--only NAME` reproduces. */
struct _Section
{
  const char *name;
  char *title;
  char *command;
  GPtrArray *rows;  /* of Row */
  GPtrArray *notes; /* of char * */
  double seconds;
};

static void
section_free (gpointer p)
{
  Section *s = p;

  g_free (s->title);
  g_free (s->command);
  g_ptr_array_unref (s->rows);
  g_ptr_array_unref (s->notes);
  g_free (s);
}

/* Adds a figure. @ratio may be NAN; @target NULL (then @met is ignored). */
static void
add_row (Section *s,
         const char *metric,
         double value,
         const char *unit,
         int decimals,
         double ratio,
         const char *ratio_to,
         const char *target,
         gboolean met)
{
  Row *r = g_new0 (Row, 1);

  r->metric = g_strdup (metric);
  r->value = value;
  r->unit = unit;
  r->decimals = decimals;
  r->ratio = ratio;
  r->ratio_to = g_strdup (isnan (ratio) ? NULL : ratio_to);
  r->target = g_strdup (target);
  r->met = target == NULL || isnan (value) ? -1 : (met ? 1 : 0);
  g_ptr_array_add (s->rows, r);
}

/* Adds a figure that could not be produced, with the reason. */
static void G_GNUC_PRINTF (3, 4)
add_na (Section *s, const char *metric, const char *format, ...)
{
  Row *r = g_new0 (Row, 1);
  va_list ap;

  r->metric = g_strdup (metric);
  r->value = NAN;
  r->unit = "";
  r->ratio = NAN;
  r->met = -1;
  va_start (ap, format);
  r->note = g_strdup_vprintf (format, ap);
  va_end (ap);
  g_ptr_array_add (s->rows, r);
}

static void G_GNUC_PRINTF (2, 3)
add_note (Section *s, const char *format, ...)
{
  va_list ap;

  va_start (ap, format);
  g_ptr_array_add (s->notes, g_strdup_vprintf (format, ap));
  va_end (ap);
}

/* ------------------------------------------------------------------ the run */

struct _Bench
{
  gboolean quick;
  gboolean json;
  char *url; /* for the library; NULL: the library's default */
  gboolean own_server;
  RedisLockTestServer *server;
  char *key; /* registry key of this run */
  char *self_path;
  char *redis_version;

  /* machine */
  long nproc;
  char *cpu_model;
  char *kernel;

  /* the baseline: EVALSHA "return 1" round trips on plain hiredis connections */
  char *raw_error; /* why there is no baseline */
  Dist raw;        /* one connection, ns per call */
  double raw_rate1;
  double raw_rate8; /* calls/s with BENCH_THREADS connections; NAN when not measured */
  char *raw8_error;

  /* sizes of the run */
  guint raw_calls;
  guint raw8_calls;
  guint reentrant_pairs;
  guint uncontended_pairs;
  guint handoffs;
  guint spin_handoffs;
  guint independent_pairs;
  guint contention_sections;
  guint watchdog_leases;
  guint memory_names;
  guint bounded_capacity;
  guint bounded_names;

  GPtrArray *sections; /* of Section */
};

/* Raw round trip in µs, NAN when no baseline. */
static double
raw_us (Bench *b)
{
  return b->raw_error != NULL ? NAN : b->raw.p50 / 1000.0;
}

static RedisLockRegistry *
bench_registry (Bench *b, GError **error)
{
  return redis_lock_registry_new (b->url, b->key, error);
}

/* ------------------------------------------------------------------ plain hiredis */

/* Where the raw connections go: the same server as the library, parsed from the same
 * URL forms (redis://, unix://). */
typedef struct
{
  char *socket_path; /* NULL for TCP */
  char *host;
  int port;
  char *username;
  char *password;
  int db;
} RawTarget;

static void
raw_target_clear (RawTarget *t)
{
  g_free (t->socket_path);
  g_free (t->host);
  g_free (t->username);
  g_free (t->password);
  memset (t, 0, sizeof *t);
}

static gboolean
raw_target_parse (const char *url, RawTarget *t, GError **error)
{
  g_autoptr (GUri) uri = NULL;
  const char *scheme;

  memset (t, 0, sizeof *t);
  if (url == NULL)
    {
      t->host = g_strdup ("127.0.0.1");
      t->port = 6379;
      return TRUE;
    }
  uri = g_uri_parse (url, G_URI_FLAGS_HAS_PASSWORD, error);
  if (uri == NULL)
    return FALSE;
  scheme = g_uri_get_scheme (uri);
  if (g_ascii_strcasecmp (scheme, "unix") == 0)
    {
      const char *query = g_uri_get_query (uri);

      t->socket_path = g_strdup (g_uri_get_path (uri));
      if (query != NULL)
        {
          g_autoptr (GHashTable) params = NULL;
          const char *db;

          params = g_uri_parse_params (query, -1, "&", G_URI_PARAMS_NONE, error);
          if (params == NULL)
            return FALSE;
          db = g_hash_table_lookup (params, "db");
          t->db = db != NULL ? atoi (db) : 0;
          t->password = g_strdup (g_hash_table_lookup (params, "password"));
          t->username = g_strdup (g_hash_table_lookup (params, "username"));
        }
      return TRUE;
    }
  if (g_ascii_strcasecmp (scheme, "redis") == 0)
    {
      const char *host = g_uri_get_host (uri);
      const char *path = g_uri_get_path (uri);

      t->host = g_strdup (host != NULL && *host != '\0' ? host : "127.0.0.1");
      t->port = g_uri_get_port (uri) > 0 ? g_uri_get_port (uri) : 6379;
      t->username = g_strdup (g_uri_get_user (uri));
      t->password = g_strdup (g_uri_get_password (uri));
      t->db = path != NULL && path[0] == '/' && path[1] != '\0' ? atoi (path + 1) : 0;
      return TRUE;
    }
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
               "the benchmark's own connections support redis:// and unix:// URLs, not %s://",
               scheme);
  return FALSE;
}

/* Sends one command and returns its reply, or NULL with @error set on an I/O error or
 * an error reply. */
static redisReply *G_GNUC_PRINTF (3, 4)
raw_command (redisContext *c, GError **error, const char *format, ...)
{
  redisReply *r;
  va_list ap;

  va_start (ap, format);
  r = redisvCommand (c, format, ap);
  va_end (ap);
  if (r == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", c->errstr);
      return NULL;
    }
  if (r->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis replied: %s", r->str);
      freeReplyObject (r);
      return NULL;
    }
  return r;
}

static redisContext *
raw_connect (const RawTarget *t, GError **error)
{
  redisContext *c;
  redisReply *r = NULL;

  c = t->socket_path != NULL ? redisConnectUnix (t->socket_path) : redisConnect (t->host, t->port);
  if (c == NULL || c->err != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "cannot connect to redis: %s",
                   c != NULL ? c->errstr : "out of memory");
      if (c != NULL)
        redisFree (c);
      return NULL;
    }
  if (t->password != NULL && *t->password != '\0')
    {
      if (t->username != NULL && *t->username != '\0')
        r = raw_command (c, error, "AUTH %s %s", t->username, t->password);
      else
        r = raw_command (c, error, "AUTH %s", t->password);
      if (r == NULL)
        goto fail;
      freeReplyObject (r);
    }
  if (t->db != 0)
    {
      r = raw_command (c, error, "SELECT %d", t->db);
      if (r == NULL)
        goto fail;
      freeReplyObject (r);
    }
  return c;

fail:
  redisFree (c);
  return NULL;
}

/* One EVALSHA of the trivial script; FALSE with @error set unless it answered 1. */
static gboolean
raw_evalsha (redisContext *c, const char *sha, GError **error)
{
  redisReply *r = raw_command (c, error, "EVALSHA %s 0", sha);
  gboolean ok;

  if (r == NULL)
    return FALSE;
  ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject (r);
  if (!ok)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "EVALSHA returned something other than 1");
  return ok;
}

/* ------------------------------------------------------------------ threads */

typedef void (*WorkFunc) (gpointer data);

typedef struct
{
  pthread_barrier_t *barrier;
  WorkFunc func;
  gpointer data;
} Starter;

static gpointer
starter_main (gpointer p)
{
  Starter *s = p;

  pthread_barrier_wait (s->barrier);
  s->func (s->data);
  return NULL;
}

/* Runs @func (@data[i]) on @n threads that all start at once, and returns the wall
 * time in seconds from the start to the end of the last one. */
static double
run_parallel (guint n, WorkFunc func, gpointer *data)
{
  pthread_barrier_t barrier;
  Starter *starters = g_new0 (Starter, n);
  GThread **threads = g_new0 (GThread *, n);
  gint64 t0, t1;
  guint i;

  pthread_barrier_init (&barrier, NULL, n + 1);
  for (i = 0; i < n; i++)
    {
      starters[i].barrier = &barrier;
      starters[i].func = func;
      starters[i].data = data[i];
      threads[i] = g_thread_new ("bench-worker", starter_main, &starters[i]);
    }
  pthread_barrier_wait (&barrier);
  t0 = now_ns ();
  for (i = 0; i < n; i++)
    g_thread_join (threads[i]);
  t1 = now_ns ();
  pthread_barrier_destroy (&barrier);
  g_free (threads);
  g_free (starters);
  return (double) (t1 - t0) / 1e9;
}

/* ------------------------------------------------------------------ 1. raw limit */

typedef struct
{
  redisContext *c;
  const char *sha;
  guint calls;
  GError *error;
} RawWorker;

static void
raw_worker (gpointer data)
{
  RawWorker *w = data;
  guint i;

  for (i = 0; i < w->calls; i++)
    if (!raw_evalsha (w->c, w->sha, &w->error))
      return;
}

/* Measures the baseline: p50/p99/mean round trip on one connection, and, when
 * @with_threads, the rate of BENCH_THREADS threads on a connection each. Also reads the
 * server's version. */
static void
measure_raw (Bench *b, gboolean with_threads)
{
  g_autoptr (GError) error = NULL;
  RawTarget t;
  redisContext *c = NULL;
  redisReply *r = NULL;
  g_autofree char *sha = NULL;
  g_autofree gint64 *samples = NULL;
  RawWorker workers[BENCH_THREADS];
  gpointer data[BENCH_THREADS];
  double seconds;
  guint i;

  b->raw_rate8 = NAN;
  memset (workers, 0, sizeof workers);
  if (!raw_target_parse (b->url, &t, &error))
    goto fail;
  c = raw_connect (&t, &error);
  if (c == NULL)
    goto fail;

  r = raw_command (c, &error, "INFO server");
  if (r == NULL)
    goto fail;
  if (r->type == REDIS_REPLY_STRING)
    {
      const char *v = strstr (r->str, "redis_version:");

      if (v != NULL)
        b->redis_version = g_strndup (v + 14, strcspn (v + 14, "\r\n"));
    }
  freeReplyObject (r);

  r = raw_command (c, &error, "SCRIPT LOAD %s", "return 1");
  if (r == NULL)
    goto fail;
  sha = g_strdup (r->type == REDIS_REPLY_STRING ? r->str : "");
  freeReplyObject (r);

  for (i = 0; i < 1000; i++)
    if (!raw_evalsha (c, sha, &error))
      goto fail;

  samples = g_new (gint64, b->raw_calls);
  for (i = 0; i < b->raw_calls; i++)
    {
      gint64 t0 = now_ns ();

      if (!raw_evalsha (c, sha, &error))
        goto fail;
      samples[i] = now_ns () - t0;
    }
  b->raw = dist_of (samples, b->raw_calls, 1);
  b->raw_rate1 = 1e9 / b->raw.mean;

  if (with_threads)
    {
      for (i = 0; i < BENCH_THREADS; i++)
        {
          g_autoptr (GError) local = NULL;

          workers[i].c = raw_connect (&t, &local);
          if (workers[i].c == NULL)
            {
              b->raw8_error = g_strdup (local->message);
              goto threads_done;
            }
          workers[i].sha = sha;
          workers[i].calls = b->raw8_calls / 10;
          data[i] = &workers[i];
        }
      run_parallel (BENCH_THREADS, raw_worker, data); /* warm-up */
      for (i = 0; i < BENCH_THREADS; i++)
        workers[i].calls = b->raw8_calls;
      seconds = run_parallel (BENCH_THREADS, raw_worker, data);
      for (i = 0; i < BENCH_THREADS; i++)
        if (workers[i].error != NULL && b->raw8_error == NULL)
          b->raw8_error = g_strdup (workers[i].error->message);
      if (b->raw8_error == NULL)
        b->raw_rate8 = (double) BENCH_THREADS * b->raw8_calls / seconds;
    threads_done:
      for (i = 0; i < BENCH_THREADS; i++)
        {
          if (workers[i].c != NULL)
            redisFree (workers[i].c);
          g_clear_error (&workers[i].error);
        }
    }
  redisFree (c);
  raw_target_clear (&t);
  return;

fail:
  b->raw_error = g_strdup (error->message);
  if (c != NULL)
    redisFree (c);
  raw_target_clear (&t);
}

static void
section_raw (Bench *b, Section *s)
{
  char buf[128];

  if (b->raw_error != NULL)
    {
      add_na (s, "round trip", "%s", b->raw_error);
      return;
    }
  add_row (s, "round trip p50", b->raw.p50 / 1000, "us", 1, 1.0, "raw p50", NULL, FALSE);
  add_row (s, "round trip p99", b->raw.p99 / 1000, "us", 1, b->raw.p99 / b->raw.p50, "raw p50",
           NULL, FALSE);
  add_row (s, "round trip mean", b->raw.mean / 1000, "us", 1, b->raw.mean / b->raw.p50,
           "raw p50", NULL, FALSE);
  add_row (s, "1 connection", b->raw_rate1, "calls/s", 0, 1.0, "1 connection", NULL, FALSE);
  g_snprintf (buf, sizeof buf, "%d connections, %d threads", BENCH_THREADS, BENCH_THREADS);
  if (b->raw8_error != NULL)
    add_na (s, buf, "%s", b->raw8_error);
  else
    add_row (s, buf, b->raw_rate8, "calls/s", 0, b->raw_rate8 / b->raw_rate1, "1 connection",
             NULL, FALSE);
  add_note (s, "%u timed calls on one connection after 1000 warm-up calls; %u calls per thread",
            b->raw_calls, b->raw8_calls);
}

/* ------------------------------------------------------------------ 2. re-entry */

static void
section_reentrant (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistryStats before, after;
  guint batches = b->reentrant_pairs / REENTRANT_BATCH;
  g_autofree gint64 *samples = g_new (gint64, batches);
  GRecMutex rec;
  Dist lib, glib;
  guint i, j;

  /* The GLib baseline: a recursive mutex already held once, locked and unlocked. */
  g_rec_mutex_init (&rec);
  g_rec_mutex_lock (&rec);
  for (i = 0; i < batches; i++)
    {
      gint64 t0 = now_ns ();

      for (j = 0; j < REENTRANT_BATCH; j++)
        {
          g_rec_mutex_lock (&rec);
          g_rec_mutex_unlock (&rec);
        }
      samples[i] = now_ns () - t0;
    }
  g_rec_mutex_unlock (&rec);
  g_rec_mutex_clear (&rec);
  glib = dist_of (samples, batches, REENTRANT_BATCH);

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "reentrant", &error);
  if (lock == NULL || !redis_lock_lock (lock, &error))
    goto fail;
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < batches; i++)
    {
      gint64 t0 = now_ns ();

      for (j = 0; j < REENTRANT_BATCH; j++)
        {
          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            {
              g_autoptr (GError) local = NULL;

              redis_lock_unlock (lock, &local);
              goto fail;
            }
        }
      samples[i] = now_ns () - t0;
    }
  redis_lock_registry_get_stats (registry, &after);
  if (!redis_lock_unlock (lock, &error))
    goto fail;
  lib = dist_of (samples, batches, REENTRANT_BATCH);

  add_row (s, "pair p50", lib.p50, "ns", 1, lib.p50 / glib.p50, "GRecMutex p50", NULL, FALSE);
  add_row (s, "pair p99", lib.p99, "ns", 1, lib.p99 / glib.p99, "GRecMutex p99", NULL, FALSE);
  add_row (s, "Redis commands in the loop", (double) (after.commands - before.commands), "", 0,
           NAN, NULL, "= 0", after.commands == before.commands);
  add_row (s, "GRecMutex pair p50", glib.p50, "ns", 1, 1.0, "GRecMutex p50", NULL, FALSE);
  add_row (s, "GRecMutex pair p99", glib.p99, "ns", 1, 1.0, "GRecMutex p99", NULL, FALSE);
  add_note (s, "%u pairs timed in batches of %u; percentiles are of the batch means", batches * REENTRANT_BATCH,
            REENTRANT_BATCH);
  add_note (s, "the commands counter is the registry's `commands` (get_stats) delta over the loop");
  return;

fail:
  add_na (s, "re-entrant pair", "%s", error->message);
}

/* ------------------------------------------------------------------ 3. uncontended */

static void
section_uncontended (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistryStats before, after;
  g_autofree gint64 *samples = g_new (gint64, b->uncontended_pairs);
  double two_rtt = 2 * raw_us (b);
  double commands, round_trips;
  Dist d;
  guint i;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "uncontended", &error);
  if (lock == NULL)
    goto fail;
  for (i = 0; i < 200; i++)
    if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
      goto fail;
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < b->uncontended_pairs; i++)
    {
      gint64 t0 = now_ns ();

      if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
        goto fail;
      samples[i] = now_ns () - t0;
    }
  redis_lock_registry_get_stats (registry, &after);
  d = dist_of (samples, b->uncontended_pairs, 1);
  commands = (double) (after.commands - before.commands) / b->uncontended_pairs;
  round_trips = (double) (after.round_trips - before.round_trips) / b->uncontended_pairs;

  add_row (s, "pair p50", d.p50 / 1000, "us", 1, d.p50 / 1000 / two_rtt, "2 raw p50",
           "<= 1.15x", d.p50 / 1000 <= 1.15 * two_rtt);
  add_row (s, "pair p99", d.p99 / 1000, "us", 1, d.p99 / 1000 / two_rtt, "2 raw p50", NULL, FALSE);
  add_row (s, "pair mean", d.mean / 1000, "us", 1, d.mean / b->raw.mean / 2, "2 raw mean", NULL,
           FALSE);
  add_row (s, "Redis commands per pair", commands, "", 2, commands / 2, "2", NULL, FALSE);
  add_row (s, "round trips per pair", round_trips, "", 2, round_trips / 2, "2", NULL, FALSE);
  add_note (s, "%u pairs on one name from one thread, each timed, after 200 warm-up pairs",
            b->uncontended_pairs);
  return;

fail:
  add_na (s, "outermost pair", "%s", error->message);
}

/* ------------------------------------------------------------------ 4. hand-off */

/* The ping-pong protocol between the two processes. Every message is one Msg written
 * whole to a pipe (smaller than PIPE_BUF, so never split). */
typedef struct
{
  gint32 kind;
  gint32 waited; /* MSG_ACQUIRED: the acquisition found the lock held first */
  gint64 value;  /* MSG_RELEASED: CLOCK_MONOTONIC ns; MSG_ACQUIRED: hand-off latency, ns */
} Msg;

enum
{
  MSG_WAITING = 'W',  /* "I am about to lock: keep holding for a moment" */
  MSG_RELEASED = 'R', /* "my unlock returned at value" */
  MSG_ACQUIRED = 'A', /* "my lock returned, value ns after your unlock did" */
};

typedef struct
{
  RedisLockRegistry *registry;
  RedisLock *lock;
  int in_fd;
  int out_fd;
  gint64 hold_us;
  gboolean held;
  /* per hand-off results, kept by the parent only (NULL in the child) */
  gint64 *latency_ns;
  gboolean *waited;
} PingPong;

static gboolean
msg_send (int fd, char kind, gboolean waited, gint64 value, GError **error)
{
  Msg m;
  ssize_t n;

  memset (&m, 0, sizeof m);
  m.kind = kind;
  m.waited = waited ? 1 : 0;
  m.value = value;
  do
    n = write (fd, &m, sizeof m);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t) sizeof m)
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
      n = read (fd, (char *) m + done, sizeof *m - done);
      if (n < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (n <= 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE,
                       "the other process went away (see its messages above)");
          return FALSE;
        }
      done += (gsize) n;
    }
  if (m->kind != kind)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "protocol error: expected '%c' from the other process, got '%c'", kind,
                   (char) m->kind);
      return FALSE;
    }
  return TRUE;
}

static void
pingpong_record (PingPong *pp, guint step, gint64 latency_ns, gboolean waited)
{
  if (pp->latency_ns == NULL)
    return;
  pp->latency_ns[step] = latency_ns;
  pp->waited[step] = waited;
}

/* Holds the lock: waits until the peer is about to lock, keeps holding for hold_us so
 * the peer is blocked in its wait, releases, and learns the hand-off latency. */
static gboolean
pingpong_hold (PingPong *pp, guint step, GError **error)
{
  Msg m;
  gint64 released;

  if (!msg_expect (pp->in_fd, MSG_WAITING, &m, error))
    return FALSE;
  g_usleep (pp->hold_us);
  pp->held = FALSE;
  if (!redis_lock_unlock (pp->lock, error))
    return FALSE;
  released = now_ns ();
  if (!msg_send (pp->out_fd, MSG_RELEASED, FALSE, released, error))
    return FALSE;
  if (!msg_expect (pp->in_fd, MSG_ACQUIRED, &m, error))
    return FALSE;
  pingpong_record (pp, step, m.value, m.waited != 0);
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
  if (!msg_send (pp->out_fd, MSG_WAITING, FALSE, 0, error))
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
  if (!msg_send (pp->out_fd, MSG_ACQUIRED, waited, latency, error))
    return FALSE;
  pingpong_record (pp, step, latency, waited);
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

static const char *
wait_mode_name (RedisLockWaitMode mode)
{
  return mode == REDIS_LOCK_WAIT_SPIN ? "spin" : "pubsub";
}

/* The other side of the hand-off: `redislock-bench --child`, started with exec by the
 * parent, stdin and stdout being the pipes. The URL and registry key come from the
 * environment so that a password never shows in the process list. */
static int
child_main (const char *mode, const char *name, guint steps, gint64 hold_us)
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

  registry = redis_lock_registry_new (url != NULL && *url != '\0' ? url : NULL,
                                      key != NULL ? key : "", &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_wait_mode (registry, g_strcmp0 (mode, "spin") == 0
                                                 ? REDIS_LOCK_WAIT_SPIN
                                                 : REDIS_LOCK_WAIT_PUBSUB);
  lock = redis_lock_registry_obtain (registry, name, &error);
  if (lock == NULL)
    goto fail;
  pp.registry = registry;
  pp.lock = lock;
  if (!pingpong_run (&pp, steps, FALSE, &error))
    goto fail;
  return 0;

fail:
  g_printerr ("redislock-bench --child: %s\n", error->message);
  return 1;
}

/* The parent's side: holds the lock, starts the child, ping-pongs, reports. */
static void
handoff_run (Bench *b, Section *s, RedisLockWaitMode mode, guint steps)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *name = g_strdup_printf ("handoff-%s", wait_mode_name (mode));
  g_autofree char *mode_arg = g_strdup_printf ("--child-mode=%s", wait_mode_name (mode));
  g_autofree char *name_arg = g_strdup_printf ("--child-name=%s", name);
  g_autofree char *steps_arg = g_strdup_printf ("--child-steps=%u", steps);
  g_autofree char *hold_arg = g_strdup_printf ("--child-hold-us=%d", HANDOFF_HOLD_US);
  g_autofree gint64 *latency = g_new0 (gint64, steps);
  g_autofree gboolean *waited = g_new0 (gboolean, steps);
  g_autofree gint64 *real = g_new0 (gint64, steps);
  g_auto (GStrv) envp = g_get_environ ();
  const char *argv[] = { b->self_path, "--child", mode_arg, name_arg, steps_arg, hold_arg, NULL };
  gboolean pubsub = mode == REDIS_LOCK_WAIT_PUBSUB;
  GPid pid = 0;
  int to_child = -1, from_child = -1, status = 0;
  guint counted = 0, n_real = 0, i;
  double rtt = raw_us (b);
  PingPong pp;
  Dist d;
  gboolean ok;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_wait_mode (registry, mode);
  lock = redis_lock_registry_obtain (registry, name, &error);
  if (lock == NULL || !redis_lock_lock (lock, &error))
    goto fail;

  envp = g_environ_setenv (envp, "REDISLOCK_BENCH_URL", b->url != NULL ? b->url : "", TRUE);
  envp = g_environ_setenv (envp, "REDISLOCK_BENCH_KEY", b->key, TRUE);
  if (!g_spawn_async_with_pipes (NULL, (char **) argv, envp, G_SPAWN_DO_NOT_REAP_CHILD, NULL,
                                 NULL, &pid, &to_child, &from_child, NULL, &error))
    {
      g_autoptr (GError) local = NULL;

      redis_lock_unlock (lock, &local);
      goto fail;
    }

  memset (&pp, 0, sizeof pp);
  pp.registry = registry;
  pp.lock = lock;
  pp.in_fd = from_child;
  pp.out_fd = to_child;
  pp.hold_us = HANDOFF_HOLD_US;
  pp.held = TRUE;
  pp.latency_ns = latency;
  pp.waited = waited;
  ok = pingpong_run (&pp, steps, TRUE, &error);
  close (to_child);
  close (from_child);
  if (!ok)
    kill (pid, SIGKILL);
  while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
    ;
  g_spawn_close_pid (pid);
  if (!ok)
    goto fail;
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    {
      g_set_error (&error, G_IO_ERROR, G_IO_ERROR_FAILED, "the child process failed (status %d)",
                   status);
      goto fail;
    }

  for (i = HANDOFF_WARMUP < steps ? HANDOFF_WARMUP : 0; i < steps; i++)
    {
      counted++;
      if (waited[i])
        real[n_real++] = latency[i];
    }
  if (n_real == 0)
    {
      /* The counter never moved: the waits cannot be confirmed, so count them all and
       * say so. */
      add_note (s, "contended_attempts never moved in the waiter: waits unconfirmed, "
                   "all hand-offs counted");
      for (i = HANDOFF_WARMUP < steps ? HANDOFF_WARMUP : 0; i < steps; i++)
        real[n_real++] = latency[i];
    }
  d = dist_of (real, n_real, 1);

  if (pubsub)
    {
      add_row (s, "hand-off p50", d.p50 / 1000, "us", 1, d.p50 / 1000 / rtt, "raw p50",
               "<= 3x", d.p50 / 1000 <= 3 * rtt);
      add_row (s, "hand-off p99", d.p99 / 1000, "us", 1, d.p99 / 1000 / rtt, "raw p50",
               "<= 1000 us", d.p99 <= 1e6);
    }
  else
    {
      add_row (s, "hand-off p50", d.p50 / 1000, "us", 1, d.p50 / 1000 / rtt, "raw p50", NULL,
               FALSE);
      add_row (s, "hand-off p99", d.p99 / 1000, "us", 1, d.p99 / 1000 / rtt, "raw p50", NULL,
               FALSE);
    }
  add_row (s, "hand-off max", d.max / 1000, "us", 1, d.max / 1000 / rtt, "raw p50", NULL, FALSE);
  add_row (s, "hand-off mean", d.mean / 1000, "us", 1, d.mean / 1000 / rtt, "raw p50", NULL,
           FALSE);
  add_row (s, "confirmed waits", (double) n_real, "", 0, (double) n_real / counted,
           "hand-offs counted", NULL, FALSE);
  add_note (s, "%u hand-offs between two processes (%u warm-up not counted), %s wait mode%s; "
               "the holder keeps the lock %d us after the waiter announces itself",
            steps, steps > HANDOFF_WARMUP ? HANDOFF_WARMUP : 0, wait_mode_name (mode),
            pubsub ? "" : ", idle_between_tries 100 ms (the default)", HANDOFF_HOLD_US);
  return;

fail:
  add_na (s, "hand-off", "%s", error->message);
}

static void
section_handoff (Bench *b, Section *s)
{
  handoff_run (b, s, REDIS_LOCK_WAIT_PUBSUB, b->handoffs);
}

static void
section_handoff_spin (Bench *b, Section *s)
{
  handoff_run (b, s, REDIS_LOCK_WAIT_SPIN, b->spin_handoffs);
}

/* ------------------------------------------------------------------ 5, 6. threads */

typedef struct
{
  RedisLock *lock;
  guint pairs;
  guint64 *counter; /* incremented inside the lock when not NULL */
  GError *error;
} PairWorker;

static void
pair_worker (gpointer data)
{
  PairWorker *w = data;
  guint i;

  for (i = 0; i < w->pairs; i++)
    {
      if (!redis_lock_lock (w->lock, &w->error))
        return;
      if (w->counter != NULL)
        (*w->counter)++;
      if (!redis_lock_unlock (w->lock, &w->error))
        return;
    }
}

/* Runs BENCH_THREADS pair workers twice (a short warm-up, then @pairs each) and returns
 * the wall time of the second run, or a negative value with @error set. */
static double
run_pair_workers (PairWorker *workers, guint pairs, GError **error)
{
  gpointer data[BENCH_THREADS];
  double seconds = 0;
  guint round, i;

  for (i = 0; i < BENCH_THREADS; i++)
    data[i] = &workers[i];
  for (round = 0; round < 2; round++)
    {
      for (i = 0; i < BENCH_THREADS; i++)
        workers[i].pairs = round == 0 ? pairs / 10 + 1 : pairs;
      seconds = run_parallel (BENCH_THREADS, pair_worker, data);
      for (i = 0; i < BENCH_THREADS; i++)
        if (workers[i].error != NULL)
          {
            g_propagate_error (error, workers[i].error);
            workers[i].error = NULL;
            return -1;
          }
    }
  return seconds;
}

static void
section_independent (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  PairWorker workers[BENCH_THREADS];
  RedisLockRegistryStats before, after;
  double seconds, rate, limit = b->raw_rate8 / 2;
  guint i, total = BENCH_THREADS * b->independent_pairs;

  memset (workers, 0, sizeof workers);
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  for (i = 0; i < BENCH_THREADS; i++)
    {
      g_autofree char *name = g_strdup_printf ("independent-%u", i);

      workers[i].lock = redis_lock_registry_obtain (registry, name, &error);
      if (workers[i].lock == NULL)
        goto fail;
    }
  redis_lock_registry_get_stats (registry, &before);
  seconds = run_pair_workers (workers, b->independent_pairs, &error);
  if (seconds < 0)
    goto fail;
  redis_lock_registry_get_stats (registry, &after);
  /* run_pair_workers runs a warm-up tenth before the timed run */
  total += BENCH_THREADS * (b->independent_pairs / 10 + 1);
  rate = BENCH_THREADS * b->independent_pairs / seconds;

  if (isnan (limit))
    add_row (s, "pairs/s", rate, "pairs/s", 0, NAN, NULL, NULL, FALSE);
  else
    add_row (s, "pairs/s", rate, "pairs/s", 0, rate / limit, "raw 8-conn rate / 2", ">= 0.90x",
             rate >= 0.9 * limit);
  add_row (s, "pair mean per thread", seconds * 1e6 / b->independent_pairs, "us", 1,
           seconds * 1e6 / b->independent_pairs / (2 * raw_us (b)), "2 raw p50", NULL, FALSE);
  add_row (s, "Redis commands per pair", (double) (after.commands - before.commands) / total, "",
           2, NAN, NULL, NULL, FALSE);
  add_note (s, "%d threads, each locking and unlocking its own name %u times", BENCH_THREADS,
            b->independent_pairs);
  goto out;

fail:
  add_na (s, "independent keys", "%s", error->message);
out:
  for (i = 0; i < BENCH_THREADS; i++)
    {
      redis_lock_unref (workers[i].lock);
      g_clear_error (&workers[i].error);
    }
}

static void
section_contention (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  PairWorker workers[BENCH_THREADS];
  RedisLockRegistryStats before, after;
  guint64 counter = 0, expected;
  double seconds, rate, serial = b->raw_rate1 / 2;
  double sections, commands, round_trips;
  guint i;

  memset (workers, 0, sizeof workers);
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "contended", &error);
  if (lock == NULL)
    goto fail;
  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].lock = lock;
      workers[i].counter = &counter;
    }
  redis_lock_registry_get_stats (registry, &before);
  seconds = run_pair_workers (workers, b->contention_sections, &error);
  if (seconds < 0)
    goto fail;
  redis_lock_registry_get_stats (registry, &after);
  expected = (guint64) BENCH_THREADS * (b->contention_sections + b->contention_sections / 10 + 1);
  sections = (double) expected;
  rate = BENCH_THREADS * b->contention_sections / seconds;
  commands = (double) (after.commands - before.commands) / sections;
  round_trips = (double) (after.round_trips - before.round_trips) / sections;

  add_row (s, "sections/s", rate, "sections/s", 0, rate / serial, "raw 1-conn rate / 2", NULL,
           FALSE);
  add_row (s, "Redis commands per section", commands, "", 2, commands / 2, "2 (Redis per section)",
           NULL, FALSE);
  add_row (s, "round trips per section", round_trips, "", 2, round_trips / 2,
           "2 (Redis per section)", NULL, FALSE);
  add_row (s, "lost increments", (double) (expected - counter), "", 0, NAN, NULL, "= 0",
           counter == expected);
  add_note (s, "%d threads on one name, %u sections each; the critical section increments a "
               "shared counter",
            BENCH_THREADS, b->contention_sections);
  return;

fail:
  add_na (s, "same-process contention", "%s", error->message);
  for (i = 0; i < BENCH_THREADS; i++)
    g_clear_error (&workers[i].error);
}

/* ------------------------------------------------------------------ 7. watchdog */

static void
section_watchdog (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  RedisLockRegistryStats before, st;
  guint n = b->watchdog_leases, held = 0, unlock_failures = 0, i;
  RedisLock **locks = g_new0 (RedisLock *, n);
  gint64 t0, t_locked, deadline;
  double rtt = raw_us (b);
  gboolean got = FALSE;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_expire_after_ms (registry, 3000);
  t0 = now_ns ();
  for (i = 0; i < n; i++)
    {
      char name[32];

      g_snprintf (name, sizeof name, "lease-%05u", i);
      locks[i] = redis_lock_registry_obtain (registry, name, &error);
      if (locks[i] == NULL || !redis_lock_lock (locks[i], &error))
        goto fail;
      held++;
    }
  t_locked = now_ns ();

  /* Wait for a tick that renews every lease (the watchdog ticks at a third of the TTL). */
  redis_lock_registry_get_stats (registry, &before);
  deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  do
    {
      g_usleep (20 * 1000);
      redis_lock_registry_get_stats (registry, &st);
      got = st.watchdog_ticks > before.watchdog_ticks && st.last_tick_leases >= n;
    }
  while (!got && g_get_monotonic_time () < deadline);

  add_row (s, "lock, per lease", (double) (t_locked - t0) / n / 1000, "us", 1,
           (double) (t_locked - t0) / n / 1000 / rtt, "raw p50", NULL, FALSE);
  if (!got)
    add_na (s, "watchdog tick",
            "no tick renewed all %u leases within 10 s (ticks %" G_GUINT64_FORMAT " -> %" G_GUINT64_FORMAT
            ", last tick renewed %" G_GUINT64_FORMAT ")",
            n, before.watchdog_ticks, st.watchdog_ticks, st.last_tick_leases);
  else
    {
      add_row (s, "tick wall time", (double) st.last_tick_us, "us", 0,
               (double) st.last_tick_us / rtt, "raw p50", NULL, FALSE);
      add_row (s, "tick, per lease", (double) st.last_tick_us / st.last_tick_leases, "us", 2,
               (double) st.last_tick_us / st.last_tick_leases / rtt, "raw p50", NULL, FALSE);
      add_row (s, "tick round trips", (double) st.last_tick_round_trips, "", 0,
               (double) st.last_tick_round_trips / st.last_tick_leases, "1 per lease", "<= 10",
               st.last_tick_round_trips <= 10);
      add_row (s, "tick leases", (double) st.last_tick_leases, "", 0,
               (double) st.last_tick_leases / n, "leases held", NULL, FALSE);
    }
  add_row (s, "leases lost", (double) st.leases_lost, "", 0, NAN, NULL, "= 0",
           st.leases_lost == 0);
  add_note (s, "one registry holds %u distinct locks taken from one thread, TTL 3000 ms",
            n);

fail:
  if (error != NULL)
    add_na (s, "holding leases", "%u of %u locked: %s", held, n, error->message);
  for (i = 0; i < n; i++)
    {
      if (locks[i] == NULL)
        continue;
      if (i < held && !redis_lock_unlock (locks[i], NULL))
        unlock_failures++;
      redis_lock_unref (locks[i]);
    }
  if (unlock_failures > 0)
    add_note (s, "%u of %u unlocks failed", unlock_failures, held);
  g_free (locks);
}

/* ------------------------------------------------------------------ 8. memory */

#define MEMORY_NAME_FORMAT "bench-mem-%08u"

/* RSS growth per entry of a GHashTable from name (g_strdup) to pointer: the cost of
 * only remembering @n names, the baseline for a cached lock. */
static double
memory_hash_baseline (guint n)
{
  GHashTable *table = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  gint64 rss0, rss1;
  guint i;

  trim_heap ();
  rss0 = rss_bytes ();
  for (i = 0; i < n; i++)
    g_hash_table_insert (table, g_strdup_printf (MEMORY_NAME_FORMAT, i), GUINT_TO_POINTER (i + 1));
  rss1 = rss_bytes ();
  g_hash_table_unref (table);
  trim_heap ();
  return (double) (rss1 - rss0) / n;
}

/* Obtains and drops @n distinct names starting at @first; FALSE with @error set on
 * failure. */
static gboolean
memory_fill (RedisLockRegistry *registry, guint first, guint n, GError **error)
{
  guint i;

  for (i = first; i < first + n; i++)
    {
      char name[32];
      RedisLock *lock;

      g_snprintf (name, sizeof name, MEMORY_NAME_FORMAT, i);
      lock = redis_lock_registry_obtain (registry, name, error);
      if (lock == NULL)
        return FALSE;
      redis_lock_unref (lock);
    }
  return TRUE;
}

static void
section_memory (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = NULL;
  guint n = b->memory_names, cap = b->bounded_capacity, m = b->bounded_names;
  char sample[32];
  gsize name_len;
  double per_entry, per_lock, used, growth;
  gint64 rss0, rss1, rss_full, rss_end, t0, t1;
  guint size;

  g_snprintf (sample, sizeof sample, MEMORY_NAME_FORMAT, 0u);
  name_len = strlen (sample);
  if (rss_bytes () < 0)
    {
      add_na (s, "memory", "/proc/self/statm is not readable");
      return;
    }

  per_entry = memory_hash_baseline (n);

  /* Bytes per cached idle lock: capacity raised above the number of names. */
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_cache_capacity (registry, 2 * n);
  trim_heap ();
  rss0 = rss_bytes ();
  t0 = now_ns ();
  if (!memory_fill (registry, 0, n, &error))
    goto fail;
  t1 = now_ns ();
  rss1 = rss_bytes ();
  size = redis_lock_registry_get_cache_size (registry);
  per_lock = (double) (rss1 - rss0) / n;

  add_row (s, "RSS per cached idle lock", per_lock, "B", 0, per_lock / per_entry,
           "GHashTable name entry", NULL, FALSE);
  add_row (s, "  minus the name length", per_lock - name_len, "B", 0,
           (per_lock - name_len) / (per_entry - name_len), "GHashTable entry - name", NULL, FALSE);
  add_row (s, "obtain+unref (new name)", (double) (t1 - t0) / n, "ns", 0, NAN, NULL, NULL, FALSE);
  add_row (s, "cache size", (double) size, "", 0, (double) size / n, "names obtained", "= names",
           size == n);
  add_row (s, "GHashTable entry (baseline)", per_entry, "B", 0, 1.0, "GHashTable name entry", NULL,
           FALSE);
  redis_lock_registry_unref (registry);
  registry = NULL;
  trim_heap ();

  /* Bounded: the default capacity, ten times as many names (fewer with --quick). */
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_cache_capacity (registry, cap);
  trim_heap ();
  rss0 = rss_bytes ();
  if (!memory_fill (registry, 0, cap, &error))
    goto fail;
  rss_full = rss_bytes ();
  t0 = now_ns ();
  if (!memory_fill (registry, cap, m - cap, &error))
    goto fail;
  t1 = now_ns ();
  rss_end = rss_bytes ();
  size = redis_lock_registry_get_cache_size (registry);
  used = (double) (rss_full - rss0);
  growth = (double) (rss_end - rss_full);

  add_row (s, "cache size at capacity", (double) size, "", 0, (double) size / cap, "capacity",
           "= capacity", size == cap);
  add_row (s, "RSS growth past capacity", growth / (1024 * 1024), "MiB", 1, growth / used,
           "RSS of a full cache", "<= 0.10x", growth <= 0.10 * used);
  add_row (s, "obtain+unref with eviction", (double) (t1 - t0) / (m - cap), "ns", 0, NAN, NULL,
           NULL, FALSE);
  add_note (s, "%u names of %" G_GSIZE_FORMAT " bytes with capacity %u; then %u names with "
               "capacity %u; no Redis traffic; RSS from /proc/self/statm after malloc_trim",
            n, name_len, 2 * n, m, cap);
  redis_lock_registry_unref (registry);
  trim_heap ();
  return;

fail:
  add_na (s, "memory", "%s", error->message);
  if (registry != NULL)
    redis_lock_registry_unref (registry);
}

/* ------------------------------------------------------------------ output */

static const struct
{
  const char *name;
  const char *title;
  SectionFunc func;
} section_table[] = {
  { "raw", "Raw limit: EVALSHA of `return 1` on plain hiredis connections", section_raw },
  { "reentrant", "Re-entrant lock+unlock, the lock held once outside the loop",
    section_reentrant },
  { "uncontended", "Uncontended outermost lock+unlock", section_uncontended },
  { "handoff", "Cross-process hand-off, PUBSUB wait (the default)", section_handoff },
  { "handoff-spin", "Cross-process hand-off, SPIN wait (for comparison)", section_handoff_spin },
  { "independent", "Independent keys: 8 threads, one name each", section_independent },
  { "contention", "Same-process contention: 8 threads on one name", section_contention },
  { "watchdog", "Watchdog tick with many held leases", section_watchdog },
  { "memory", "Memory of the lock cache", section_memory },
};

static char *
format_value (double v, const char *unit, int decimals)
{
  if (isnan (v))
    return g_strdup ("n/a");
  return g_strdup_printf ("%.*f%s%s", decimals, v, *unit ? " " : "", unit);
}

static void
print_section (Section *s)
{
  guint i;

  g_print ("\n[%s] %s\n", s->name, s->title);
  g_print ("  reproduce: %s\n", s->command);
  g_print ("  %-30s %16s  %-34s %s\n", "figure", "value", "ratio to baseline", "target");
  for (i = 0; i < s->rows->len; i++)
    {
      Row *r = g_ptr_array_index (s->rows, i);
      g_autofree char *value = format_value (r->value, r->unit, r->decimals);
      g_autofree char *ratio = NULL;
      g_autofree char *target = NULL;

      if (r->note != NULL)
        {
          g_print ("  %-30s %16s  %s\n", r->metric, "n/a", r->note);
          continue;
        }
      ratio = isnan (r->ratio) ? g_strdup ("") : g_strdup_printf ("%.2fx %s", r->ratio, r->ratio_to);
      if (r->target != NULL)
        target = g_strdup_printf ("%s %s", r->target,
                                  r->met < 0 ? "" : r->met ? "ok" : "MISSED");
      g_print ("  %-30s %16s  %-34s %s\n", r->metric, value, ratio, target ? target : "");
    }
  for (i = 0; i < s->notes->len; i++)
    g_print ("  - %s\n", (char *) g_ptr_array_index (s->notes, i));
  g_print ("  (%.1f s)\n", s->seconds);
}

static void
json_string (GString *out, const char *s)
{
  const char *p;

  if (s == NULL)
    {
      g_string_append (out, "null");
      return;
    }
  g_string_append_c (out, '"');
  for (p = s; *p != '\0'; p++)
    {
      unsigned char c = (unsigned char) *p;

      if (c == '"' || c == '\\')
        g_string_append_printf (out, "\\%c", c);
      else if (c < 0x20)
        g_string_append_printf (out, "\\u%04x", c);
      else
        g_string_append_c (out, (char) c);
    }
  g_string_append_c (out, '"');
}

static void
json_number (GString *out, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  if (isnan (v) || isinf (v))
    g_string_append (out, "null");
  else
    g_string_append (out, g_ascii_formatd (buf, sizeof buf, "%.6g", v));
}

static void
print_json (Bench *b, double seconds)
{
  GString *out = g_string_new ("{\n  \"program\": \"redislock-bench\",\n  \"version\": ");
  guint i, j;

  json_string (out, REDIS_LOCK_VERSION_S);
  g_string_append_printf (out, ",\n  \"quick\": %s,\n  \"machine\": {\"nproc\": %ld, \"cpu\": ",
                          b->quick ? "true" : "false", b->nproc);
  json_string (out, b->cpu_model);
  g_string_append (out, ", \"kernel\": ");
  json_string (out, b->kernel);
  g_string_append (out, "},\n  \"redis\": {\"version\": ");
  json_string (out, b->redis_version);
  g_string_append_printf (out, ", \"server\": \"%s\"},\n  \"registry_key\": ",
                          b->own_server ? "private" : "external");
  json_string (out, b->key);
  g_string_append (out, ",\n  \"seconds\": ");
  json_number (out, seconds);
  g_string_append (out, ",\n  \"sections\": [");
  for (i = 0; i < b->sections->len; i++)
    {
      Section *s = g_ptr_array_index (b->sections, i);

      g_string_append (out, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
      json_string (out, s->name);
      g_string_append (out, ", \"title\": ");
      json_string (out, s->title);
      g_string_append (out, ", \"command\": ");
      json_string (out, s->command);
      g_string_append (out, ", \"seconds\": ");
      json_number (out, s->seconds);
      g_string_append (out, ",\n     \"figures\": [");
      for (j = 0; j < s->rows->len; j++)
        {
          Row *r = g_ptr_array_index (s->rows, j);

          g_string_append (out, j ? ",\n       {\"figure\": " : "\n       {\"figure\": ");
          json_string (out, r->metric);
          g_string_append (out, ", \"value\": ");
          json_number (out, r->value);
          g_string_append (out, ", \"unit\": ");
          json_string (out, r->unit);
          g_string_append (out, ", \"ratio\": ");
          json_number (out, r->ratio);
          g_string_append (out, ", \"ratio_to\": ");
          json_string (out, r->ratio_to);
          g_string_append (out, ", \"target\": ");
          json_string (out, r->target);
          g_string_append_printf (out, ", \"met\": %s",
                                  r->met < 0 ? "null" : r->met ? "true" : "false");
          if (r->note != NULL)
            {
              g_string_append (out, ", \"na_reason\": ");
              json_string (out, r->note);
            }
          g_string_append_c (out, '}');
        }
      g_string_append (out, "],\n     \"notes\": [");
      for (j = 0; j < s->notes->len; j++)
        {
          if (j)
            g_string_append (out, ", ");
          json_string (out, g_ptr_array_index (s->notes, j));
        }
      g_string_append (out, "]}");
    }
  g_string_append (out, "\n  ]\n}\n");
  g_print ("%s", out->str);
  g_string_free (out, TRUE);
}

static void
read_machine (Bench *b)
{
  g_autofree char *cpuinfo = NULL;
  struct utsname u;

  b->nproc = sysconf (_SC_NPROCESSORS_ONLN);
  if (g_file_get_contents ("/proc/cpuinfo", &cpuinfo, NULL, NULL))
    {
      const char *p = strstr (cpuinfo, "model name");

      if (p != NULL && (p = strchr (p, ':')) != NULL)
        b->cpu_model = g_strstrip (g_strndup (p + 1, strcspn (p + 1, "\n")));
    }
  if (b->cpu_model == NULL)
    b->cpu_model = g_strdup ("unknown CPU");
  if (uname (&u) == 0)
    b->kernel = g_strdup_printf ("%s %s %s", u.sysname, u.release, u.machine);
  else
    b->kernel = g_strdup ("unknown kernel");
}

static void
size_run (Bench *b)
{
  b->raw_calls = b->quick ? 5000 : 20000;
  b->raw8_calls = b->quick ? 1000 : 5000;
  b->reentrant_pairs = b->quick ? 200000 : 2000000;
  b->uncontended_pairs = b->quick ? 1000 : 5000;
  b->handoffs = b->quick ? 200 : 1000;
  b->spin_handoffs = b->quick ? 20 : 50;
  b->independent_pairs = b->quick ? 300 : 2000;
  b->contention_sections = b->quick ? 300 : 2000;
  b->watchdog_leases = 10000;
  b->memory_names = b->quick ? 100000 : 1000000;
  b->bounded_capacity = 100000;
  b->bounded_names = b->quick ? 200000 : 1000000;
}

/* ------------------------------------------------------------------ main */

int
main (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GOptionContext) context = NULL;
  g_autofree char *opt_url = NULL;
  g_autofree char *opt_only = NULL;
  g_autofree char *child_mode = NULL;
  g_autofree char *child_name = NULL;
  gboolean opt_quick = FALSE, opt_json = FALSE, opt_list = FALSE, opt_child = FALSE;
  gint child_steps = 0, child_hold_us = HANDOFF_HOLD_US;
  g_auto (GStrv) only = NULL;
  GOptionEntry entries[] = {
    { "url", 0, 0, G_OPTION_ARG_STRING, &opt_url,
      "Redis to use (redis:// or unix://); default $REDIS_URL, else a private redis-server",
      "URL" },
    { "quick", 0, 0, G_OPTION_ARG_NONE, &opt_quick, "Fast run with smaller counts", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &opt_json, "Print the figures as JSON", NULL },
    { "only", 0, 0, G_OPTION_ARG_STRING, &opt_only, "Run only these sections", "NAME[,NAME]" },
    { "list", 0, 0, G_OPTION_ARG_NONE, &opt_list, "List the sections", NULL },
    { "child", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &opt_child, NULL, NULL },
    { "child-mode", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &child_mode, NULL, NULL },
    { "child-name", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &child_name, NULL, NULL },
    { "child-steps", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &child_steps, NULL, NULL },
    { "child-hold-us", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &child_hold_us, NULL, NULL },
    { NULL, 0, 0, G_OPTION_ARG_NONE, NULL, NULL, NULL },
  };
  Bench bench, *b = &bench;
  gboolean need_raw8;
  gint64 start;
  guint i, j;

  context = g_option_context_new ("- measure redislock against raw Redis round trips");
  g_option_context_add_main_entries (context, entries, NULL);
  g_option_context_set_description (
    context, "Sections: raw reentrant uncontended handoff handoff-spin independent contention "
             "watchdog memory\n");
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("redislock-bench: %s\n", error->message);
      return 2;
    }
  if (opt_child)
    return child_main (child_mode, child_name, (guint) MAX (child_steps, 0), child_hold_us);
  if (opt_list)
    {
      for (i = 0; i < G_N_ELEMENTS (section_table); i++)
        g_print ("%-14s %s\n", section_table[i].name, section_table[i].title);
      return 0;
    }
  if (opt_only != NULL)
    {
      only = g_strsplit (opt_only, ",", -1);
      for (j = 0; only[j] != NULL; j++)
        {
          gboolean known = FALSE;

          g_strstrip (only[j]);
          for (i = 0; i < G_N_ELEMENTS (section_table); i++)
            known = known || g_strcmp0 (only[j], section_table[i].name) == 0;
          if (!known)
            {
              g_printerr ("redislock-bench: no section '%s' (see --list)\n", only[j]);
              return 2;
            }
        }
    }

  signal (SIGPIPE, SIG_IGN);
  memset (b, 0, sizeof *b);
  b->quick = opt_quick;
  b->json = opt_json;
  b->sections = g_ptr_array_new_with_free_func (section_free);
  b->self_path = g_file_read_link ("/proc/self/exe", NULL);
  if (b->self_path == NULL)
    b->self_path = g_strdup (argv[0]);
  size_run (b);
  read_machine (b);
  start = now_ns ();

  if (opt_url != NULL)
    b->url = g_strdup (opt_url);
  else if (g_getenv ("REDIS_URL") != NULL && *g_getenv ("REDIS_URL") != '\0')
    b->url = g_strdup (g_getenv ("REDIS_URL"));
  else
    {
      b->server = redis_lock_test_server_new (NULL, &error);
      if (b->server == NULL)
        {
          g_printerr ("redislock-bench: cannot start a redis-server: %s\n"
                      "(set REDIS_URL or pass --url to use a running one)\n",
                      error->message);
          return 1;
        }
      b->own_server = TRUE;
      b->url = g_strdup (redis_lock_test_server_get_url (b->server));
    }
  b->key = g_strdup_printf ("redislock-bench:%d:%08x", (int) getpid (), g_random_int ());

  need_raw8 = only == NULL || g_strv_contains ((const char *const *) only, "raw") ||
              g_strv_contains ((const char *const *) only, "independent");
  measure_raw (b, need_raw8);

  if (!b->json)
    {
      g_print ("redislock-bench %s, %s run\n", REDIS_LOCK_VERSION_S,
               b->quick ? "quick (--quick)" : "full");
      g_print ("machine:  %ld CPUs online, %s, %s\n", b->nproc, b->cpu_model, b->kernel);
      g_print ("redis:    redis-server %s, %s\n",
               b->redis_version ? b->redis_version : "(version unknown)",
               b->own_server ? "private, on a Unix socket (redislock-test.h)"
                             : "external (REDIS_URL / --url)");
      g_print ("registry: key \"%s\"\n", b->key);
      if (b->raw_error != NULL)
        g_print ("baseline: n/a (%s); ratios to it are n/a\n", b->raw_error);
      else
        g_print ("baseline: raw EVALSHA round trip p50 %.1f us, measured first in this run\n",
                 b->raw.p50 / 1000);
      g_print ("full run: make bench    one section: bench/redislock-bench --only NAME%s\n",
               b->quick ? " --quick" : "");
    }

  for (i = 0; i < G_N_ELEMENTS (section_table); i++)
    {
      Section *s;
      gint64 t0;

      if (only != NULL && !g_strv_contains ((const char *const *) only, section_table[i].name))
        continue;
      s = g_new0 (Section, 1);
      s->name = section_table[i].name;
      s->title = g_strdup (section_table[i].title);
      s->command = g_strdup_printf ("bench/redislock-bench --only %s%s", s->name,
                                    b->quick ? " --quick" : "");
      s->rows = g_ptr_array_new_with_free_func (row_free);
      s->notes = g_ptr_array_new_with_free_func (g_free);
      t0 = now_ns ();
      section_table[i].func (b, s);
      s->seconds = (double) (now_ns () - t0) / 1e9;
      g_ptr_array_add (b->sections, s);
      if (!b->json)
        print_section (s);
    }

  if (b->json)
    print_json (b, (double) (now_ns () - start) / 1e9);
  else
    g_print ("\ntotal %.1f s\n", (double) (now_ns () - start) / 1e9);

  redis_lock_test_server_free (b->server);
  g_ptr_array_unref (b->sections);
  g_free (b->url);
  g_free (b->key);
  g_free (b->self_path);
  g_free (b->redis_version);
  g_free (b->cpu_model);
  g_free (b->kernel);
  g_free (b->raw_error);
  g_free (b->raw8_error);
  return 0;
}
