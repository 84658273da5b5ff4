/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testprocess.h: one private redis-server or Sentinel process of the test helpers
 * (see testprocess.c), and the short commands that prepare one (openssl making the
 * certificates of a TLS server). testserver.c, testcluster.c and testsentinel.c build on
 * it. */
#ifndef RL_TEST_PROCESS_H
#define RL_TEST_PROCESS_H

#include <stdarg.h>

#include <glib.h>
#include <hiredis/hiredis.h>

/* How long a (re)started process may take to answer PING. */
#define RL_TEST_READY_TIMEOUT_MS 10000

typedef struct
{
  char *executable;  /* absolute path of the program */
  char *extra_arg;   /* NULL, or an argument after the configuration file ("--sentinel") */
  char *dir;         /* the temporary directory holding everything below */
  char *conf_path;   /* dir/redis.conf */
  char *log_path;    /* dir/redis.log: the process's stdout and stderr */
  char *socket_path; /* where it listens when on a Unix socket, else NULL */
  int port;          /* where it listens on 127.0.0.1 when on TCP, else 0 */
  char *address;     /* socket_path or 127.0.0.1:port, for messages */
  GPid pid;          /* 0 while stopped */
  gboolean paused;   /* frozen by SIGSTOP */
  goffset log_start; /* size of redis.log when it was last started */
  redisContext *ctx; /* cached connection of rl_test_process_command(), or NULL */
} RlTestProcess;

/* Finds @name on $PATH, then in /usr/sbin and /usr/bin, then at @configured_path when
 * that is absolute (the path configure found). NULL when it is nowhere. */
char *rl_test_find_program (const char *name, const char *configured_path);

/* redis-server, or NULL: rl_test_find_program() with the path configure found. */
char *rl_test_find_redis_server (void);

/* Quotes @value for redis.conf, which splits lines like a shell. */
void rl_test_append_quoted (GString *out, const char *value);

/* Reserves @n distinct free TCP ports of 127.0.0.1 by binding sockets to port 0 at the
 * same time, then releases them. Another process may take one before it is used: a
 * start then fails with G_IO_ERROR_ADDRESS_IN_USE and the caller picks again. */
gboolean rl_test_pick_free_ports (int *ports, guint n, GError **error);

/* A process of @executable (with @extra_arg, nullable, after its configuration file) in
 * a fresh temporary directory named after @prefix. With @socket_name, it is to listen
 * on dir/@socket_name (the directory is made short enough for a socket path); else on
 * 127.0.0.1:@port. Nothing runs yet: write conf_path, then rl_test_process_start(). */
RlTestProcess *rl_test_process_new (const char *executable, const char *extra_arg,
                                    const char *prefix, const char *socket_name, int port,
                                    GError **error);

/* Listens on another TCP port from now on (the caller rewrites conf_path). */
void rl_test_process_set_port (RlTestProcess *process, int port);

/* Starts the process on conf_path and waits until it answers PING (any reply) for up
 * to RL_TEST_READY_TIMEOUT_MS. TRUE when it already runs. Errors: G_IO_ERROR_ADDRESS_IN_USE
 * when it exited because its port was taken, G_IO_ERROR_FAILED otherwise; the message
 * quotes the end of redis.log. */
gboolean rl_test_process_start (RlTestProcess *process, GError **error);

/* How many free ports rl_test_process_start_new() hands its configure function at the
 * most, and how often it picks new ones. */
#define RL_TEST_MAX_PORTS 2
#define RL_TEST_PORT_TRIES 5

/* Writes the configuration of @process for a start on @ports, free TCP ports (when
 * the process listens on TCP, its own port is one of them: rl_test_process_set_port()). */
typedef gboolean (*RlTestConfigureFunc) (RlTestProcess *process, const int *ports, gpointer data,
                                         GError **error);

/* Starts @process for the first time on @n_ports (at most RL_TEST_MAX_PORTS) free
 * ports, which @configure (@data) writes into its configuration first: when another
 * process took one of them meanwhile, new ones are picked and it is configured and
 * started again, RL_TEST_PORT_TRIES times at the most. */
gboolean rl_test_process_start_new (RlTestProcess *process, guint n_ports,
                                    RlTestConfigureFunc configure, gpointer data,
                                    GError **error);

/* As rl_test_process_start(), but while the port is taken (by a connection's local
 * port, say) tries again for up to RL_TEST_READY_TIMEOUT_MS: for a restart on the
 * port a process had before. */
gboolean rl_test_process_restart (RlTestProcess *process, GError **error);

/* Kills the process with SIGKILL (which also ends a paused one) and reaps it. No-op
 * when stopped. */
void rl_test_process_stop (RlTestProcess *process);

/* SIGSTOP / SIGCONT, returning once the process has changed state. */
void rl_test_process_pause (RlTestProcess *process);
void rl_test_process_resume (RlTestProcess *process);

/* Defines the faults a deployment of several nodes offers on each (redislock-test.h):
 * type_name_stop_node(), _start_node(), _pause_node() and _resume_node() of TypeName,
 * whose node @node is the process NODE_PROCESS (deployment, node), NULL with a critical
 * when there is no such node. A node started again keeps its ports and its directory
 * (so a Cluster node its nodes.conf: it comes back with its id and its peers). */
