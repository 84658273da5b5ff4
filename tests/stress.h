/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stress.h: what the parts of the stress harness share.
 *
 * The stress program is one test program in six files, one per part: stress.c holds the
 * scenario tables, the controller that runs one scenario, and main; stress-worker.c the
 * worker processes, which take the locks and check each other inside the critical
 * sections; stress-faults.c the faults injected into a scenario and the two small fault
 * cases; stress-check.c the collection of the workers' reports, the verdicts and the
 * summary table; stress-jepsen.c the history scenarios (every section's interval and
 * fencing token recorded, on every topology, judged afterwards); stress-family.c the
 * history scenarios of the rest of the lock family (semaphore, read-write lock, leader
 * election), their worker loops, the forced-unlock fault and their verdicts. A worker is a separate
 * process (this program run again), so it shares nothing with the controller but its
 * command line, the progress file, the keys in Redis named here and the lines of its
 * report. The types here are what the parts pass to each other: a Scenario says what to
 * run, a Tally is what workers saw, a Controller is one scenario's run, Collected is
 * every worker's report merged, and a Row is the scenario's line in the table.
 */
#ifndef REDIS_LOCK_TESTS_STRESS_H
#define REDIS_LOCK_TESTS_STRESS_H

#include "common.h"

G_BEGIN_DECLS

#define STRESS_REGISTRY_KEY "stresslock"
#define DATA_PREFIX "stressdata"
/* The harness's raw connections wait this long: longer than any outage, so a command
 * the harness sent is answered, never left to run later behind its back. */
#define RAW_TIMEOUT_S 60
/* Library default for connect and command timeouts (redislock-registry.h). */
#define LIBRARY_DEFAULT_TIMEOUT_MS 3000
/* Sections that must complete after the last fault before the scenario may end. */
#define POST_FAULT_SECTIONS 100

/* The RedisLockError codes by value, as reports and the table name them; errors of
 * other domains are CANCELLED or OTHER (error_code_name()). */
extern const char *const code_names[];
extern const gsize n_code_names;

/* Where a scenario's workers take their locks. Only a single server runs the
 * holder-and-counter checks; every topology can record a history (see stress-jepsen.c). */
typedef enum
{
  TOPOLOGY_SERVER,   /* one redis-server on a Unix socket */
  TOPOLOGY_SENTINEL, /* a master, its replicas and a Sentinel */
  TOPOLOGY_CLUSTER,  /* three masters with a replica each */
  TOPOLOGY_QUORUM,   /* three independent servers, a quorum registry */
} Topology;

/* Which member of the lock family a history scenario's workers hold (stress-family.c). */
typedef enum
{
  MEMBER_LOCK,      /* RedisLock: one holder at a time */
  MEMBER_SEMAPHORE, /* RedisSemaphore of `permits` permits: at most that many holders */
  MEMBER_RWLOCK,    /* RedisRWLock: readers together, a writer alone */
  MEMBER_LEADER,    /* RedisLeader: one leader at a time, acting only while it leads */
} Member;

/* What one scenario runs; the worker processes get the part they need on their command
 * line. */
typedef struct
{
  const char *name;
  const char *summary;
  guint procs, registries, threads, names;
  gint64 ttl_ms;     /* registries' lease TTL */
  gint64 timeout_ms; /* connect and command timeout; 0: the library default */
  gint64 wait_ms;    /* bound of try_lock_for / try_lock_full */
  gboolean use_lock; /* also use the unbounded redis_lock_lock() */
  guint64 min_sections;
  gint64 kill_ms;     /* CLIENT KILL every 100 ms for at least this long; 0: never */
  guint pauses;       /* workers frozen inside a section */
  gint64 stop_ms;     /* how long each is frozen */
  gint64 stop_ttl_ms; /* TTL of the frozen section's lease */
  guint restarts;     /* redis-server killed and started again */
  guint outages;      /* redis-server frozen */
  gint64 outage_ms;   /* for this long */
  gint64 cap_ms;      /* the whole scenario must end within this */
  /* History scenarios (stress-jepsen.c): every section's interval recorded and judged
   * afterwards, on any topology, instead of the checks inside the section. */
  gboolean history;
  Topology topology;
  guint replicas;        /* Sentinel: replicas of the master */
  gboolean fencing;      /* registries take fencing tokens */
  guint min_replicas;    /* redis_lock_registry_set_min_replicas(), 0: off */
  guint failovers;       /* Sentinel failovers, Cluster masters killed, quorum nodes restarted */
  gint64 hold_us;        /* how long a section lasts, at most (one in 20: TTL/2) */
  gint64 settle_ms;      /* the run goes on this long after the last fault */
  gboolean safe_overlap; /* verdict: no overlap at all (not even a reported one) */
  gboolean safe_silent;  /* verdict: no overlap that neither holder was told of */
  gboolean safe_tokens;  /* verdict: no token regression */
  Member member;         /* history scenarios: what the workers hold */
  guint permits;         /* MEMBER_SEMAPHORE: its size */
  guint forced;          /* redis_lock_registry_force_unlock() of a held lease, this often */
} Scenario;

