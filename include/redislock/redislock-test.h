/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-test.h: a throwaway redis-server for tests of code that uses redislock.
 *
 * Starts a private redis-server (found on PATH, /usr/sbin or /usr/bin) listening only on
 * a Unix socket in a fresh temporary directory, with persistence off, so tests can run
 * in parallel without touching anyone's Redis. It can be stopped, started again on the
 * same socket (an outage), paused with SIGSTOP (a hung server) and is removed with
 * everything it wrote on free. A TLS variant listens for TLS on a free port of
 * 127.0.0.1 as well, with certificates made for it by the openssl command line. It plays
 * the role GTestDBus plays for D-Bus. Private Redis Cluster and Sentinel deployments
 * serve fault tests of those topologies.
 *
 * It also declares the debugging hooks of the in-process `memory://NAME` store (see
 * redis_lock_registry_new()), with which a test plays the part of Redis: expire a
 * lease, hand it to another owner, read who holds a key.
 *
 * Everything here lives in a library of its own, libredislock-testing (pkg-config
 * `redislock-testing`, which requires `redislock`; GObject introspection namespace
 * RedislockTesting), as GLib keeps its test utilities apart: libredislock itself
 * exports none of it. Not part of the umbrella header: include it from tests,
 * benchmarks and demonstrations (the `redislock demo` command starts a server when none
 * is given), never from code that serves production traffic.
 */
#ifndef REDIS_LOCK_TEST_H
#define REDIS_LOCK_TEST_H

#define __REDIS_LOCK_H_INSIDE__
#include <redislock/redislock-macros.h>
#include <redislock/redislock-version.h>
#undef __REDIS_LOCK_H_INSIDE__

#include <glib-object.h>

G_BEGIN_DECLS

/**
 * RedisLockTestServer:
 *
 * Opaque handle on a private redis-server process. Not thread-safe: drive it from one
 * thread (the test's main thread).
 *
 * Since: 0.1
 */
typedef struct _RedisLockTestServer RedisLockTestServer;

/**
 * REDIS_LOCK_TYPE_TEST_SERVER:
 *
 * The #GType of #RedisLockTestServer: a boxed type whose copy is
 * [method@RedislockTesting.TestServer.ref] and whose free is
 * [method@RedislockTesting.TestServer.free].
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_TEST_SERVER (redis_lock_test_server_get_type ())

/**
 * redis_lock_test_server_get_type:
 *
 * The #GType of #RedisLockTestServer, a boxed type.
 *
 * Returns: the #GType of #RedisLockTestServer, %REDIS_LOCK_TYPE_TEST_SERVER.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_test_server_get_type (void) G_GNUC_CONST;

/**
 * redis_lock_test_server_new:
 * @config_lines: (nullable) (array zero-terminated=1): extra redis.conf lines, for
 *   example `"requirepass secret"`; %NULL for none
 * @error: return location for a #GError
 *
 * Starts the server and waits until it answers PING (up to 10 s).
 * Errors: %G_IO_ERROR_NOT_FOUND when no redis-server is installed (the message says
 * so; see [ctor@RedislockTesting.TestServer.new_or_skip]), %G_IO_ERROR_FAILED when it does not
 * start.
 *
 * Returns: (transfer full) (nullable): the running server.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestServer *redis_lock_test_server_new (const char *const *config_lines,
                                                                   GError **error);

/**
 * redis_lock_test_server_new_or_skip: (skip)
 * @config_lines: (nullable) (array zero-terminated=1): as for
 *   [ctor@RedislockTesting.TestServer.new]
 *
 * For GLib test cases: starts a server, or calls g_test_skip() with a clear message
 * and returns %NULL when redis-server is not installed. Any other failure is fatal
 * (g_error()). Not introspected, as it serves GTest programs only: bindings call
 * [ctor@RedislockTesting.TestServer.new] and skip on %G_IO_ERROR_NOT_FOUND.
 *
 * Returns: (transfer full) (nullable): the running server, or %NULL when skipped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestServer *redis_lock_test_server_new_or_skip (const char *const *config_lines);

/**
 * RedisLockTestTlsFlags:
 * @REDIS_LOCK_TEST_TLS_DEFAULT: a valid server certificate; clients need no certificate
 * @REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT: clients must present a certificate signed by
 *   the CA (`tls-auth-clients yes`); the server's URL names the client certificate and
 *   key
 * @REDIS_LOCK_TEST_TLS_EXPIRED: the server certificate expired yesterday (it was valid
 *   from two days ago until a day ago), so verifying it fails for that reason alone
 *
 * How [ctor@RedislockTesting.TestServer.new_tls] sets up its TLS port.
 *
 * Since: 0.1
 */