#define RL_TEST_DEFINE_NODE_FAULTS(TypeName, type_name, NODE_PROCESS)                              \
  void type_name##_stop_node (TypeName *deployment, guint node)                                    \
  {                                                                                                \
    rl_test_process_stop (NODE_PROCESS (deployment, node));                                        \
  }                                                                                                \
                                                                                                   \
  gboolean type_name##_start_node (TypeName *deployment, guint node, GError **error)               \
  {                                                                                                \
    RlTestProcess *process = NODE_PROCESS (deployment, node);                                      \
                                                                                                   \
    g_return_val_if_fail (process != NULL, FALSE);                                                 \
    g_return_val_if_fail (error == NULL || *error == NULL, FALSE);                                 \
    return rl_test_process_restart (process, error);                                               \
  }                                                                                                \
                                                                                                   \
  void type_name##_pause_node (TypeName *deployment, guint node)                                   \
  {                                                                                                \
    rl_test_process_pause (NODE_PROCESS (deployment, node));                                       \
  }                                                                                                \
                                                                                                   \
  void type_name##_resume_node (TypeName *deployment, guint node)                                  \
  {                                                                                                \
    rl_test_process_resume (NODE_PROCESS (deployment, node));                                      \
  }

/* Appends to @conf the lines every process of the test helpers is configured with:
 * in the foreground, logging to its output (redis.log), working in its directory. */
void rl_test_process_append_conf (RlTestProcess *process, GString *conf);

/* Writes @conf as @process's configuration file (conf_path). */
gboolean rl_test_process_write_conf (RlTestProcess *process, const GString *conf, GError **error);

/* Running and not paused: it can answer. */
gboolean rl_test_process_is_up (RlTestProcess *process);

/* The last lines of redis.log, to explain a failure. */
char *rl_test_process_log_tail (RlTestProcess *process);

/* Runs one command on the process over a cached connection that it opens when needed,
 * with a timeout of @timeout_ms on connecting and on the reply. NULL with
 * G_IO_ERROR_NOT_CONNECTED when the process is stopped or paused, G_IO_ERROR_FAILED when
 * the connection fails (it is dropped and opened again next time) and on an error
 * reply, which the message quotes with the command. Free with freeReplyObject(). */
redisReply *rl_test_process_command (RlTestProcess *process, int timeout_ms, GError **error,
                                     const char *format, ...) G_GNUC_PRINTF (4, 5);
/* The same with a va_list. */
redisReply *rl_test_process_vcommand (RlTestProcess *process, int timeout_ms, GError **error,
                                      const char *format, va_list ap);
/* The same with an argument vector (binary safe). */
redisReply *rl_test_process_command_argv (RlTestProcess *process, int timeout_ms, int argc,
                                          const char **argv, const size_t *argv_len,
                                          GError **error);

/* The value of the field @name in an INFO-style reply ("name:value\r\n" lines), or
 * NULL. Free with g_free(). */
char *rl_test_info_field (const char *info, const char *name);

/* One look at a deployment: TRUE when the condition holds, else FALSE with what is
 * still missing written in @why. */
typedef gboolean (*RlTestCheckFunc) (gpointer data, GString *why);

/* Calls @check every few milliseconds until it holds; after @timeout_ms fails with
 * G_IO_ERROR_TIMED_OUT, a message made of @what and the last @why. */
gboolean rl_test_wait_until (RlTestCheckFunc check, gpointer data, gint64 timeout_ms,
                             const char *what, GError **error);

/* One program for rl_test_run_programs(). */
typedef struct
{
  const char *const *argv; /* NULL-terminated; argv[0] is an absolute path */
  const char *log_name;    /* the file of log_dir that gets its stdout and stderr */
} RlTestProgram;

/* Runs the @n_programs @programs at the same time, stdin from /dev/null, the stdout and
 * stderr of each into log_dir/log_name, and waits until they have all exited, for up to
 * RL_TEST_READY_TIMEOUT_MS (then kills them). They run in the caller's working
 * directory, not in @log_dir: a tool running the test (valgrind following children) may
 * have been given paths relative to it; so give them absolute paths. TRUE when every
 * one exited with code 0; else G_IO_ERROR_FAILED naming the first that did not (in
 * @programs order) and quoting its log, or G_IO_ERROR_TIMED_OUT. Only for short
 * commands (openssl) that need no input: whatever they ask, they read end-of-file. */
gboolean rl_test_run_programs (const char *log_dir, const RlTestProgram *programs,
                               guint n_programs, GError **error);

/* Stops the process, removes its directory and frees @process. */
void rl_test_process_free (RlTestProcess *process);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlTestProcess, rl_test_process_free)

/* The `_new_or_skip` constructors' end: @object when it was made; else skips the test
 * case when something is not installed (@error is G_IO_ERROR_NOT_FOUND, freed here) and
 * returns NULL; any other failure is fatal, named by @what. */
gpointer rl_test_or_skip (gpointer object, GError *error, const char *what);

#endif /* RL_TEST_PROCESS_H */
