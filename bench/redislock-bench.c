/* redislock-bench.c: what a redislock lock costs, measured against what Redis itself costs.
 *
 * A Redis-backed lock can never be faster than the Redis round trips it needs, so every
 * figure here is put next to a baseline measured in the same run on the same server,
 * most of them built from the round trip of an EVALSHA of a script that does nothing
 * (`return 1`) on a plain hiredis connection. An outermost lock+unlock needs two such
 * round trips (acquire script, release script), so it is compared with two raw calls
 * made back to back; a cross-process hand-off needs the release, the unlock
 * notification and the waiter's acquire, so it is compared with one round trip and with
 * the same ping-pong done by hand (PUBLISH, a blocked SUBSCRIBE reader, one EVALSHA);
 * eight threads on eight names can at best reach half the eight-connection EVALSHA rate;
 * a watchdog tick is compared with one pipelined batch of as many raw calls. What the
 * library promises to do without Redis (re-entry, the lock cache) is compared with the
 * GLib structure a user would otherwise reach for (GRecMutex, a GHashTable of names) and
 * checked against the registry's own counters (redis_lock_registry_get_stats), so that
 * "no Redis traffic" is proved, not assumed.
 *
 * Benchmarks like this one usually run on small shared machines where the speed of a
 * round trip drifts by a factor of two within seconds. So each baseline is measured
 * interleaved with the figure it divides (alternating blocks or rounds, or during the
 * holder's idle time in the hand-off), not once at the start: the ratios then hold even
 * when the absolute figures move. Latencies are timed one operation at a time on
 * CLOCK_MONOTONIC and reported as p50/p99; operations too short for that (re-entry, tens
 * of ns) are timed in batches and the batch means give the percentiles.
 *
 * The cross-process hand-off runs a second copy of this program (`--child`, started
 * with exec so that it never inherits a registry across fork()) and ping-pongs one lock
 * with it. Each side tells the other through a pipe that it is about to wait, and the
 * holder keeps the lock a little longer so the waiter is really blocked in Redis when the
 * release happens; the waiter's `contended_attempts` counter confirms each wait, and
 * hand-offs it does not confirm are left out. Both processes read the same
 * CLOCK_MONOTONIC, so "release returned in A" and "acquire returned in B" subtract.
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

/* Uncontended pairs alternate with raw pairs in blocks of this many. */
#define INTERLEAVE_BLOCK 25

/* ------------------------------------------------------------------ clocks, statistics */

static gint64
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64)ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

/* CPU time of the whole process (every thread, the library's included), in ns. */
static gint64
cpu_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (gint64)ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *)a;
  double y = *(const double *)b;

  return (x > y) - (x < y);
}