typedef enum
{
  REDIS_LOCK_TEST_TLS_DEFAULT = 0,
  REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT = 1 << 0,
  REDIS_LOCK_TEST_TLS_EXPIRED = 1 << 1,
} RedisLockTestTlsFlags;

/**
 * REDIS_LOCK_TYPE_TEST_TLS_FLAGS:
 *
 * The #GType of #RedisLockTestTlsFlags, a #GFlags.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_TEST_TLS_FLAGS (redis_lock_test_tls_flags_get_type ())

/**
 * redis_lock_test_tls_flags_get_type:
 *
 * The #GType of #RedisLockTestTlsFlags, a #GFlags.
 *
 * Returns: the #GType of #RedisLockTestTlsFlags, %REDIS_LOCK_TYPE_TEST_TLS_FLAGS.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_test_tls_flags_get_type (void) G_GNUC_CONST;

/**
 * RedisLockTestTlsFile:
 * @REDIS_LOCK_TEST_TLS_CA: the CA certificate (self-signed) that signed the server and
 *   client certificates
 * @REDIS_LOCK_TEST_TLS_CLIENT_CERT: a client certificate signed by that CA
 * @REDIS_LOCK_TEST_TLS_CLIENT_KEY: the private key of the client certificate
 * @REDIS_LOCK_TEST_TLS_OTHER_CA: the certificate of an unrelated CA, which signed
 *   nothing here: verifying the server certificate against it must fail
 *
 * The PEM files of a TLS server that a test may hand to a client, for
 * [method@RedislockTesting.TestServer.get_tls_file]. Keys are EC P-256, unencrypted.
 *
 * Since: 0.1
 */
typedef enum
{
  REDIS_LOCK_TEST_TLS_CA,
  REDIS_LOCK_TEST_TLS_CLIENT_CERT,
  REDIS_LOCK_TEST_TLS_CLIENT_KEY,
  REDIS_LOCK_TEST_TLS_OTHER_CA,
} RedisLockTestTlsFile;

