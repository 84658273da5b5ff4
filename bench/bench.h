/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench.h: what the files of redislock-bench share.
 *
 * The program is one file per section (section-*.c, listed in order in section-list.h,
 * as libuv lists its test/benchmark-*.c in benchmark-list.h) around a few shared files:
 * redislock-bench.c runs the program (options, the private redis-server, the sizes of
 * the run, the reference round trip, the loop over the sections, the child processes
 * some sections start), bench-registry.c makes the registries, bench-stats.c holds
 * the clocks and the percentiles, bench-threads.c starts worker threads together and
 * accounts for what a parallel run cost, bench-hiredis.c makes the plain hiredis
 * connections every baseline is measured on, and bench-report.c collects the figures
 * and prints them as a table or as JSON. A section reads only what is declared here, so
 * each section file can be read on its own, next to this header.
 */
#ifndef REDIS_LOCK_BENCH_H
#define REDIS_LOCK_BENCH_H

#include <gio/gio.h>
#include <hiredis/hiredis.h>
#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

G_BEGIN_DECLS

/* Threads of the parallel sections (raw, independent, contention). */
#define BENCH_THREADS 8

/* How long the holder keeps the lock after the waiter said it is about to wait: long
 * enough for the waiter's first (failing) attempt to reach Redis and for it to go to
 * sleep, even on a busy two-core machine. Also the default of --child-hold-us. */
#define HANDOFF_HOLD_US 1000

/* --- Clocks and statistics (bench-stats.c) ----------------------------------------- */

/* A latency distribution, in nanoseconds per operation. */
typedef struct
{
  guint n;
  double p50;
  double p99;
  double max;
  double mean;
} Dist;

/* CLOCK_MONOTONIC in ns: comparable between the processes of the hand-off. */
gint64 now_ns (void);

/* CPU time of the whole process (every thread, the library's included), in ns. */
gint64 cpu_ns (void);

/* Median of @n values (sorts them); the mean of the middle two when @n is even. */
double median (double *v, guint n);

/* Sorts @samples in place. Each sample covers @ops_per_sample operations. */
Dist dist_of (gint64 *samples, guint n, guint ops_per_sample);

/* Resident set size of this process, from /proc/self/statm; -1 when unreadable. */
gint64 rss_bytes (void);

/* Gives freed heap pages back to the kernel so that the next RSS delta measures what
 * the next phase allocates, not what an earlier phase left in malloc's free lists. */
void trim_heap (void);

/* --- Figures and their output (bench-report.c) ------------------------------------- */

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

/* A section with no figures yet; @name is not copied. */
Section *section_new (const char *name, const char *title, gboolean quick);
void section_free (gpointer p);

/* Adds a figure. @ratio may be NAN; @target NULL (then @met is ignored). */
void add_row (Section *s, const char *metric, double value, const char *unit, int decimals,
              double ratio, const char *ratio_to, const char *target, gboolean met);

/* Adds a figure that could not be produced, with the reason. */
void add_na (Section *s, const char *metric, const char *format, ...) G_GNUC_PRINTF (3, 4);

/* Adds a line printed under the section's figures. */
void add_note (Section *s, const char *format, ...) G_GNUC_PRINTF (2, 3);

/* The lines above the table: version, machine, server, registry key, reference. */
void print_header (Bench *b);
void print_section (Section *s);

/* Every section of @b, and the run, as one JSON document; @seconds is the whole run. */
void print_json (Bench *b, double seconds);

/* --- Plain hiredis connections (bench-hiredis.c) ----------------------------------- */

/* Where the raw connections go: the same server as the library, parsed by the
 * library's URL parser (rl_conn_config_parse(), url.h) from the same URL forms
 * (redis://, unix://; not TLS). */
typedef struct
{
  char *socket_path; /* NULL for TCP */
  char *host;
  int port;
  char *username;
  char *password;
  int db;
} RawTarget;

/* Parses @url (NULL: redis://127.0.0.1:6379) into @t; clear it with raw_target_clear(). */
gboolean raw_target_parse (const char *url, RawTarget *t, GError **error);
void raw_target_clear (RawTarget *t);

/* Sends one command and returns its reply, or NULL with @error set on an I/O error or
 * an error reply. */
redisReply *raw_command (redisContext *c, GError **error, const char *format, ...)
    G_GNUC_PRINTF (3, 4);

/* A connection to @t, authenticated and on its db; NULL with @error set. */
redisContext *raw_connect (const RawTarget *t, GError **error);

/* A plain hiredis connection with the trivial script (`return 1`) and the hand-made
 * lock scripts loaded. */
typedef struct
{
  redisContext *c;
  char *sha;
  char *acquire_sha;
  char *release_sha;
} RawConn;

RawConn *raw_open (const RawTarget *t, GError **error);
void raw_close (RawConn *r);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RawConn, raw_close)

/* One timed-worthy call: EVALSHA of `return 1`. */
gboolean raw_call (RawConn *r, GError **error);

/* One lock+unlock of @key by hand: the acquire script, then the release script. */
gboolean raw_lock_pair (RawConn *r, const char *key, GError **error);