/* Median of @n values (sorts them); the mean of the middle two when @n is even. */
static double
median (double *v, guint n)
{
  if (n == 0)
    return NAN;
  qsort (v, n, sizeof (double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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
  gint64 x = *(const gint64 *)a;
  gint64 y = *(const gint64 *)b;

  return (x > y) - (x < y);
}

/* Nearest-rank percentile of @sorted (per mille: 500 = p50). */
static gint64
percentile (const gint64 *sorted, guint n, guint per_mille)
{
  guint64 rank = ((guint64)per_mille * n + 999) / 1000;

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
    sum += (double)samples[i];
  d.n = n;
  d.p50 = (double)percentile (samples, n, 500) / ops_per_sample;
  d.p99 = (double)percentile (samples, n, 990) / ops_per_sample;
  d.max = (double)samples[n - 1] / ops_per_sample;
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
  return (gint64)resident * sysconf (_SC_PAGESIZE);
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
  double value; /* NAN when the figure could not be produced (see note) */
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
add_row (Section *s, const char *metric, double value, const char *unit, int decimals, double ratio,
         const char *ratio_to, const char *target, gboolean met)
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

static void add_na (Section *s, const char *metric, const char *format, ...) G_GNUC_PRINTF (3, 4);
static void add_note (Section *s, const char *format, ...) G_GNUC_PRINTF (2, 3);

/* Adds a figure that could not be produced, with the reason. */
static void
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

/* Adds a line printed under the section's figures. */
static void
add_note (Section *s, const char *format, ...)
{
  va_list ap;

  va_start (ap, format);
  g_ptr_array_add (s->notes, g_strdup_vprintf (format, ap));
  va_end (ap);
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
static redisReply *raw_command (redisContext *c, GError **error, const char *format, ...)
    G_GNUC_PRINTF (3, 4);

static redisReply *
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

/* The lock protocol done by hand, for baselines: what any correct Redis lock must ask
 * of the server, without the library. Written from the protocol (DESIGN.md,
 * behaviours 1 and 2), in the cheapest shape: one SET NX in the uncontended case.
 * acquire: KEYS[1] = key, ARGV[1] = owner id, ARGV[2] = TTL ms; returns 1 when held.
 * release: KEYS[1] = key, ARGV[1] = owner id, ARGV[2] = channel; deletes and publishes
 * only for the owner. */
static const char raw_acquire_script[]
    = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
      "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
      "  redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1\n"
      "end\n"
      "return 0\n";
static const char raw_release_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                         "  redis.call('UNLINK', KEYS[1])\n"
                                         "  redis.call('PUBLISH', ARGV[2], KEYS[1])\n"
                                         "  return 1\n"
                                         "end\n"
                                         "return 0\n";

/* A plain hiredis connection with the trivial script and the hand-made lock scripts
 * loaded. */
typedef struct
{
  redisContext *c;
  char *sha;
  char *acquire_sha;
  char *release_sha;
} RawConn;

static void
raw_close (RawConn *r)
{
  if (r == NULL)
    return;
  if (r->c != NULL)
    redisFree (r->c);
  g_free (r->sha);
  g_free (r->acquire_sha);
  g_free (r->release_sha);
  g_free (r);
}

/* SCRIPT LOAD; the script's sha or NULL with @error set. */
static char *
raw_load (redisContext *c, const char *script, GError **error)
{
  redisReply *reply = raw_command (c, error, "SCRIPT LOAD %s", script);
  char *sha;

  if (reply == NULL)
    return NULL;
  sha = g_strdup (reply->type == REDIS_REPLY_STRING ? reply->str : "");
  freeReplyObject (reply);
  return sha;
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RawConn, raw_close)

static RawConn *
raw_open (const RawTarget *t, GError **error)
{
  g_autoptr (RawConn) r = g_new0 (RawConn, 1);

  r->c = raw_connect (t, error);
  if (r->c == NULL || (r->sha = raw_load (r->c, "return 1", error)) == NULL
      || (r->acquire_sha = raw_load (r->c, raw_acquire_script, error)) == NULL
      || (r->release_sha = raw_load (r->c, raw_release_script, error)) == NULL)
    return NULL;
  return g_steal_pointer (&r);
}

/* One timed-worthy call: EVALSHA of `return 1`. */
static gboolean
raw_call (RawConn *r, GError **error)
{
  return raw_evalsha (r->c, r->sha, error);
}

/* One lock+unlock of @key by hand: the acquire script, then the release script. */
static gboolean
raw_lock_pair (RawConn *r, const char *key, GError **error)
{
  redisReply *reply;
  gboolean ok;

  reply = raw_command (r->c, error, "EVALSHA %s 1 %s %s %s", r->acquire_sha, key, "raw-owner",
                       "60000");
  if (reply == NULL)
    return FALSE;
  ok = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
  freeReplyObject (reply);
  if (ok)
    {
      reply = raw_command (r->c, error, "EVALSHA %s 1 %s %s %s-channel", r->release_sha, key,
                           "raw-owner", key);
      if (reply == NULL)
        return FALSE;
      ok = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
      freeReplyObject (reply);
    }
  if (!ok)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "hand-made lock of %s failed", key);
  return ok;
}

/* Sends @n EVALSHA calls in one pipelined batch and reads every reply: the least a
 * batched renewal of @n leases can cost. Returns the wall time in ns, or -1. */
static gint64
raw_pipeline (RawConn *r, guint n, GError **error)
{
  gint64 t0 = now_ns ();
  guint i;

  for (i = 0; i < n; i++)
    redisAppendCommand (r->c, "EVALSHA %s 0", r->sha);
  for (i = 0; i < n; i++)
    {
      void *reply = NULL;

      if (redisGetReply (r->c, &reply) != REDIS_OK)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", r->c->errstr);
          return -1;
        }
      freeReplyObject (reply);
    }
  return now_ns () - t0;
}

/* The server's own account of EVALSHA (INFO commandstats): calls and CPU µs spent in
 * them since start. Both 0 when the server does not say. */
static void
raw_evalsha_stats (RawConn *r, guint64 *calls, guint64 *usec)
{
  redisReply *reply = raw_command (r->c, NULL, "INFO commandstats");
  const char *line;

  *calls = *usec = 0;
  if (reply == NULL)
    return;
  if (reply->type == REDIS_REPLY_STRING && (line = strstr (reply->str, "cmdstat_evalsha:")) != NULL)
    {
      unsigned long long c = 0, u = 0;

      if (sscanf (line, "cmdstat_evalsha:calls=%llu,usec=%llu", &c, &u) == 2)
        {
          *calls = c;
          *usec = u;
        }
    }
  freeReplyObject (reply);
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
  RawTarget target; /* the same server, for plain hiredis connections */

  /* machine */
  long nproc;
  char *cpu_model;
  char *kernel;

  /* The reference round trip, measured first: EVALSHA "return 1" on one plain hiredis
   * connection. Sections measure their own baselines next to their figures; this one
   * is for figures that have none of their own. */
  char *raw_error; /* why there is no reference */
  Dist raw;        /* ns per call */

  /* sizes of the run */
  guint raw_calls;
  guint raw8_calls;
  guint reentrant_pairs;
  guint uncontended_pairs;
  guint handoffs;
  guint floor_handoffs;
  guint spin_handoffs;
  guint independent_pairs;
  guint independent_rounds;
  guint contention_sections;
  guint watchdog_leases;
  guint memory_names;
  guint bounded_capacity;
  guint bounded_names;

  GPtrArray *sections; /* of Section */
};

/* The reference round trip in µs, NAN when there is none. */
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
  return (double)(t1 - t0) / 1e9;
}

/* ------------------------------------------------------------------ 1. raw limit */

/* What a parallel run cost: wall time, CPU time of this process, and the server's
 * EVALSHA calls and CPU during it (zero without a control connection). */
typedef struct
{
  double seconds;
  double cpu_seconds;
  guint64 server_calls;
  guint64 server_usec;
} RunCost;

static void
run_costed (guint n, WorkFunc func, gpointer *data, RawConn *control, RunCost *cost)
{
  guint64 calls0 = 0, usec0 = 0, calls1 = 0, usec1 = 0;
  gint64 cpu0;

  if (control != NULL)
    raw_evalsha_stats (control, &calls0, &usec0);
  cpu0 = cpu_ns ();
  cost->seconds = run_parallel (n, func, data);
  cost->cpu_seconds = (double)(cpu_ns () - cpu0) / 1e9;
  if (control != NULL)
    raw_evalsha_stats (control, &calls1, &usec1);
  cost->server_calls = calls1 - calls0;
  cost->server_usec = usec1 - usec0;
}

static void
run_cost_add (RunCost *total, const RunCost *cost)
{
  total->seconds += cost->seconds;
  total->cpu_seconds += cost->cpu_seconds;
  total->server_calls += cost->server_calls;
  total->server_usec += cost->server_usec;
}

/* Server CPU per EVALSHA in µs, NAN when the server did not say. */
static double
server_us_per_call (const RunCost *cost)
{
  return cost->server_calls > 0 ? (double)cost->server_usec / cost->server_calls : NAN;
}

typedef struct
{
  RawConn *conn;
  guint calls;
  char *key; /* when set, each call is a hand-made lock+unlock of this key */
  GError *error;
} RawWorker;

static void
raw_worker (gpointer data)
{
  RawWorker *w = data;
  guint i;

  for (i = 0; i < w->calls; i++)
    if (w->key != NULL ? !raw_lock_pair (w->conn, w->key, &w->error)
                       : !raw_call (w->conn, &w->error))
      return;
}

static void
raw_workers_close (RawWorker *workers)
{
  guint i;

  for (i = 0; i < BENCH_THREADS; i++)
    {
      raw_close (workers[i].conn);
      g_free (workers[i].key);
      g_clear_error (&workers[i].error);
    }
  memset (workers, 0, sizeof (RawWorker) * BENCH_THREADS);
}

/* Opens a connection for each of BENCH_THREADS workers and warms them up. */
static gboolean
raw_workers_open (Bench *b, RawWorker *workers, GError **error)
{
  gpointer data[BENCH_THREADS];
  guint i;

  memset (workers, 0, sizeof (RawWorker) * BENCH_THREADS);
  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].conn = raw_open (&b->target, error);
      if (workers[i].conn == NULL)
        {
          raw_workers_close (workers);
          return FALSE;
        }
      workers[i].calls = 200;
      data[i] = &workers[i];
    }
  run_parallel (BENCH_THREADS, raw_worker, data);
  return TRUE;
}

/* BENCH_THREADS threads on their own connection, @calls EVALSHA of `return 1` each, or
 * with @lock_prefix, @calls hand-made lock+unlock pairs each, of key "@lock_prefix:i".
 * Returns the aggregate rate in calls (pairs) per second, or NAN with @error set. */