/**
 * REDIS_LOCK_TYPE_TEST_TLS_FILE:
 *
 * The #GType of #RedisLockTestTlsFile, a #GEnum.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_TEST_TLS_FILE (redis_lock_test_tls_file_get_type ())

/**
 * redis_lock_test_tls_file_get_type:
 *
 * The #GType of #RedisLockTestTlsFile, a #GEnum.
 *
 * Returns: the #GType of #RedisLockTestTlsFile, %REDIS_LOCK_TYPE_TEST_TLS_FILE.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_lock_test_tls_file_get_type (void) G_GNUC_CONST;

/**
 * redis_lock_test_server_new_tls:
 * @flags: how the TLS port is set up
 * @config_lines: (nullable) (array zero-terminated=1): extra redis.conf lines, as for
 *   [ctor@RedislockTesting.TestServer.new]
 * @error: return location for a #GError
 *
 * Starts a server that listens on its Unix socket exactly as one of
 * [ctor@RedislockTesting.TestServer.new] does (a test can look at it with plain hiredis through
 * [method@RedislockTesting.TestServer.get_socket_path]) and for TLS on a free port of 127.0.0.1
 * ([method@RedislockTesting.TestServer.get_port]), and waits until it answers PING on the socket.
 * Its certificates are made first in its temporary directory with the `openssl`
 * command line (a few tens of milliseconds): a self-signed CA, a server certificate
 * for `DNS:localhost` and `IP:127.0.0.1` signed by it, a client certificate signed by
 * it and an unrelated CA, all with EC P-256 keys. [method@RedislockTesting.TestServer.get_url]
 * returns a `rediss://` URL that trusts that CA.
 *
 * Errors: %G_IO_ERROR_NOT_FOUND when redis-server or openssl is not installed (see
 * [ctor@RedislockTesting.TestServer.new_tls_or_skip]), %G_IO_ERROR_FAILED when a certificate
 * cannot be made or the server does not start.
 *
 * Returns: (transfer full) (nullable): the running server.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestServer *redis_lock_test_server_new_tls (RedisLockTestTlsFlags flags,
                                                                       const char *const *config_lines,
                                                                       GError **error);

/**
 * redis_lock_test_server_new_tls_or_skip: (skip)
 * @flags: as for [ctor@RedislockTesting.TestServer.new_tls]
 * @config_lines: (nullable) (array zero-terminated=1): as for
 *   [ctor@RedislockTesting.TestServer.new_tls]
 *
 * As [ctor@RedislockTesting.TestServer.new_or_skip], for a TLS server: skips the test case when
 * redis-server or openssl is not installed. Not introspected, as
 * [ctor@RedislockTesting.TestServer.new_or_skip].
 *
 * Returns: (transfer full) (nullable): the running server, or %NULL when skipped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestServer *
redis_lock_test_server_new_tls_or_skip (RedisLockTestTlsFlags flags, const char *const *config_lines);

/**
 * redis_lock_test_server_get_url:
 * @server: a server
 *
 * For a TLS server, `rediss://127.0.0.1:PORT?ca=CA` followed by `&cert=CERT&key=KEY`
 * when it requires a client certificate (the paths of the files
 * [method@RedislockTesting.TestServer.get_tls_file] returns, %-encoded but for "/").
 *
 * Returns: (transfer none): a `unix://` URL for redis_lock_registry_new(), or a
 *   `rediss://` one for a TLS server, with the password when one was configured with
 *   `requirepass`.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_server_get_url (RedisLockTestServer *server);

/**
 * redis_lock_test_server_get_socket_path:
 * @server: a server
 *
 * The Unix socket the server listens on, for a `unix://` URL.
 * See [method@RedislockTesting.TestServer.get_url].
 *
 * Returns: (transfer none): the path of the server's Unix socket.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_server_get_socket_path (RedisLockTestServer *server);

/**
 * redis_lock_test_server_get_port:
 * @server: a server
 *
 * The TCP port of the server, for a `redis://` or `rediss://` URL.
 *
 * Returns: the TCP port the server listens on at 127.0.0.1 (for a TLS server, its TLS
 *   port; it keeps it across a stop and a start), or 0 when it has none (a server of
 *   [ctor@RedislockTesting.TestServer.new] listens on its Unix socket only).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 int redis_lock_test_server_get_port (RedisLockTestServer *server);

/**
 * redis_lock_test_server_get_tls_file:
 * @server: a server
 * @file: which file
 *
 * One of the certificate and key files made for a TLS server, for the
 * `ca=`, `cert=` and `key=` parameters of a `rediss://` URL.
 *
 * Returns: (transfer none) (nullable): the absolute path of that PEM file of a TLS
 *   server, in its temporary directory (removed on free), or %NULL for a server of
 *   [ctor@RedislockTesting.TestServer.new].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_server_get_tls_file (RedisLockTestServer *server,
                                                                   RedisLockTestTlsFile file);

/**
 * redis_lock_test_server_get_pid:
 * @server: a server
 *
 * The process id of the redis-server, to signal it from a test.
 * See [method@RedislockTesting.TestServer.pause].
 *
 * Returns: the process id of the running server, or 0 when stopped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GPid redis_lock_test_server_get_pid (RedisLockTestServer *server);

/**
 * redis_lock_test_server_stop:
 * @server: a server
 *
 * Kills the server (SIGKILL, as a crash would) and waits for it to exit. Every key is
 * lost: persistence is off. No-op when already stopped.
 * See [method@RedislockTesting.TestServer.start].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_server_stop (RedisLockTestServer *server);

/**
 * redis_lock_test_server_start:
 * @server: a stopped server
 * @error: return location for a #GError
 *
 * Starts the server again on the same socket and waits until it answers PING. A TLS
 * server keeps its port and certificates (it waits, up to 10 s, while another socket
 * holds the port). See [method@RedislockTesting.TestServer.stop].
 *
 * Returns: %TRUE when it runs.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_server_start (RedisLockTestServer *server, GError **error);

/**
 * redis_lock_test_server_pause:
 * @server: a running server
 *
 * Freezes the server with SIGSTOP: connections stay open, nothing is answered.
 * See [method@RedislockTesting.TestServer.resume].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_server_pause (RedisLockTestServer *server);

/**
 * redis_lock_test_server_resume:
 * @server: a paused server
 *
 * Resumes a paused server with SIGCONT. See [method@RedislockTesting.TestServer.pause].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_server_resume (RedisLockTestServer *server);

/**
 * redis_lock_test_server_ref:
 * @server: a server
 *
 * Takes another reference, for code that shares one server (a language binding
 * holding its handle, for one). [method@RedislockTesting.TestServer.free] drops a reference.
 *
 * Returns: (transfer full): @server, with one more reference.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestServer *redis_lock_test_server_ref (RedisLockTestServer *server);

/**
 * redis_lock_test_server_free:
 * @server: (transfer full) (nullable): a server
 *
 * Drops a reference (a server starts with one); the last one stops the server if it
 * runs and removes its temporary directory. See [ctor@RedislockTesting.TestServer.new].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_server_free (RedisLockTestServer *server);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockTestServer, redis_lock_test_server_free)

/**
 * RedisLockTestCluster: (skip)
 *
 * Opaque handle on a private Redis Cluster: `redis-server --cluster-enabled yes` nodes
 * listening on free TCP ports of 127.0.0.1 only, each in its own temporary directory
 * with persistence off. Nodes are numbered from 0: the masters first (0 ..
 * n_masters − 1, owning the slots in equal ranges in that order), then the replicas
 * (replica r of master m is node n_masters + m × replicas_per_master + r). After a
 * failover a former replica may own slots: ask
 * [method@RedislockTesting.TestCluster.get_slot_owner]. Not thread-safe: drive it from one thread.
 * Not introspected: it is not reference-counted (no boxed type), so a binding could not free it;
 * multi-node tests are C programs.
 *
 * Since: 0.1
 */