/* --- Tallies (stress-worker.c) --------------------------------------------------------- */

/* What a worker thread saw (counts by key, records, longest calls), merged per process
 * and reported to the controller, which merges the reports again (Collected). */
typedef struct
{
  GHashTable *counts; /* "key" -> guint64* : sections, errors, writes, ... */
  GPtrArray *records; /* lines: lease-lost, overlap, clobber, stop, failure */
  guint64 dropped;
  gint64 max_acquire_ms, max_unlock_ms, max_failed_acquire_ms, max_failed_unlock_ms;
} Tally;

void tally_init (Tally *t);
void tally_clear (Tally *t);
void tally_add (Tally *t, const char *key, guint64 n);
guint64 tally_get (Tally *t, const char *key);
/* Keeps a record line ("failure ...", "lease-lost ID", ...); beyond a bound, counts it. */
void tally_record (Tally *t, const char *format, ...) G_GNUC_PRINTF (2, 3);

/* The name of @error's code, from code_names, or CANCELLED or OTHER. */
const char *error_code_name (const GError *error);

/* Counter values are "n id": the count and the section that wrote it. */
guint64 parse_counter (const redisReply *reply, const char **writer);

/* --- The hidden modes (--worker, --probe) ------------------------------------------- */

/* A worker process's or the probe's options, from its command line. */
typedef struct
{
  gint index;
  char *url;
  char *socket_path;
  char *progress_path;
  gint registries, threads, names;
  gint64 ttl_ms, timeout_ms, wait_ms, stop_ttl_ms, stop_ms, max_ms;
  gboolean use_lock;
  char *history_path; /* history mode: where the sections are written at the end */
  gboolean quorum;    /* url is a space-separated list of a quorum's nodes */
  gboolean fencing;
  gint min_replicas;
  gint64 hold_us;
  gint member; /* a Member */
  gint permits;
} WorkerOptions;

/* A worker process: runs until its stdin is closed or its deadline, then prints its
 * report on stdout (stress-worker.c). */
int worker_main (WorkerOptions *opt);

/* The frozen-holder probe process (stress-faults.c). */
int probe_main (WorkerOptions *opt);

/* --- Inside a worker process (stress-worker.c, stress-family.c) ------------------------ */

/* A stop of the whole process by its own thread 0 (SIGSTOP), on the monotonic clock. */
typedef struct
{
  gint64 from;
  gint64 until; /* 0 while the process is stopped */
} Freeze;

typedef struct
{
  WorkerOptions *opt;
  RedisLockRegistry **registries;
  TestSync freeze_sync; /* guards freezes; broadcast when a stop has ended */
  GArray *freezes;      /* of Freeze: the stops so far */
  gint stop;      /* atomic: finish the current loop and leave */
  gint self_stop; /* atomic: thread 0 freezes the process inside its next section */
  gint freezing;  /* atomic: from the freeze request until thread 0 has resumed */
  gint done;      /* atomic: threads that have left their loop */
  guint64 *progress;
  gint64 deadline_us;
  struct _WorkerThread *threads;
  guint n_threads;
} Worker;

/* One entry of a history: a critical section [acquisition returned TRUE, release about
 * to be called] of a lock (role 'L'), a permit ('P'), a read ('R') or write ('W') hold;
 * a leadership [func (TRUE), func (FALSE)] ('G'); or a leader's action ('A': the
 * interval around a call of redis_leader_is_leading() that answered TRUE, its
 * thread's leadership then the one that began at call_us). told_us is when the holder
 * was first told its lease was lost: its lease cancellable fired, or is_lease_lost()
 * or the release said so (0: never). */
typedef struct
{
  guint name, reg, thread;
  gint64 call_us, start_us, end_us; /* lock called, lock returned, unlock about to be called */
  guint64 token;                    /* fencing token; a permit's index */
  gboolean told;
  gint64 told_us;
  char role;
  const char *unlocked; /* how the outermost unlock ended: OK or an error code's name */
} HistoryEntry;