static double
raw_workers_run (RawWorker *workers, guint calls, const char *lock_prefix, RawConn *control,
                 RunCost *cost, GError **error)
{
  gpointer data[BENCH_THREADS];
  guint i;

  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].calls = calls;
      g_free (workers[i].key);
      workers[i].key = lock_prefix != NULL ? g_strdup_printf ("%s:%u", lock_prefix, i) : NULL;
      data[i] = &workers[i];
    }
  run_costed (BENCH_THREADS, raw_worker, data, control, cost);
  for (i = 0; i < BENCH_THREADS; i++)
    if (workers[i].error != NULL)
      {
        g_propagate_error (error, workers[i].error);
        workers[i].error = NULL;
        return NAN;
      }
  return (double)BENCH_THREADS * calls / cost->seconds;
}

/* The reference round trip (and the server's version), measured before any section. */
static void
measure_reference (Bench *b)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RawConn) conn = NULL;
  g_autofree gint64 *samples = g_new (gint64, b->raw_calls);
  redisReply *r;
  guint i;

  conn = raw_open (&b->target, &error);
  if (conn == NULL)
    goto fail;
  r = raw_command (conn->c, &error, "INFO server");
  if (r == NULL)
    goto fail;
  if (r->type == REDIS_REPLY_STRING)
    {
      const char *v = strstr (r->str, "redis_version:");

      if (v != NULL)
        b->redis_version = g_strndup (v + 14, strcspn (v + 14, "\r\n"));
    }
  freeReplyObject (r);

  for (i = 0; i < 1000; i++)
    if (!raw_call (conn, &error))
      goto fail;
  for (i = 0; i < b->raw_calls; i++)
    {
      gint64 t0 = now_ns ();

      if (!raw_call (conn, &error))
        goto fail;
      samples[i] = now_ns () - t0;
    }
  b->raw = dist_of (samples, b->raw_calls, 1);
  return;

fail:
  b->raw_error = g_strdup (error->message);
}

static void
section_raw (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RawConn) control = NULL;
  RawWorker workers[BENCH_THREADS];
  RunCost cost;
  char metric[64];
  double rate1, rate8;

  if (b->raw_error != NULL)
    {
      add_na (s, "round trip", "%s", b->raw_error);
      return;
    }
  rate1 = 1e9 / b->raw.mean;
  add_row (s, "round trip p50", b->raw.p50 / 1000, "us", 1, 1.0, "raw p50", NULL, FALSE);
  add_row (s, "round trip p99", b->raw.p99 / 1000, "us", 1, b->raw.p99 / b->raw.p50, "raw p50",
           NULL, FALSE);
  add_row (s, "round trip mean", b->raw.mean / 1000, "us", 1, b->raw.mean / b->raw.p50, "raw p50",
           NULL, FALSE);
  add_row (s, "1 connection", rate1, "calls/s", 0, 1.0, "1 connection", NULL, FALSE);

  g_snprintf (metric, sizeof metric, "%d threads, a connection each", BENCH_THREADS);
  control = raw_open (&b->target, &error);
  if (control == NULL || !raw_workers_open (b, workers, &error))
    {
      add_na (s, metric, "%s", error->message);
      return;
    }
  rate8 = raw_workers_run (workers, b->raw8_calls, NULL, control, &cost, &error);
  raw_workers_close (workers);
  if (isnan (rate8))
    {
      add_na (s, metric, "%s", error->message);
      return;
    }
  add_row (s, metric, rate8, "calls/s", 0, rate8 / rate1, "1 connection", NULL, FALSE);
  add_row (s, "  server CPU per call", server_us_per_call (&cost), "us", 2, NAN, NULL, NULL, FALSE);
  add_row (s, "  client CPU per call", cost.cpu_seconds * 1e6 / (BENCH_THREADS * b->raw8_calls),
           "us", 2, NAN, NULL, NULL, FALSE);
  add_note (s,
            "%u timed calls on one connection after 1000 warm-up calls (the reference for "
            "figures without a baseline of their own); %u calls per thread",
            b->raw_calls, b->raw8_calls);
  add_note (s, "server CPU per call is INFO commandstats usec/calls for EVALSHA over the run");
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
  g_autofree gint64 *lib_samples = g_new (gint64, batches);
  g_autofree gint64 *glib_samples = g_new (gint64, batches);
  GRecMutex rec;
  Dist lib, glib;
  guint i, j;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "reentrant", &error);
  if (lock == NULL || !redis_lock_lock (lock, &error))
    goto fail;

  /* The baseline, a GRecMutex held once, in batches alternating with the lock's. */
  g_rec_mutex_init (&rec);
  g_rec_mutex_lock (&rec);
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < batches; i++)
    {
      gint64 t0 = now_ns ();

      for (j = 0; j < REENTRANT_BATCH; j++)
        {
          g_rec_mutex_lock (&rec);
          g_rec_mutex_unlock (&rec);
        }
      glib_samples[i] = now_ns () - t0;

      t0 = now_ns ();
      for (j = 0; j < REENTRANT_BATCH; j++)
        {
          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            break;
        }
      lib_samples[i] = now_ns () - t0;
      if (error != NULL)
        break;
    }
  redis_lock_registry_get_stats (registry, &after);
  g_rec_mutex_unlock (&rec);
  g_rec_mutex_clear (&rec);
  if (error != NULL)
    {
      g_autoptr (GError) local = NULL;

      redis_lock_unlock (lock, &local);
      goto fail;
    }
  if (!redis_lock_unlock (lock, &error))
    goto fail;
  lib = dist_of (lib_samples, batches, REENTRANT_BATCH);
  glib = dist_of (glib_samples, batches, REENTRANT_BATCH);

  add_row (s, "pair p50", lib.p50, "ns", 1, lib.p50 / glib.p50, "GRecMutex p50", NULL, FALSE);
  add_row (s, "pair p99", lib.p99, "ns", 1, lib.p99 / glib.p99, "GRecMutex p99", NULL, FALSE);
  add_row (s, "Redis commands in the loop", (double)(after.commands - before.commands), "", 0, NAN,
           NULL, "= 0", after.commands == before.commands);
  add_row (s, "GRecMutex pair p50", glib.p50, "ns", 1, 1.0, "GRecMutex p50", NULL, FALSE);
  add_row (s, "GRecMutex pair p99", glib.p99, "ns", 1, 1.0, "GRecMutex p99", NULL, FALSE);
  add_note (s,
            "%u pairs in batches of %u alternating with GRecMutex batches; percentiles are "
            "of the batch means",
            batches * REENTRANT_BATCH, REENTRANT_BATCH);
  add_note (s, "commands: the registry's `commands` counter (get_stats), delta over the loop");
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
  g_autoptr (RawConn) raw = NULL;
  RedisLockRegistryStats before, after;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *lib_samples = g_new (gint64, n);
  g_autofree gint64 *raw_samples = g_new (gint64, n);
  g_autofree gint64 *hand_samples = g_new (gint64, n);
  g_autofree char *hand_key = g_strdup_printf ("%s-by-hand:uncontended", b->key);
  double commands, round_trips;
  Dist lib, raw_pair, hand;
  guint i, k;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "uncontended", &error);
  if (lock == NULL)
    goto fail;
  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  for (i = 0; i < 200; i++)
    if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error)
        || !raw_call (raw, &error))
      goto fail;

  /* Blocks of lock+unlock pairs alternate with blocks of raw pairs (two EVALSHA back
   * to back), so both see the same machine. */
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < n; i += INTERLEAVE_BLOCK)
    {
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!raw_call (raw, &error) || !raw_call (raw, &error))
            goto fail;
          raw_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!raw_lock_pair (raw, hand_key, &error))
            goto fail;
          hand_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            goto fail;
          lib_samples[k] = now_ns () - t0;
        }
    }
  redis_lock_registry_get_stats (registry, &after);
  lib = dist_of (lib_samples, n, 1);
  raw_pair = dist_of (raw_samples, n, 1);
  hand = dist_of (hand_samples, n, 1);
  commands = (double)(after.commands - before.commands) / n;
  round_trips = (double)(after.round_trips - before.round_trips) / n;

  add_row (s, "pair p50", lib.p50 / 1000, "us", 1, lib.p50 / raw_pair.p50, "2 raw calls p50",
           "<= 1.15x", lib.p50 <= 1.15 * raw_pair.p50);
  add_row (s, "pair p99", lib.p99 / 1000, "us", 1, lib.p99 / raw_pair.p99, "2 raw calls p99", NULL,
           FALSE);
  add_row (s, "pair mean", lib.mean / 1000, "us", 1, lib.mean / raw_pair.mean, "2 raw calls mean",
           NULL, FALSE);
  add_row (s, "  the same, vs by hand", lib.p50 / 1000, "us", 1, lib.p50 / hand.p50,
           "by-hand pair p50", NULL, FALSE);
  add_row (s, "by-hand pair p50 (baseline)", hand.p50 / 1000, "us", 1, hand.p50 / raw_pair.p50,
           "2 raw calls p50", NULL, FALSE);
  add_row (s, "2 raw calls p50 (baseline)", raw_pair.p50 / 1000, "us", 1, 1.0, "2 raw calls p50",
           NULL, FALSE);
  add_row (s, "2 raw calls p99 (baseline)", raw_pair.p99 / 1000, "us", 1, 1.0, "2 raw calls p99",
           NULL, FALSE);
  add_row (s, "Redis commands per pair", commands, "", 2, commands / 2, "2", NULL, FALSE);
  add_row (s, "round trips per pair", round_trips, "", 2, round_trips / 2, "2", NULL, FALSE);
  add_note (s,
            "%u pairs on one name from one thread, each timed, in blocks of %d alternating "
            "with blocks of two raw EVALSHA calls and blocks of by-hand pairs (the same protocol "
            "from plain hiredis), after 200 warm-up pairs",
            n, INTERLEAVE_BLOCK);
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
  /* the parent measures raw round trips while it holds the lock (NULL in the child) */
  RawConn *raw;
  gint64 *raw_samples;
  guint n_raw;
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

