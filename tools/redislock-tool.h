/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-tool.h: what the files of the redislock command-line tool share.
 *
 * The tool is cut like GLib's gio tool: redislock.c holds main(), the table of commands,
 * the options every command takes and the usage messages; each command has a file of
 * its own (redislock-run.c, with its command line in redislock-run-args.c,
 * redislock-status.c for status and list with the family's keys read in
 * redislock-family.c, redislock-demo.c with its server in redislock-demo-server.c,
 * redislock-watch.c),
 * entered through its cmd_*() function; redislock-common.c holds what several commands
 * use (display escaping, durations, the raw Redis connection, exit statuses) and
 * redislock-redact.c keeps passwords out of every message. Nothing here is a library
 * interface: it is one program in several files.
 */
#ifndef REDISLOCK_TOOL_H
#define REDISLOCK_TOOL_H

#include <glib.h>
#include <hiredis/hiredis.h>

#include <redislock/redislock.h>

/* Exit statuses of redislock itself (run passes the command's status through). */
enum
{
  EXIT_NOT_ACQUIRED = 1,
  EXIT_REDIS = 2,
  EXIT_LEASE_LOST = 3,
  EXIT_USAGE = 64, /* EX_USAGE */
  EXIT_CANNOT_EXEC = 126,
  EXIT_NOT_FOUND = 127,
};

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define DEFAULT_REGISTRY "redislock"
#define DEFAULT_TTL_MS 60000
#define DEFAULT_KILL_AFTER_MS 5000
#define MAX_DURATION_MS ((gint64) 1000 * 1000 * 1000 * 1000) /* about 31 years */
#define REDIS_TIMEOUT_MS 5000
#define DEMO_WORKER_MODE "__demo-worker"

/* The commands (one file each), called with argv[0] the command's name. */
int cmd_run (int argc, char **argv);
int cmd_status (int argc, char **argv);
int cmd_list (int argc, char **argv);
int cmd_demo (int argc, char **argv);
int cmd_break (int argc, char **argv);
int cmd_watch (int argc, char **argv);
/* The hidden command the demo starts its workers as (redislock-demo.c). */
int demo_worker (int argc, char **argv);

/* redislock-options.c: options every command takes, parsing, usage errors; and what
 * main() records for the commands (tool_argv0, pipe_disposition_ignored). */
extern char *opt_url;
extern char **opt_urls;
extern char *opt_registry;
extern const char *tool_argv0;     /* main()'s argv[0] */
extern int pipe_disposition_ignored; /* SIGPIPE was ignored when redislock started */
extern const GOptionEntry common_entries[];

const char *effective_url (void);
const char *effective_registry (void);
/* The registry of --registry on --url: a quorum registry when --url was given more
 * than once (redis_lock_registry_new_quorum()). */
RedisLockRegistry *tool_registry_new (GError **error);
/* GOption reads "-w 5s" but not "-w5s" (getopt(3) takes both): rewrites *@argv so that
 * the value written against a short option of @tables (NULL-terminated) is an argument
 * of its own, and a group of flags ("-fw5s") is one argument per flag. Stops at "--",
 * and with @strict_posix at the first argument that is not an option; leaves alone an
 * argument with a character that is not a short option of @tables. The new array and
 * strings live as long as the process. */
void split_attached_values (int *argc, char ***argv, const GOptionEntry *const *tables,
                            gboolean strict_posix);
/* Parses the options of a subcommand (after split_attached_values(), on a copy): what
 * is left of *@argv, the arguments that are not options, is moved to the front of the
 * caller's array, and *@argc says how many. Returns -1 to go on, else an exit status. */
int parse_options (const char *cmd, const char *usage, const char *params, const char *summary,
                   const GOptionEntry *entries, gboolean with_common, gboolean strict_posix,
                   int *argc, char ***argv);
/* Prints a usage error for subcommand @cmd (NULL: top level) and returns EXIT_USAGE. */
int usage_error (const char *cmd, const char *usage, const char *format, ...)
  G_GNUC_PRINTF (3, 4);

/* redislock-redact.c: passwords kept out of every message. */
char *redact_text (const char *text);
GLogWriterOutput redacting_log_writer (GLogLevelFlags level, const GLogField *fields,
                                       gsize n_fields, gpointer user_data);

/* redislock-common.c */
/* Prints "redislock: MESSAGE" on stderr, with any password of the Redis URL hidden. */
/* @format and its arguments, formatted, with any password of a Redis URL hidden
 * (redact_text()). */
char *format_redacted (const char *format, va_list ap) G_GNUC_PRINTF (1, 0);
void die_message (const char *format, ...) G_GNUC_PRINTF (1, 2);
gint64 monotonic_ns (void);
gboolean parse_duration (const char *text, gint64 *out_ms);
char *format_duration (gint64 ms);
char *escape_for_display (const char *s);
gboolean write_all (int fd, const void *buf, gsize len);
gssize read_all (int fd, void *buf, gsize len);
gboolean signal_is_ignored (int signum);
redisContext *redis_open (const char *url, GError **error);
redisReply *redis_callv (redisContext *c, GError **error, ...) G_GNUC_NULL_TERMINATED;
int exit_status_for_error (const GError *error);
/* Splits the value of a key held through libredislock into host and pid: the client id
 * `host:pid:hex` (32 hex digits), or that id followed by `:N`, the number of the
 * acquisition. Other clients (Spring's, for one) store UUIDs: then nothing is split
 * (FALSE). */