typedef struct _WorkerThread
{
  Worker *w;
  guint reg, index;
  gint64 called_us;   /* when the last acquisition was called */
  gint64 acquired_us; /* when the last successful acquisition returned */
  GArray *history;    /* of HistoryEntry, in history mode */
  gint waiting_tid; /* atomic: kernel thread id while waiting for the frozen lock */
  GThread *thread;
  redisContext *raw;
  char *run_id;
  GRand *rand;
  guint64 seq;
  Tally tally;
} WorkerThread;

/* Stops the whole process from the calling thread, recording the stop (stress-worker.c). */
void worker_freeze (Worker *w);

/* Counts a failed call of @op by its error code. */
void count_error (Tally *tally, const char *op, const GError *error);

/* A history thread's loop for a member other than the lock (stress-family.c). */
void family_thread_run (WorkerThread *t);

/* Records in *@told_us (atomically, once) when the cancellable it is connected to fired. */
void family_note_told (GCancellable *cancellable, gpointer told_us);
/* Inside a hold (a section of any member): the freeze when asked for (the process
 * stops itself, its lease expires meanwhile), then the workload's hold, most of them
 * short, one in LONG_HOLD_ONE_IN up to half the TTL. */
void family_hold (WorkerThread *t, gboolean freeze);
/* History mode: one hold in this many is held for up to half the lease TTL. */
#define LONG_HOLD_ONE_IN 20

/* --- The controller (stress.c) ------------------------------------------------------- */

typedef struct
{
  GPid pid;
  int stdin_fd;
  int stdout_fd;
  GString *output;
  gboolean exited;
  int status;
} Child;

/* A fault that took leases away without their holders' doing, somewhere in [@from_us,
 * @to_us] on the monotonic clock: a forced unlock of a lease of name-@name, a restart
 * or a failover (@name LEASE_FAULT_ALL_NAMES). A leader cannot know of such a loss
 * before its registry finds it (stress-family.c). */
#define LEASE_FAULT_ALL_NAMES G_MAXUINT

typedef struct
{
  guint name;
  gint64 from_us, to_us;
} LeaseFault;

typedef struct
{
  const Scenario *s;
  RedisLockTestServer *server; /* TOPOLOGY_SERVER: the server; else NULL */
  RedisLockTestSentinel *sentinel;
  RedisLockTestCluster *cluster;
  RedisLockTestServer *quorum[3];
  char *url; /* what the workers open */
  char *dir;
  char *progress_path;
  guint64 *progress;
  redisContext *redis;
  Child *children;
  gint64 start_us;
  guint pauses_done, restarts_done, outages_done, failovers_done;
  guint forced_done; /* forced unlocks that deleted a held lease */
  GArray *lease_faults; /* of LeaseFault: faults that took leases away, when, where */
  GPtrArray *problems; /* why the scenario failed */
} Controller;

/* One scenario's line in the summary table. */
typedef struct
{
  char *name;
  guint64 sections, interrupted, overlaps, expired_overlaps, lost, expired_lost;
  guint64 lease_lost, timeouts, busy, kills;
  GHashTable *errors; /* code -> guint64* */
  gint64 max_acquire_ms, max_unlock_ms, duration_ms;
  guint pauses, restarts, outages;
  gboolean passed;
  /* History scenarios: sections whose holder was told, overlapping pairs of sections
   * by that, at least one holder told, neither told; token regressions, -1: no fencing */
  gboolean history;
  const Scenario *scenario;
  guint failovers;
  guint64 told, reported, silent;
  gint64 regressions;
  /* The family (stress-family.c): leaders' actions, those taken after another
   * candidate was granted leadership while the actor was not told (stale), those taken
   * after the actor's leadership cancellable had fired (after_told), and the stale ones
 * that a forced unlock of its lease explains, its leader told later (forced_stale, not
 * counted in stale_actions); forced unlocks that
   * deleted a held lease; the longest time from the start of an overlap (or of an excess
   * holder) until a holder was told, -1: no overlap was ever told of */
  guint64 actions, stale_actions, after_told_actions, forced_stale_actions;
  guint forced;
  gint64 max_told_ms;
} Row;

/* This program's own path, to run it again as a worker or the probe. */
extern gchar *self_exe;

/* Adds a reason why the scenario failed. */
void problem (Controller *c, const char *format, ...) G_GNUC_PRINTF (2, 3);