static void
pingpong_record (PingPong *pp, guint step, gint64 latency_ns, gboolean waited)
{
  if (pp->latency_ns == NULL)
    return;
  pp->latency_ns[step] = latency_ns;
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
  gint64 released;

  if (!msg_expect (pp->in_fd, MSG_WAITING, &m, error) || !pingpong_idle (pp, error))
    return FALSE;
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

/* The floor, the child's side: the same hand-off shape without the library. The child
 * blocks reading a SUBSCRIBE connection; the parent's PUBLISH wakes it and it makes one
 * EVALSHA, as a waiter woken by an unlock notification makes one acquire attempt. */
static gboolean
floor_child (guint steps, int in_fd, int out_fd, GError **error)
{
  const char *url = g_getenv ("REDISLOCK_BENCH_URL");
  g_autofree char *channel = g_strdup_printf ("%s-floor", g_getenv ("REDISLOCK_BENCH_KEY"));
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

      if (!msg_send (out_fd, MSG_WAITING, FALSE, 0, error))
        goto out;
      if (redisGetReply (sub, (void **)&reply) != REDIS_OK)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", sub->errstr);
          goto out;
        }
      freeReplyObject (reply);
      if (!raw_call (cmd, error))
        goto out;
      acquired = now_ns ();
      if (!msg_expect (in_fd, MSG_RELEASED, &m, error)
          || !msg_send (out_fd, MSG_ACQUIRED, TRUE, acquired - m.value, error))
        goto out;
    }
  ok = TRUE;
out:
  if (sub != NULL)
    redisFree (sub);
  raw_target_clear (&t);
  return ok;
}

static const char *
wait_mode_name (RedisLockWaitMode mode)
{
  return mode == REDIS_LOCK_WAIT_SPIN ? "spin" : "pubsub";
}

/* The other side of the hand-off: `redislock-bench --child`, started with exec by the
 * parent, stdin and stdout being the pipes. The URL and registry key come from the
 * environment so that a password never shows in the process list. Mode "raw" runs the
 * floor instead of the library. */
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
  g_printerr ("redislock-bench --child: %s\n", error->message);
  return 1;
}

/* Starts `redislock-bench --child` with pipes for its stdin and stdout. */
static gboolean
child_spawn (Bench *b, const char *mode, const char *name, guint steps, GPid *pid, int *to_child,
             int *from_child, GError **error)
{
  g_autofree char *mode_arg = g_strdup_printf ("--child-mode=%s", mode);
  g_autofree char *name_arg = g_strdup_printf ("--child-name=%s", name);
  g_autofree char *steps_arg = g_strdup_printf ("--child-steps=%u", steps);
  g_autofree char *hold_arg = g_strdup_printf ("--child-hold-us=%d", HANDOFF_HOLD_US);
  const char *argv[] = { b->self_path, "--child", mode_arg, name_arg, steps_arg, hold_arg, NULL };
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

/* The floor, the parent's side: PUBLISH after the same hold, one direction only.
 * Fills @floor with the hand-off distribution (warm-up left out). */
static gboolean
floor_run (Bench *b, guint steps, Dist *floor_dist, GError **error)
{
  g_autoptr (RawConn) raw = NULL;
  g_autofree char *channel = g_strdup_printf ("%s-floor", b->key);
  g_autofree gint64 *latency = g_new0 (gint64, steps);
  GPid pid = 0;
  int to_child = -1, from_child = -1;
  gboolean ok = TRUE;
  guint i;

  raw = raw_open (&b->target, error);
  if (raw == NULL || !child_spawn (b, "raw", "floor", steps, &pid, &to_child, &from_child, error))
    return FALSE;
  for (i = 0; ok && i < steps; i++)
    {
      redisReply *reply;
      Msg m;

      ok = msg_expect (from_child, MSG_WAITING, &m, error);
      if (!ok)
        break;
      g_usleep (HANDOFF_HOLD_US);
      reply = raw_command (raw->c, error, "PUBLISH %s %s", channel, "released");
      ok = reply != NULL;
      if (ok && (reply->type != REDIS_REPLY_INTEGER || reply->integer < 1))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "PUBLISH reached no subscriber");
          ok = FALSE;
        }
      if (reply != NULL)
        freeReplyObject (reply);
      ok = ok && msg_send (to_child, MSG_RELEASED, FALSE, now_ns (), error)
           && msg_expect (from_child, MSG_ACQUIRED, &m, error);
      if (ok)
        latency[i] = m.value;
    }
  if (!child_reap (pid, to_child, from_child, ok, error))
    return FALSE;
  *floor_dist = dist_of (latency + HANDOFF_WARMUP, steps - HANDOFF_WARMUP, 1);
  return TRUE;
}