/* Sends @n EVALSHA calls in one pipelined batch and reads every reply: the least a
 * batched renewal of @n leases can cost. Returns the wall time in ns, or -1. */
gint64 raw_pipeline (RawConn *r, guint n, GError **error);

/* The server's own account of EVALSHA (INFO commandstats): calls and CPU µs spent in
 * them since start. Both 0 when the server does not say. */
void raw_evalsha_stats (RawConn *r, guint64 *calls, guint64 *usec);

/* --- The run (redislock-bench.c) --------------------------------------------------- */

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

/* The reference round trip in µs, NAN when there is none (bench-report.c). */
double raw_us (Bench *b);

/* bench-registry.c: a new registry on the run's server under the run's registry key. */
RedisLockRegistry *bench_registry (Bench *b, GError **error);
/* Applies the run's registry settings (--no-key-tracking) to @registry; for the
 * registries of child processes too. */
void bench_registry_settings (RedisLockRegistry *registry);

/* --- Threads (bench-threads.c) ----------------------------------------------------- */

typedef void (*WorkFunc) (gpointer data);

/* Runs @func (@data[i]) on @n threads that all start at once, and returns the wall
 * time in seconds from the start to the end of the last one. */
double run_parallel (guint n, WorkFunc func, gpointer *data);

/* What a parallel run cost: wall time, CPU time of this process, and the server's
 * EVALSHA calls and CPU during it (zero without a control connection). */
typedef struct
{
  double seconds;
  double cpu_seconds;
  guint64 server_calls;
  guint64 server_usec;
} RunCost;

/* run_parallel(), with its cost read around it through @control (may be NULL). */
void run_costed (guint n, WorkFunc func, gpointer *data, RawConn *control, RunCost *cost);
void run_cost_add (RunCost *total, const RunCost *cost);

/* Server CPU per EVALSHA in µs, NAN when the server did not say. */
double server_us_per_call (const RunCost *cost);

/* A thread of raw calls on its own connection. */
typedef struct
{
  RawConn *conn;
  guint calls;
  char *key; /* when set, each call is a hand-made lock+unlock of this key */
  GError *error;
} RawWorker;

/* Opens a connection for each of BENCH_THREADS workers and warms them up. */
gboolean raw_workers_open (Bench *b, RawWorker *workers, GError **error);
void raw_workers_close (RawWorker *workers);

/* BENCH_THREADS threads on their own connection, @calls EVALSHA of `return 1` each, or
 * with @lock_prefix, @calls hand-made lock+unlock pairs each, of key "@lock_prefix:i".
 * Returns the aggregate rate in calls (pairs) per second, or NAN with @error set. */
double raw_workers_run (RawWorker *workers, guint calls, const char *lock_prefix, RawConn *control,
                        RunCost *cost, GError **error);

/* A thread of lock+unlock pairs. */
typedef struct
{
  RedisLock *lock;
  guint pairs;
  guint64 *counter; /* incremented inside the lock when not NULL */
  gint *tickets;    /* when not NULL: pairs are taken from this shared count instead */
  GError *error;
} PairWorker;

/* BENCH_THREADS pair workers, @pairs lock+unlock pairs each. Returns the aggregate
 * rate in pairs/s, or NAN with @error set. */
double pair_workers_run (PairWorker *workers, guint pairs, RawConn *control, RunCost *cost,
                         GError **error);

/* --- The sections (section-*.c), in the order of section-list.h -------------------- */

void section_raw (Bench *b, Section *s);
void section_reentrant (Bench *b, Section *s);
void section_uncontended (Bench *b, Section *s);
void section_semaphore (Bench *b, Section *s);
void section_handoff (Bench *b, Section *s);
void section_handoff_spin (Bench *b, Section *s);
void section_silent (Bench *b, Section *s);
void section_independent (Bench *b, Section *s);
void section_contention (Bench *b, Section *s);
void section_processes (Bench *b, Section *s);
void section_processes_scaling (Bench *b, Section *s);
void section_watchdog (Bench *b, Section *s);
void section_async (Bench *b, Section *s);
void section_rwlock (Bench *b, Section *s);
void section_deadlock (Bench *b, Section *s);
void section_memory (Bench *b, Section *s);

/* The other processes some sections run: a second copy of this program, started as
 * `redislock-bench --child=SECTION --child-mode=MODE --child-name=NAME --child-steps=N
 * --child-hold-us=US`, runs the child of SECTION's entry in section-list.h with those
 * values; returns the exit status. */
typedef int (*ChildFunc) (const char *mode, const char *name, guint steps, gint64 hold_us);

/* The other process of the hand-off (section-handoff.c). */
int handoff_child (const char *mode, const char *name, guint steps, gint64 hold_us);

/* A contending process of section-processes.c (modes "contend-raw" and "contend-lib"),
 * number @steps; @hold_us is not used. */
int processes_child (const char *mode, const char *name, guint steps, gint64 hold_us);

G_END_DECLS

#endif /* REDIS_LOCK_BENCH_H */