typedef struct _RedisLockTestCluster RedisLockTestCluster;

/**
 * redis_lock_test_cluster_new:
 * @n_masters: number of masters, at least 1
 * @replicas_per_master: replicas of each master
 * @error: return location for a #GError
 *
 * Starts the nodes, joins them into one cluster with every slot assigned and every
 * replica attached, and waits (up to 30 s, by polling the nodes' state, not by fixed
 * sleeps) until every node reports `cluster_state:ok` and the same slot owners. The
 * nodes use `cluster-node-timeout 1000`, so a failover after a master dies takes
 * about two seconds.
 *
 * Errors: %G_IO_ERROR_NOT_FOUND when redis-server is not installed,
 * %G_IO_ERROR_FAILED when the cluster does not form.
 * See [method@RedislockTesting.TestCluster.free].
 *
 * Returns: (transfer full) (nullable): the running cluster.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestCluster *redis_lock_test_cluster_new (guint n_masters,
                                                                     guint replicas_per_master,
                                                                     GError **error);

/**
 * redis_lock_test_cluster_new_or_skip: (skip)
 * @n_masters: as for redis_lock_test_cluster_new()
 * @replicas_per_master: as for redis_lock_test_cluster_new()
 *
 * As [ctor@RedislockTesting.TestServer.new_or_skip], for a cluster.
 *
 * Returns: (transfer full) (nullable): the cluster, or %NULL when skipped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestCluster *redis_lock_test_cluster_new_or_skip (guint n_masters,
                                                                             guint replicas_per_master);

/**
 * redis_lock_test_cluster_get_url:
 * @cluster: a cluster
 *
 * The URL a registry connects to the cluster with.
 * See [method@RedislockTesting.TestCluster.get_node_url].
 *
 * Returns: (transfer none): `redis-cluster://127.0.0.1:PORT,…` listing every node as
 *   a seed.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_cluster_get_url (RedisLockTestCluster *cluster);

/**
 * redis_lock_test_cluster_get_n_nodes:
 * @cluster: a cluster
 *
 * How many nodes the cluster has. See [method@RedislockTesting.TestCluster.get_node_url].
 *
 * Returns: the number of nodes, masters and replicas.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_lock_test_cluster_get_n_nodes (RedisLockTestCluster *cluster);

/**
 * redis_lock_test_cluster_get_node_url:
 * @cluster: a cluster
 * @node: a node number
 *
 * The URL of one node, to talk to it alone. See [method@RedislockTesting.TestCluster.get_url].
 *
 * Returns: (transfer none): `redis://127.0.0.1:PORT` of that one node.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_cluster_get_node_url (RedisLockTestCluster *cluster,
                                                                    guint node);

/**
 * redis_lock_test_cluster_get_port:
 * @cluster: a cluster
 * @node: a node number
 *
 * The TCP port of one node. See [method@RedislockTesting.TestCluster.get_node_url].
 *
 * Returns: the node's TCP port on 127.0.0.1.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 int redis_lock_test_cluster_get_port (RedisLockTestCluster *cluster, guint node);

/**
 * redis_lock_test_cluster_get_pid:
 * @cluster: a cluster
 * @node: a node number
 *
 * The process id of one node, to signal it from a test.
 * See [method@RedislockTesting.TestCluster.pause_node].
 *
 * Returns: the node's process id, or 0 when it is stopped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GPid redis_lock_test_cluster_get_pid (RedisLockTestCluster *cluster, guint node);

/**
 * redis_lock_test_cluster_key_slot:
 * @key: a key
 *
 * The hash slot of a key, computed here as Redis Cluster does, to pick keys on
 * given slots. See [method@RedislockTesting.TestCluster.get_slot_owner].
 *
 * Returns: the slot of @key (CRC16 of the key or of its `{hash tag}`, mod 16384), as
 *   `CLUSTER KEYSLOT` answers it.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_lock_test_cluster_key_slot (const char *key);

/**
 * redis_lock_test_cluster_get_slot_owner:
 * @cluster: a cluster
 * @slot: a slot, 0 … 16383
 *
 * Asks the running nodes which master owns @slot now (`CLUSTER NODES`) and takes the
 * answer most of them give: just after a failover or a migration, a node may not have
 * heard of it yet. See [method@RedislockTesting.TestCluster.migrate_slot].
 *
 * Returns: the owner's node number, or -1 when no running node knows one.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 int redis_lock_test_cluster_get_slot_owner (RedisLockTestCluster *cluster,
                                                             guint slot);

/**
 * redis_lock_test_cluster_migrate_slot:
 * @cluster: a cluster
 * @slot: a slot
 * @to_node: the master that takes the slot over
 * @error: return location for a #GError
 *
 * Moves @slot with its keys as `redis-cli --cluster reshard` would: marks it
 * IMPORTING on @to_node and MIGRATING on its owner, MIGRATEs its keys, then assigns
 * it to @to_node on every master. Equivalent to migrate_slot_begin() followed by
 * migrate_slot_finish(); a no-op when @to_node owns the slot already.
 * See [method@RedislockTesting.TestCluster.migrate_slot_begin].
 *
 * Returns: %TRUE when @to_node owns the slot on every running master.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_cluster_migrate_slot (RedisLockTestCluster *cluster,
                                                                 guint slot, guint to_node,
                                                                 GError **error);

/**
 * redis_lock_test_cluster_migrate_slot_begin:
 * @cluster: a cluster
 * @slot: a slot
 * @to_node: the master that is to take the slot over
 * @error: return location for a #GError
 *
 * The first half of a migration: @slot IMPORTING on @to_node and MIGRATING on its
 * owner, and no key moved yet. While it lasts, a command on a key of the slot that the
 * owner no longer has is answered `ASK`.
 * See [method@RedislockTesting.TestCluster.migrate_slot_finish].
 *
 * Returns: %TRUE on success.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_cluster_migrate_slot_begin (RedisLockTestCluster *cluster,
                                                                       guint slot, guint to_node,
                                                                       GError **error);

/**
 * redis_lock_test_cluster_migrate_key:
 * @cluster: a cluster
 * @key: a key of a slot whose migration has begun
 * @error: return location for a #GError
 *
 * MIGRATEs @key alone from the slot's owner to the importing node (a no-op when the
 * key does not exist). See [method@RedislockTesting.TestCluster.migrate_slot_begin].
 *
 * Returns: %TRUE on success.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_cluster_migrate_key (RedisLockTestCluster *cluster,
                                                                const char *key, GError **error);

/**
 * redis_lock_test_cluster_migrate_slot_finish:
 * @cluster: a cluster
 * @slot: a slot whose migration has begun
 * @error: return location for a #GError
 *
 * MIGRATEs the keys of @slot still on its owner, then assigns the slot to the
 * importing node on every master (`CLUSTER SETSLOT slot NODE id`).
 * See [method@RedislockTesting.TestCluster.migrate_slot_begin].
 *
 * Returns: %TRUE when the importing node owns the slot on every running master and
 *   every running node knows the same current epoch (so a later migration's epoch
 *   bump cannot lose to a late message of the former owner).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_cluster_migrate_slot_finish (RedisLockTestCluster *cluster,
                                                                        guint slot, GError **error);

/**
 * redis_lock_test_cluster_stop_node:
 * @cluster: a cluster
 * @node: a node number
 *
 * Kills the node (SIGKILL) and waits for it to exit. No-op when stopped.
 * See [method@RedislockTesting.TestCluster.start_node].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_cluster_stop_node (RedisLockTestCluster *cluster, guint node);

/**
 * redis_lock_test_cluster_start_node:
 * @cluster: a cluster
 * @node: a stopped node
 * @error: return location for a #GError
 *
 * Starts the node again on its port with its cluster configuration (it rejoins the
 * cluster, as a replica if it was failed over) and waits until it answers PING.
 * See [method@RedislockTesting.TestCluster.stop_node].
 *
 * Returns: %TRUE when it runs.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_cluster_start_node (RedisLockTestCluster *cluster,
                                                               guint node, GError **error);

/**
 * redis_lock_test_cluster_pause_node:
 * @cluster: a cluster
 * @node: a running node
 *
 * Freezes the node with SIGSTOP. See [method@RedislockTesting.TestCluster.resume_node].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_cluster_pause_node (RedisLockTestCluster *cluster, guint node);

/**
 * redis_lock_test_cluster_resume_node:
 * @cluster: a cluster
 * @node: a paused node
 *
 * Resumes the node with SIGCONT. See [method@RedislockTesting.TestCluster.pause_node].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_cluster_resume_node (RedisLockTestCluster *cluster, guint node);

/**
 * redis_lock_test_cluster_wait_ok:
 * @cluster: a cluster
 * @timeout_ms: how long to wait at most
 * @error: return location for a #GError
 *
 * Waits until every running node reports `cluster_state:ok`, every slot has an owner
 * that is running, and the running nodes agree on the owners (after a node was
 * stopped: until the cluster has failed over). Also until every running node knows all
 * nodes, sees no running node as failing, agrees with every running node on its role
 * (master, or replica of which master), and every running replica's link to its master
 * is up (after a node was started again: until it has rejoined and synced). A paused
 * node counts as not running. Polls the nodes every few milliseconds.
 * See [method@RedislockTesting.TestCluster.stop_node].
 *
 * Returns: %TRUE when the cluster is whole again; %FALSE with %G_IO_ERROR_TIMED_OUT
 *   otherwise.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_cluster_wait_ok (RedisLockTestCluster *cluster,
                                                            gint64 timeout_ms, GError **error);

/**
 * redis_lock_test_cluster_free:
 * @cluster: (transfer full) (nullable): a cluster
 *
 * Stops every node and removes their temporary directories.
 * See [struct@RedislockTesting.TestCluster].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_cluster_free (RedisLockTestCluster *cluster);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockTestCluster, redis_lock_test_cluster_free)

/**
 * RedisLockTestSentinel: (skip)
 *
 * Opaque handle on a private master–replica deployment watched by Sentinels: data
 * nodes and Sentinels listen on free TCP ports of 127.0.0.1 only, each in its own
 * temporary directory, persistence off. Data node 0 starts as master, nodes 1 …
 * n_replicas as its replicas. The Sentinels watch the master as
 * [method@RedislockTesting.TestSentinel.get_master_name] with a quorum of one,
 * `down-after-milliseconds 1000` and `failover-timeout 5000`. Not thread-safe: drive it from one
 * thread. Not introspected, as #RedisLockTestCluster.
 *
 * Since: 0.1
 */