/* The parent's side of the library hand-off: holds the lock, starts the child,
 * ping-pongs, reports. */
static void
handoff_run (Bench *b, Section *s, RedisLockWaitMode mode, guint steps)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RawConn) raw = NULL;
  g_autofree char *name = g_strdup_printf ("handoff-%s", wait_mode_name (mode));
  g_autofree gint64 *latency = g_new0 (gint64, steps);
  g_autofree gboolean *waited = g_new0 (gboolean, steps);
  g_autofree gint64 *real = g_new0 (gint64, steps);
  g_autofree gint64 *raw_samples = g_new0 (gint64, 2 * steps);
  gboolean pubsub = mode == REDIS_LOCK_WAIT_PUBSUB;
  GPid pid = 0;
  int to_child = -1, from_child = -1;
  guint counted = 0, n_real = 0, i;
  PingPong pp;
  Dist d, rt, fl;
  gboolean ok;

  g_assert (steps > HANDOFF_WARMUP);
  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_wait_mode (registry, mode);
  lock = redis_lock_registry_obtain (registry, name, &error);
  if (lock == NULL || !redis_lock_lock (lock, &error))
    goto fail;
  if (!child_spawn (b, wait_mode_name (mode), name, steps, &pid, &to_child, &from_child, &error))
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
  pp.raw = raw;
  pp.raw_samples = raw_samples;
  ok = pingpong_run (&pp, steps, TRUE, &error);
  if (!child_reap (pid, to_child, from_child, ok, &error))
    goto fail;

  for (i = HANDOFF_WARMUP; i < steps; i++)
    {
      counted++;
      if (waited[i])
        real[n_real++] = latency[i];
    }
  if (n_real == 0)
    {
      add_note (s, "contended_attempts never moved in the waiter: waits unconfirmed, "
                   "all hand-offs counted");
      for (i = HANDOFF_WARMUP; i < steps; i++)
        real[n_real++] = latency[i];
    }
  d = dist_of (real, n_real, 1);
  rt = dist_of (raw_samples, pp.n_raw, 1);

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
  if (pubsub)
    {
      g_autoptr (GError) floor_error = NULL;

      if (!floor_run (b, b->floor_handoffs, &fl, &floor_error))
        add_na (s, "raw hand-off floor", "%s", floor_error->message);
      else
        {
          add_row (s, "raw hand-off floor p50", fl.p50 / 1000, "us", 1, fl.p50 / rt.p50, "raw p50",
                   NULL, FALSE);
          add_row (s, "raw hand-off floor p99", fl.p99 / 1000, "us", 1, fl.p99 / rt.p50, "raw p50",
                   NULL, FALSE);
          add_row (s, "hand-off p50 over the floor", (d.p50 - fl.p50) / 1000, "us", 1,
                   d.p50 / fl.p50, "raw floor p50", NULL, FALSE);
        }
    }
  add_note (s,
            "%u hand-offs between two processes (first %d not counted), %s wait mode%s; "
            "the holder keeps the lock %d us after the waiter announces itself",
            steps, HANDOFF_WARMUP, wait_mode_name (mode),
            pubsub ? "" : ", idle_between_tries 100 ms (the default)", HANDOFF_HOLD_US);
  add_note (s, "baseline (raw p50): two raw EVALSHA round trips timed by the holder at the "
               "start of each hold, while the waiter is blocked: like the hand-off, they find "
               "the server and the processes just woken; the reference p50 is back-to-back "
               "calls, a hot round trip");
  if (pubsub)
    add_note (s,
              "floor: the same ping-pong without the library (%u hand-offs): PUBLISH, a "
              "process blocked reading SUBSCRIBE wakes and makes one EVALSHA",
              b->floor_handoffs);
  else
    add_note (s,
              "the waiter's first attempt fails about %d us before the release, so each "
              "hand-off waits out most of one idle period",
              HANDOFF_HOLD_US);
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
  gint *tickets;     /* when not NULL: pairs are taken from this shared count instead */
  GError *error;
} PairWorker;

static void
pair_worker (gpointer data)
{
  PairWorker *w = data;
  guint i;

  for (i = 0; w->tickets != NULL ? g_atomic_int_add (w->tickets, -1) > 0 : i < w->pairs; i++)
    {
      if (!redis_lock_lock (w->lock, &w->error))
        return;
      if (w->counter != NULL)
        (*w->counter)++;
      if (!redis_lock_unlock (w->lock, &w->error))
        return;
    }
}

/* BENCH_THREADS pair workers, @pairs lock+unlock pairs each. Returns the aggregate
 * rate in pairs/s, or NAN with @error set. */
static double
pair_workers_run (PairWorker *workers, guint pairs, RawConn *control, RunCost *cost, GError **error)
{
  gpointer data[BENCH_THREADS];
  guint i;

  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].pairs = pairs;
      if (workers[i].tickets != NULL)
        *workers[i].tickets = (gint)(BENCH_THREADS * pairs);
      data[i] = &workers[i];
    }
  run_costed (BENCH_THREADS, pair_worker, data, control, cost);
  for (i = 0; i < BENCH_THREADS; i++)
    if (workers[i].error != NULL)
      {
        g_propagate_error (error, workers[i].error);
        workers[i].error = NULL;
        return NAN;
      }
  return (double)BENCH_THREADS * pairs / cost->seconds;
}