gboolean split_client_id (const char *owner, char **host, gint64 *pid);
/* Appends `, "held": …, "owner": …, "host": …, "pid": …, "ttl_ms": …` to a JSON object:
 * host and pid split from @owner (split_client_id()) or null, the TTL null when free
 * or without expiry. */
void append_holder_json (GString *out, gboolean held, const char *owner, gint64 ttl_ms);
/* Appends `, "waiters": [...]` to a JSON object: host, pid, since_us and waiter of
 * each RedisLockWaiterInfo of @waiters. */
void append_waiters_json (GString *out, GPtrArray *waiters);
/* Appends `, "queue": [...]` to a JSON object: position, host, pid, client_id and
 * since_us of each RedisLockQueueInfo of @queue, first in line first. */
void append_queue_json (GString *out, GPtrArray *queue);

/* The leases of a registry read as holds (redislock-family.c): the lock family's keys
 * carry the hash tag {name} and a tail that says what they hold. */
typedef enum
{
  FAMILY_KIND_LOCK,      /* a plain lock */
  FAMILY_KIND_LEADER,    /* a plain lock held by a leader election (status --leader) */
  FAMILY_KIND_RW,        /* a read-write lock: {name}:rw:… */
  FAMILY_KIND_SEMAPHORE, /* a semaphore: {name}:sem… */
} FamilyKind;

typedef enum
{
  FAMILY_ROLE_LOCK,                   /* name: a plain lock's lease */
  FAMILY_ROLE_WRITER,                 /* {name}:rw:w */
  FAMILY_ROLE_READER,                 /* {name}:rw:r:CLIENT_ID */
  FAMILY_ROLE_WRITER_WAITING,         /* {name}:rw:ww, no hold */
  FAMILY_ROLE_SEMAPHORE_SIZE,         /* {name}:sem, the size, no hold */
  FAMILY_ROLE_SEMAPHORE_SIZE_RECORD,  /* {name}:sem:size, no hold */
  FAMILY_ROLE_PERMIT,                 /* {name}:sem:I */
} FamilyRole;

/* What one lease name (the key less "REGISTRY:") is. */
typedef struct
{
  char *name; /* the name the lock was obtained by */
  FamilyRole role;
  char *client_id; /* a reader's; else NULL */
  guint permit;    /* a permit's index */
} FamilyKey;

/* One holder of a hold. */
typedef struct
{
  FamilyRole role; /* LOCK, WRITER, READER or PERMIT */
  guint permit;
  char *owner;  /* the value of its key */
  gint64 ttl_ms;
  char *key;    /* its key, REGISTRY:… */
} FamilyHolder;

/* A lock, read-write lock or semaphore and who holds it. */
typedef struct
{
  char *name;
  FamilyKind kind;
  char *key;              /* the lock's key, a read-write lock's writer key, a semaphore's size key */
  GPtrArray *holders;     /* FamilyHolder: a writer first, then readers or permits by key */
  guint size;             /* a semaphore's size when its key was read, else 0 */
  char *writer_waiting;   /* a read-write lock's waiting writer (its client id), or NULL */
} FamilyHold;

/* Fills @key from @lease_name; family_key_clear() frees what it holds. */
void family_key_parse (const char *lease_name, FamilyKey *key);
void family_key_clear (FamilyKey *key);
FamilyKind family_role_kind (FamilyRole role);
/* Whether a key of @role is a hold (a lock, a writer, a reader, a permit). */
gboolean family_role_is_hold (FamilyRole role);
const char *family_role_name (FamilyRole role);
/* "lock", "leader", "read-write", "semaphore". */
const char *family_kind_name (FamilyKind kind);
FamilyHold *family_hold_new (const char *name, FamilyKind kind);
void family_hold_free (gpointer hold);
/* Adds what the key @lease_name (parsed into @key) with value @owner and @ttl_ms tells
 * of @hold: a holder, the size, or a waiting writer. */
void family_hold_add (FamilyHold *hold, const FamilyKey *key, const char *lease_name,
                      const char *owner, gint64 ttl_ms);
/* The holds that @leases (RedisLockLeaseInfo) make up, by name then kind. */
GPtrArray *family_group (GPtrArray *leases);
/* "free", "held", "leader", "write", "read" or "permits". */
const char *family_hold_state (const FamilyHold *hold);
/* The holders of @hold with @role. */
guint family_hold_count (const FamilyHold *hold, FamilyRole role);

/* The demo's throwaway redis-server (redislock-demo-server.c): on a Unix socket in a
 * temporary directory, started and answering PING, or NULL with an error
 * (G_IO_ERROR_NOT_FOUND when redis-server is not installed); freed, it is killed and
 * its directory removed. */
typedef struct _DemoServer DemoServer;
DemoServer *demo_server_start (GError **error);
const char *demo_server_get_url (DemoServer *server);
void demo_server_free (DemoServer *server);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DemoServer, demo_server_free)

#endif /* REDISLOCK_TOOL_H */