typedef struct _RedisLockTestSentinel RedisLockTestSentinel;

/**
 * redis_lock_test_sentinel_new:
 * @n_replicas: replicas of the master
 * @n_sentinels: number of Sentinels, at least 1
 * @error: return location for a #GError
 *
 * Starts the nodes and Sentinels and waits (polling, up to 30 s) until every replica
 * is in sync and every Sentinel knows the master, all its replicas and every other
 * Sentinel. Takes about a quarter of a second with one Sentinel; with several, up to
 * two seconds more, until their hello messages have met.
 *
 * Errors: %G_IO_ERROR_NOT_FOUND when redis-server is not installed (Sentinel runs as
 * `redis-sentinel` when installed, else as `redis-server --sentinel`),
 * %G_IO_ERROR_FAILED when the deployment does not come up.
 * See [method@RedislockTesting.TestSentinel.free].
 *
 * Returns: (transfer full) (nullable): the running deployment.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestSentinel *redis_lock_test_sentinel_new (guint n_replicas,
                                                                       guint n_sentinels,
                                                                       GError **error);

/**
 * redis_lock_test_sentinel_new_or_skip: (skip)
 * @n_replicas: as for redis_lock_test_sentinel_new()
 * @n_sentinels: as for redis_lock_test_sentinel_new()
 *
 * As [ctor@RedislockTesting.TestServer.new_or_skip], for a Sentinel deployment.
 *
 * Returns: (transfer full) (nullable): the deployment, or %NULL when skipped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLockTestSentinel *redis_lock_test_sentinel_new_or_skip (guint n_replicas,
                                                                               guint n_sentinels);

/**
 * redis_lock_test_sentinel_get_url:
 * @sentinel: a deployment
 *
 * The URL a registry connects to the deployment with, through its Sentinels.
 * See [method@RedislockTesting.TestSentinel.get_master_name].
 *
 * Returns: (transfer none): `redis-sentinel://127.0.0.1:PORT,…#NAME` listing every
 *   Sentinel.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_sentinel_get_url (RedisLockTestSentinel *sentinel);

/**
 * redis_lock_test_sentinel_get_master_name:
 * @sentinel: a deployment
 *
 * The name of the monitored master. See [method@RedislockTesting.TestSentinel.get_url].
 *
 * Returns: (transfer none): the name the Sentinels know the master by.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_sentinel_get_master_name (RedisLockTestSentinel *sentinel);

/**
 * redis_lock_test_sentinel_get_n_nodes:
 * @sentinel: a deployment
 *
 * How many data nodes the deployment has. See [method@RedislockTesting.TestSentinel.get_node_url].
 *
 * Returns: the number of data nodes (the master and its replicas).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 guint redis_lock_test_sentinel_get_n_nodes (RedisLockTestSentinel *sentinel);

/**
 * redis_lock_test_sentinel_get_node_url:
 * @sentinel: a deployment
 * @node: a data node number
 *
 * The URL of one data node, to talk to it alone.
 * See [method@RedislockTesting.TestSentinel.get_master].
 *
 * Returns: (transfer none): `redis://127.0.0.1:PORT` of that data node.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_lock_test_sentinel_get_node_url (RedisLockTestSentinel *sentinel,
                                                                     guint node);

/**
 * redis_lock_test_sentinel_get_pid:
 * @sentinel: a deployment
 * @node: a data node number
 *
 * The process id of one data node, to signal it from a test.
 * See [method@RedislockTesting.TestSentinel.pause_node].
 *
 * Returns: the data node's process id, or 0 when it is stopped.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GPid redis_lock_test_sentinel_get_pid (RedisLockTestSentinel *sentinel, guint node);

/**
 * redis_lock_test_sentinel_get_master:
 * @sentinel: a deployment
 *
 * Asks the data nodes (`ROLE`) which one is master now. When two say so (a former
 * master still running after a failover, until the Sentinels demote it some ten
 * seconds later), the one the Sentinels name. See [method@RedislockTesting.TestSentinel.failover].
 *
 * Returns: its node number, or -1 when no running node says it is master.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 int redis_lock_test_sentinel_get_master (RedisLockTestSentinel *sentinel);

/**
 * redis_lock_test_sentinel_failover:
 * @sentinel: a deployment with at least one replica
 * @timeout_ms: how long to wait at most
 * @error: return location for a #GError
 *
 * Forces a failover (`SENTINEL FAILOVER`, asked again while a Sentinel answers that a
 * failover is in progress or that it knows no replica fit to promote) and waits until
 * every running Sentinel names a new master and that node answers `ROLE` as master:
 * about a second. The former master, still running, goes on saying it is master (and
 * taking writes) until the Sentinels demote it some ten seconds later; the failover
 * does not wait for that. See [method@RedislockTesting.TestSentinel.get_master].
 *
 * Returns: the new master's node number, or -1 with @error (%G_IO_ERROR_TIMED_OUT
 *   when @timeout_ms passed, %G_IO_ERROR_INVALID_ARGUMENT without replicas).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 int redis_lock_test_sentinel_failover (RedisLockTestSentinel *sentinel,
                                                         gint64 timeout_ms, GError **error);

/**
 * redis_lock_test_sentinel_stop_node:
 * @sentinel: a deployment
 * @node: a data node number
 *
 * Kills the data node (SIGKILL) and waits for it to exit. No-op when stopped.
 * See [method@RedislockTesting.TestSentinel.start_node].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_sentinel_stop_node (RedisLockTestSentinel *sentinel, guint node);

/**
 * redis_lock_test_sentinel_start_node:
 * @sentinel: a deployment
 * @node: a stopped data node
 * @error: return location for a #GError
 *
 * Starts the data node again on its port and waits until it answers PING (the
 * Sentinels reconfigure it as a replica when another node is master).
 * See [method@RedislockTesting.TestSentinel.stop_node].
 *
 * Returns: %TRUE when it runs.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_test_sentinel_start_node (RedisLockTestSentinel *sentinel,
                                                                guint node, GError **error);

/**
 * redis_lock_test_sentinel_pause_node:
 * @sentinel: a deployment
 * @node: a running data node
 *
 * Freezes the data node with SIGSTOP. See [method@RedislockTesting.TestSentinel.resume_node].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_sentinel_pause_node (RedisLockTestSentinel *sentinel, guint node);

/**
 * redis_lock_test_sentinel_resume_node:
 * @sentinel: a deployment
 * @node: a paused data node
 *
 * Resumes the data node with SIGCONT. See [method@RedislockTesting.TestSentinel.pause_node].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_sentinel_resume_node (RedisLockTestSentinel *sentinel, guint node);

/**
 * redis_lock_test_sentinel_stop_sentinel:
 * @sentinel: a deployment
 * @index: a Sentinel number, from 0
 *
 * Kills that Sentinel (SIGKILL) and waits for it to exit. No-op when stopped.
 * See [method@RedislockTesting.TestSentinel.failover].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_sentinel_stop_sentinel (RedisLockTestSentinel *sentinel,
                                                               guint index);

/**
 * redis_lock_test_sentinel_free:
 * @sentinel: (transfer full) (nullable): a deployment
 *
 * Stops every process and removes their temporary directories.
 * See [struct@RedislockTesting.TestSentinel].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_lock_test_sentinel_free (RedisLockTestSentinel *sentinel);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLockTestSentinel, redis_lock_test_sentinel_free)

/**
 * redis_lock_memory_store_expire:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 *
 * For tests only: makes the lease @key expire now, as if its TTL had run out. Like a
 * real expiry it notifies nobody: the holder finds the lease lost at its next renewal
 * (watchdog tick or redis_lock_registry_renew()) or at its outermost unlock, and a
 * waiter in another registry retries when the remaining TTL it was told runs out.
 * Thread-safe. See [func@RedislockTesting.memory_store_get_pttl].
 *
 * Returns: %TRUE when the lease existed; %FALSE when no registry has `memory://@store_name`
 *   open or @key is absent (never taken, released or already expired).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_memory_store_expire (const char *store_name, const char *key);

/**
 * redis_lock_memory_store_steal:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 * @new_owner: the value the key holds from now on (a registry's client id, or any
 *   string standing for another process)
 * @ttl_ms: the new owner's TTL in milliseconds; negative: the key never expires.
 *   Must not be 0.
 *
 * For tests only: another owner takes the lease @key over, as when the key expired
 * and another process took it at once. The former holder finds the lease lost at its
 * next renewal or outermost unlock, which leaves the new owner's key untouched. Nobody
 * is notified. Thread-safe. See [func@RedislockTesting.memory_store_get_owner].
 *
 * Returns: %TRUE when the lease existed and now belongs to @new_owner; %FALSE when no
 *   registry has `memory://@store_name` open or @key is absent.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_lock_memory_store_steal (const char *store_name,
                                                          const char *key,
                                                          const char *new_owner,
                                                          gint64 ttl_ms);

/**
 * redis_lock_memory_store_get_owner:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 *
 * For tests only: what `GET key` would answer on Redis. Thread-safe.
 * See [func@RedislockTesting.memory_store_steal].
 *
 * Returns: (transfer full) (nullable): the value @key holds (for a registry: its client
 *   id, ":" and the number of the acquisition), or %NULL when the
 *   key is absent or no registry has `memory://@store_name` open. Free with g_free().
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 char *redis_lock_memory_store_get_owner (const char *store_name, const char *key);

/**
 * redis_lock_memory_store_get_pttl:
 * @store_name: the NAME of a `memory://NAME` store
 * @key: a full lease key, `registry_key:name`
 *
 * For tests only: what `PTTL key` would answer on Redis. Thread-safe.
 * See [func@RedislockTesting.memory_store_expire].
 *
 * Returns: the milliseconds left before @key expires, -1 when it never expires, -2
 *   when it is absent or no registry has `memory://@store_name` open.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gint64 redis_lock_memory_store_get_pttl (const char *store_name, const char *key);

G_END_DECLS

#endif /* REDIS_LOCK_TEST_H */