static void
section_independent (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RawConn) control = NULL;
  g_autofree char *hand_prefix = g_strdup_printf ("%s-by-hand:independent", b->key);
  PairWorker workers[BENCH_THREADS];
  RawWorker raw_workers[BENCH_THREADS];
  RedisLockRegistryStats before, after;
  guint rounds = b->independent_rounds, pairs = b->independent_pairs, r, i;
  double lib_rates[8], raw_rates[8], hand_rates[8], lib_rate, raw_rate, hand_rate;
  double lib_cpu = 0, raw_cpu = 0, hand_cpu = 0, ops;
  RunCost lib_cost = { 0, 0, 0, 0 }, raw_cost = { 0, 0, 0, 0 }, hand_cost = { 0, 0, 0, 0 };
  RunCost cost;
  guint64 commands = 0;

  g_assert (rounds <= G_N_ELEMENTS (lib_rates));
  memset (workers, 0, sizeof workers);
  memset (raw_workers, 0, sizeof raw_workers);
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
  control = raw_open (&b->target, &error);
  if (control == NULL || !raw_workers_open (b, raw_workers, &error))
    goto fail;
  if (isnan (pair_workers_run (workers, pairs / 10 + 1, NULL, &cost, &error))
      || isnan (raw_workers_run (raw_workers, pairs / 10 + 1, hand_prefix, NULL, &cost, &error)))
    goto fail;

  /* Rounds alternate: the raw rate (two calls per pair's worth), the same protocol by
   * hand, then the library's. */
  for (r = 0; r < rounds; r++)
    {
      raw_rates[r] = raw_workers_run (raw_workers, 2 * pairs, NULL, control, &cost, &error);
      if (isnan (raw_rates[r]))
        goto fail;
      run_cost_add (&raw_cost, &cost);
      hand_rates[r] = raw_workers_run (raw_workers, pairs, hand_prefix, control, &cost, &error);
      if (isnan (hand_rates[r]))
        goto fail;
      run_cost_add (&hand_cost, &cost);

      redis_lock_registry_get_stats (registry, &before);
      lib_rates[r] = pair_workers_run (workers, pairs, control, &cost, &error);
      if (isnan (lib_rates[r]))
        goto fail;
      redis_lock_registry_get_stats (registry, &after);
      commands += after.commands - before.commands;
      run_cost_add (&lib_cost, &cost);
    }
  lib_rate = median (lib_rates, rounds);
  raw_rate = median (raw_rates, rounds);
  hand_rate = median (hand_rates, rounds);
  ops = (double)rounds * BENCH_THREADS * pairs;
  lib_cpu = lib_cost.cpu_seconds * 1e6 / ops;
  raw_cpu = raw_cost.cpu_seconds * 1e6 / ops;
  hand_cpu = hand_cost.cpu_seconds * 1e6 / ops;

  add_row (s, "pairs/s", lib_rate, "pairs/s", 0, lib_rate / (raw_rate / 2), "raw 8-conn rate / 2",
           ">= 0.90x", lib_rate >= 0.9 * raw_rate / 2);
  add_row (s, "  the same, vs by hand", lib_rate, "pairs/s", 0, lib_rate / hand_rate,
           "by-hand pairs/s", NULL, FALSE);
  add_row (s, "raw 8-conn rate (baseline)", raw_rate, "calls/s", 0, 1.0, "raw 8-conn rate", NULL,
           FALSE);
  add_row (s, "by-hand pairs/s (baseline)", hand_rate, "pairs/s", 0, hand_rate / (raw_rate / 2),
           "raw 8-conn rate / 2", NULL, FALSE);
  add_row (s, "server CPU per EVALSHA", server_us_per_call (&lib_cost), "us", 2,
           server_us_per_call (&lib_cost) / server_us_per_call (&raw_cost), "raw EVALSHA", NULL,
           FALSE);
  add_row (s, "  by hand", server_us_per_call (&hand_cost), "us", 2,
           server_us_per_call (&hand_cost) / server_us_per_call (&raw_cost), "raw EVALSHA", NULL,
           FALSE);
  add_row (s, "  raw EVALSHA (baseline)", server_us_per_call (&raw_cost), "us", 2, 1.0,
           "raw EVALSHA", NULL, FALSE);
  add_row (s, "client CPU per pair", lib_cpu, "us", 2, lib_cpu / raw_cpu, "2 raw calls", NULL,
           FALSE);
  add_row (s, "  by hand", hand_cpu, "us", 2, hand_cpu / raw_cpu, "2 raw calls", NULL, FALSE);
  add_row (s, "  2 raw calls (baseline)", raw_cpu, "us", 2, 1.0, "2 raw calls", NULL, FALSE);
  add_row (s, "Redis commands per pair", (double)commands / ops, "", 2, NAN, NULL, NULL, FALSE);
  add_note (s,
            "%d threads, each locking and unlocking its own name %u times per round; %u "
            "rounds, each after %d raw threads making %u calls each and %u pairs by hand; "
            "medians of the rounds",
            BENCH_THREADS, pairs, rounds, BENCH_THREADS, 2 * pairs, pairs);
  add_note (s, "by hand: the same lock protocol from plain hiredis (SET NX PX / GET+UNLINK+PUBLISH "
               "scripts), what the server must do for any correct lock");
  add_note (s, "server CPU: INFO commandstats usec/calls for EVALSHA; client CPU: this "
               "process's CPU time (all threads) per pair");
  goto out;

fail:
  add_na (s, "independent keys", "%s", error->message);
out:
  raw_workers_close (raw_workers);
  for (i = 0; i < BENCH_THREADS; i++)
    {
      redis_lock_unref (workers[i].lock);
      g_clear_error (&workers[i].error);
    }
}

/* Serial pairs of raw calls on one connection: the rate a lock that must visit Redis
 * twice per critical section could reach at best. Returns pairs/s or NAN. */
static double
raw_serial_pairs (RawConn *raw, guint pairs, GError **error)
{
  gint64 t0 = now_ns ();
  guint i;

  for (i = 0; i < pairs; i++)
    if (!raw_call (raw, error) || !raw_call (raw, error))
      return NAN;
  return pairs * 1e9 / (double)(now_ns () - t0);
}