/* Sections done so far by every worker, from the progress file. */
guint64 progress_total (Controller *c);

/* Polls the shared progress counters until @target sections are done; gives up early
 * when a worker has exited. */
gboolean wait_progress (Controller *c, guint64 target, gint64 timeout_ms);

/* A connection to @server named @name, so the CLIENT KILL fault spares it; NULL if the
 * server cannot be reached. */
redisContext *named_connection (RedisLockTestServer *server, const char *name);

/* A command on the controller's connection, reconnecting once if the server was
 * restarted since the last one. */
redisReply *controller_command (Controller *c, const char *format, ...);

/* Records @child's exit if it has exited (never its stops). */
gboolean child_reap (Child *child, int options);

/* --- The faults (stress-faults.c) ---------------------------------------------------- */

/* The scenario's faults, one kind after the other, each followed by some progress;
 * adds the frozen workers to @victims and the kill count to @row. */
void inject_faults (Controller *c, GHashTable *victims, Row *row);

void test_frozen_holder_waiter (void);
void test_killed_release_reply (void);

/* --- Collecting and checking (stress-check.c) ---------------------------------------- */

/* Every worker's report, merged. */
typedef struct
{
  Tally tally;            /* every worker's report, merged */
  GHashTable *lease_lost; /* section id -> itself */
  GHashTable *stops;      /* frozen section id -> unlock result */
  GPtrArray *overlaps;    /* "observer other" */
  GPtrArray *clobbers;    /* "writer lastwriter delta runid name" */
  GPtrArray *failures;    /* worker-side check failures */
  GHashTable *victims;    /* "p<index>" of frozen workers */
} Collected;

void collected_init (Collected *col);
void collected_clear (Collected *col);

/* Closes the workers' stdin (they finish), reads every worker's report until end of
 * file, then reaps it, all within a bound. */
void collect_children (Controller *c, Collected *col);

/* The verdicts on one scenario, added to the controller's problems; fills @row. */
void check_scenario (Controller *c, Collected *col, Row *row);

void print_row (const Row *row, gboolean header);
void row_free (gpointer data);

/* The summary table of @rows, with a TOTAL line. */
void print_summary (GPtrArray *rows, const char *profile);

/* --- History scenarios (stress-jepsen.c) ---------------------------------------------- */

/* Starts the scenario's topology (a single server is started by the controller) and
 * sets c->url; FALSE when it was skipped. */
gboolean topology_start (Controller *c);
void topology_stop (Controller *c);

/* The topology's own faults: Sentinel failovers, Cluster masters killed and failed
 * over, quorum nodes restarted empty. */
void inject_topology_faults (Controller *c);

/* The path of worker @index's history file. */
char *history_path (Controller *c, guint index);

/* Reads every worker's history, fills the row's overlap and token figures and adds the
 * scenario's verdicts to the controller's problems. */
void check_history (Controller *c, Collected *col, Row *row);

/* One entry of the merged history, as read back from a worker's history file. */
typedef struct
{
  guint name, proc, reg, thread;
  gint64 call_us, start_us, end_us; /* lock called, lock returned, unlock called */
  guint64 token;
  gboolean told;
  gint64 told_us; /* 0: never told */
  char role;      /* as HistoryEntry's */
  char unlocked[16]; /* how its unlock ended: OK or an error code */
} Section;

/* Counts the overlaps of @sections (sorted by name and start) into @row: two holders of
 * one name at once, except two readers (stress-jepsen.c). */
void judge_overlaps (Controller *c, GArray *sections, Row *row);

/* A section's description for the test log, times relative to the scenario's start. */
char *describe (Controller *c, const Section *s);

/* Judges the history of a family scenario: fills @row (stress-family.c). */
void judge_family (Controller *c, GArray *sections, Row *row);

/* Records a fault that took leases away (see LeaseFault). */
void note_lease_fault (Controller *c, guint name, gint64 from_us);

/* The forced-unlock fault: redis_lock_registry_force_unlock() of held leases of the
 * scenario's member, s->forced of them, from a registry of the controller's own. */
void inject_forced_unlocks (Controller *c);

/* The family's history scenarios, run by make jepsen after the lock's. */
extern const Scenario family_scenarios[];
extern const gsize n_family_scenarios;

/* The table of the history scenarios among @rows. */
void print_history_summary (GPtrArray *rows, const char *profile);

G_END_DECLS

#endif /* REDIS_LOCK_TESTS_STRESS_H */