static void
section_contention (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RawConn) raw = NULL;
  PairWorker workers[BENCH_THREADS];
  RedisLockRegistryStats before, after;
  guint rounds = b->independent_rounds, per = b->contention_sections, r, i;
  guint64 counter = 0, expected, commands = 0, round_trips = 0, plain_commands = 0;
  gint tickets = 0;
  double lib_rates[8], raw_rates[8], plain_rates[8], lib_rate, raw_rate, plain_rate, sections;
  RunCost cost;

  g_assert (rounds <= G_N_ELEMENTS (lib_rates));
  memset (workers, 0, sizeof workers);
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "contended", &error);
  if (lock == NULL)
    goto fail;
  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].lock = lock;
      workers[i].counter = &counter;
      workers[i].tickets = &tickets;
    }
  if (isnan (pair_workers_run (workers, per / 10 + 1, NULL, &cost, &error)))
    goto fail;

  for (r = 0; r < rounds; r++)
    {
      raw_rates[r] = raw_serial_pairs (raw, BENCH_THREADS * per / 2, &error);
      if (isnan (raw_rates[r]))
        goto fail;
      redis_lock_registry_set_max_local_handoffs (registry, 16);
      redis_lock_registry_get_stats (registry, &before);
      lib_rates[r] = pair_workers_run (workers, per, NULL, &cost, &error);
      if (isnan (lib_rates[r]))
        goto fail;
      redis_lock_registry_get_stats (registry, &after);
      commands += after.commands - before.commands;
      round_trips += after.round_trips - before.round_trips;

      /* The plain model in the same round: every hold takes and releases the lease. */
      redis_lock_registry_set_max_local_handoffs (registry, 0);
      redis_lock_registry_get_stats (registry, &before);
      plain_rates[r] = pair_workers_run (workers, per, NULL, &cost, &error);
      if (isnan (plain_rates[r]))
        goto fail;
      redis_lock_registry_get_stats (registry, &after);
      plain_commands += after.commands - before.commands;
    }
  redis_lock_registry_set_max_local_handoffs (registry, 16);
  lib_rate = median (lib_rates, rounds);
  raw_rate = median (raw_rates, rounds);
  plain_rate = median (plain_rates, rounds);
  expected = (guint64)BENCH_THREADS * ((per / 10 + 1) + 2 * (guint64)rounds * per);
  sections = (double)rounds * BENCH_THREADS * per;

  add_row (s, "sections/s", lib_rate, "sections/s", 0, lib_rate / raw_rate, "raw serial pairs/s",
           NULL, FALSE);
  add_row (s, "  vs hand-offs off", lib_rate, "sections/s", 0, lib_rate / plain_rate,
           "hand-offs off sections/s", ">= 10x", lib_rate >= 10 * plain_rate);
  add_row (s, "hand-offs off (plain model)", plain_rate, "sections/s", 0, plain_rate / raw_rate,
           "raw serial pairs/s", NULL, FALSE);
  add_row (s, "raw serial pairs/s (baseline)", raw_rate, "pairs/s", 0, 1.0, "raw serial pairs/s",
           NULL, FALSE);
  add_row (s, "Redis commands per section", commands / sections, "", 3, commands / sections / 2,
           "2 (a Redis visit each)", "<= 0.1", commands / sections <= 0.1);
  add_row (s, "  hand-offs off", plain_commands / sections, "", 2, plain_commands / sections / 2,
           "2 (a Redis visit each)", NULL, FALSE);
  add_row (s, "round trips per section", round_trips / sections, "", 2, round_trips / sections / 2,
           "2 (a Redis visit each)", NULL, FALSE);
  add_row (s, "lost increments", (double)(expected - counter), "", 0, NAN, NULL, "= 0",
           counter == expected);
  add_note (s,
            "%d threads on one name, %u sections per thread per round taken by ticket from "
            "one shared count (so all threads contend until the end), %u rounds, each of raw "
            "serial pairs on one connection, then the lock with hand-offs (bound 16), then "
            "with hand-offs off (set_max_local_handoffs 0); medians of the rounds",
            BENCH_THREADS, per, rounds);
  add_note (s, "a hand-off streak is 16 hand-offs; with no other client listening for the "
               "release, every other streak keeps the lease: an acquisition, a keep and a "
               "release per 34 sections (0.088) is the floor with the default bound");
  add_note (s, "the critical section increments a shared counter; every increment must be "
               "there at the end");
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
  g_autoptr (RawConn) raw = NULL;
  RedisLockRegistryStats before, st;
  guint n = b->watchdog_leases, held = 0, unlock_failures = 0, i;
  RedisLock **locks = g_new0 (RedisLock *, n);
  gint64 *lock_ns = g_new0 (gint64, n);
  guint window = MIN (1000, n / 2);
  gint64 deadline;
  double pipeline[3], pipe_us = NAN, rtt = raw_us (b);
  Dist first, last;
  gboolean got = FALSE;

  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_expire_after_ms (registry, 3000);
  for (i = 0; i < n; i++)
    {
      char name[32];
      gint64 t0;

      g_snprintf (name, sizeof name, "lease-%05u", i);
      locks[i] = redis_lock_registry_obtain (registry, name, &error);
      t0 = now_ns ();
      if (locks[i] == NULL || !redis_lock_lock (locks[i], &error))
        goto fail;
      lock_ns[i] = now_ns () - t0;
      held++;
    }
  first = dist_of (lock_ns, window, 1);
  last = dist_of (lock_ns + n - window, window, 1);

  /* Wait for a tick that renews every lease (the watchdog ticks at a third of the TTL);
   * meanwhile time the baseline, one pipelined batch of as many raw calls. */
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < G_N_ELEMENTS (pipeline); i++)
    {
      gint64 ns = raw_pipeline (raw, n, &error);

      if (ns < 0)
        goto fail;
      pipeline[i] = (double)ns / 1000;
    }
  pipe_us = median (pipeline, G_N_ELEMENTS (pipeline));
  deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  do
    {
      g_usleep (20 * 1000);
      redis_lock_registry_get_stats (registry, &st);
      got = st.watchdog_ticks > before.watchdog_ticks && st.last_tick_leases >= n;
    }
  while (!got && g_get_monotonic_time () < deadline);

  add_row (s, "lock new name, 1st 1000 mean", first.mean / 1000, "us", 1, first.mean / 1000 / rtt,
           "reference p50", NULL, FALSE);
  add_row (s, "lock new name, last 1000 mean", last.mean / 1000, "us", 1, last.mean / first.mean,
           "the first 1000", NULL, FALSE);
  add_row (s, "  p50", last.p50 / 1000, "us", 1, last.p50 / first.p50, "the first 1000's p50", NULL,
           FALSE);
  add_row (s, "  p99", last.p99 / 1000, "us", 1, last.p99 / first.p99, "the first 1000's p99", NULL,
           FALSE);
  if (!got)
    add_na (s, "watchdog tick",
            "no tick renewed all %u leases within 10 s (ticks %" G_GUINT64_FORMAT
            " -> %" G_GUINT64_FORMAT ", last tick renewed %" G_GUINT64_FORMAT ")",
            n, before.watchdog_ticks, st.watchdog_ticks, st.last_tick_leases);
  else
    {
      add_row (s, "tick wall time", (double)st.last_tick_us, "us", 0,
               (double)st.last_tick_us / pipe_us, "raw pipeline", NULL, FALSE);
      add_row (s, "tick, per lease", (double)st.last_tick_us / st.last_tick_leases, "us", 2,
               (double)st.last_tick_us / st.last_tick_leases / rtt, "raw p50", NULL, FALSE);
      add_row (s, "tick round trips", (double)st.last_tick_round_trips, "", 0,
               (double)st.last_tick_round_trips / st.last_tick_leases, "1 per lease", "<= 10",
               st.last_tick_round_trips <= 10);
      add_row (s, "tick leases", (double)st.last_tick_leases, "", 0,
               (double)st.last_tick_leases / n, "leases held", NULL, FALSE);
    }
  add_row (s, "raw pipeline (baseline)", pipe_us, "us", 0, 1.0, "raw pipeline", NULL, FALSE);
  add_row (s, "leases lost", (double)st.leases_lost, "", 0, NAN, NULL, "= 0", st.leases_lost == 0);
  add_note (s,
            "one registry holds %u distinct locks taken from one thread, TTL 3000 ms; the "
            "figures are the registry's last_tick_* counters",
            n);
  add_note (s,
            "baseline: %u EVALSHA of `return 1` sent in one pipelined batch on a plain "
            "connection (median of 3)",
            n);
  add_note (s,
            "lock new name: one outermost lock of a fresh name while the registry already "
            "holds 0..%u (first) or %u..%u (last) leases; the same cost means taking a lease "
            "does not depend on how many are held",
            window, n - window, n);

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
  g_free (lock_ns);
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
  return (double)(rss1 - rss0) / n;
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
  guint half = (m - cap) / 2;
  double per_entry, per_lock, used, growth, late;
  gint64 rss0, rss1, rss_full, rss_mid, rss_end, t0, t1;
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
  per_lock = (double)(rss1 - rss0) / n;

  add_row (s, "RSS per cached idle lock", per_lock, "B", 0, per_lock / per_entry,
           "GHashTable name entry", NULL, FALSE);
  add_row (s, "  minus the name length", per_lock - name_len, "B", 0,
           (per_lock - name_len) / (per_entry - name_len), "GHashTable entry - name", "<= 256 B",
           per_lock - name_len <= 256);
  add_row (s, "obtain+unref (new name)", (double)(t1 - t0) / n, "ns", 0, NAN, NULL, NULL, FALSE);
  add_row (s, "cache size", (double)size, "", 0, (double)size / n, "names obtained", "= names",
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
  if (!memory_fill (registry, cap, half, &error))
    goto fail;
  rss_mid = rss_bytes ();
  if (!memory_fill (registry, cap + half, m - cap - half, &error))
    goto fail;
  t1 = now_ns ();
  rss_end = rss_bytes ();
  size = redis_lock_registry_get_cache_size (registry);
  used = (double)(rss_full - rss0);
  growth = (double)(rss_mid - rss_full);
  late = (double)(rss_end - rss_mid) / (m - cap - half);

  add_row (s, "cache size at capacity", (double)size, "", 0, (double)size / cap, "capacity",
           "= capacity", size == cap);
  add_row (s, "RSS of a full cache", used / (1024 * 1024), "MiB", 1, used / cap / per_lock,
           "capacity x RSS per lock", NULL, FALSE);
  add_row (s, "RSS growth, 1st half past cap", growth / (1024 * 1024), "MiB", 1, growth / used,
           "RSS of a full cache", NULL, FALSE);
  add_row (s, "RSS growth, 2nd half, per name", late, "B", 1, late / per_lock,
           "RSS per cached lock", "<= 0.10x", late <= 0.10 * per_lock);
  add_row (s, "obtain+unref with eviction", (double)(t1 - t0) / (m - cap), "ns", 0, NAN, NULL, NULL,
           FALSE);
  add_note (s,
            "%u names of %" G_GSIZE_FORMAT " bytes with capacity %u; then %u names with "
            "capacity %u, whose RSS must stop growing once it is full; no Redis traffic; RSS from "
            "/proc/self/statm after malloc_trim",
            n, name_len, 2 * n, m, cap);
  add_note (s, "each lock stores its Redis key (the registry key, \":\" and the name) once, so "
               "the figure minus the name still includes a copy of the registry key");
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
  { "reentrant", "Re-entrant lock+unlock, the lock held once outside the loop", section_reentrant },
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
      ratio
          = isnan (r->ratio) ? g_strdup ("") : g_strdup_printf ("%.2fx %s", r->ratio, r->ratio_to);
      if (r->target != NULL)
        target = g_strdup_printf ("%s %s", r->target, r->met < 0 ? "" : r->met ? "ok" : "MISSED");
      g_print ("  %-30s %16s  %-34s %s\n", r->metric, value, ratio, target ? target : "");
    }
  for (i = 0; i < s->notes->len; i++)
    g_print ("  - %s\n", (char *)g_ptr_array_index (s->notes, i));
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
      unsigned char c = (unsigned char)*p;

      if (c == '"' || c == '\\')
        g_string_append_printf (out, "\\%c", c);
      else if (c < 0x20)
        g_string_append_printf (out, "\\u%04x", c);
      else
        g_string_append_c (out, (char)c);
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
  g_string_append_printf (
      out, ", \"server\": \"%s\"},\n  \"registry_key\": ", b->own_server ? "private" : "external");
  json_string (out, b->key);
  g_string_append (out, ",\n  \"reference_round_trip\": {\"p50_us\": ");
  json_number (out, raw_us (b));
  g_string_append (out, ", \"p99_us\": ");
  json_number (out, b->raw_error != NULL ? NAN : b->raw.p99 / 1000);
  g_string_append (out, ", \"mean_us\": ");
  json_number (out, b->raw_error != NULL ? NAN : b->raw.mean / 1000);
  g_string_append (out, ", \"error\": ");
  json_string (out, b->raw_error);
  g_string_append (out, "},\n  \"seconds\": ");
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
                                  r->met < 0 ? "null"
                                  : r->met   ? "true"
                                             : "false");
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
  b->floor_handoffs = b->quick ? 100 : 300;
  b->spin_handoffs = b->quick ? 20 : 50;
  b->independent_pairs = b->quick ? 300 : 1000;
  b->independent_rounds = b->quick ? 2 : 3;
  b->contention_sections = b->quick ? 300 : 1000;
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
    return child_main (child_mode, child_name, (guint)MAX (child_steps, 0), child_hold_us);
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
  b->key = g_strdup_printf ("redislock-bench:%d:%08x", (int)getpid (), g_random_int ());

  if (!raw_target_parse (b->url, &b->target, &error))
    b->raw_error = g_strdup (error->message);
  else
    measure_reference (b);

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
        g_print ("baseline: raw EVALSHA round trip p50 %.1f us at the start; each section "
                 "measures its own next to its figures\n",
                 b->raw.p50 / 1000);
      g_print ("full run: make bench    one section: bench/redislock-bench --only NAME%s\n",
               b->quick ? " --quick" : "");
    }

  for (i = 0; i < G_N_ELEMENTS (section_table); i++)
    {
      Section *s;
      gint64 t0;

      if (only != NULL && !g_strv_contains ((const char *const *)only, section_table[i].name))
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
      s->seconds = (double)(now_ns () - t0) / 1e9;
      g_ptr_array_add (b->sections, s);
      if (!b->json)
        print_section (s);
    }

  if (b->json)
    print_json (b, (double)(now_ns () - start) / 1e9);
  else
    g_print ("\ntotal %.1f s\n", (double)(now_ns () - start) / 1e9);

  redis_lock_test_server_free (b->server);
  g_ptr_array_unref (b->sections);
  g_free (b->url);
  g_free (b->key);
  g_free (b->self_path);
  g_free (b->redis_version);
  g_free (b->cpu_model);
  g_free (b->kernel);
  g_free (b->raw_error);
  raw_target_clear (&b->target);
  return 0;
}
