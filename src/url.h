/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* url.h: parsing and redaction of Redis URLs (see url.c). */
#ifndef RL_URL_H
#define RL_URL_H

#include <glib.h>

#include "redislock/redislock.h"

typedef struct
{
  char *host;     /* TCP host, or NULL for a Unix socket */
  int port;
  char *path;     /* Unix socket path, or NULL */
  char *username; /* NULL: none */
  char *password; /* NULL: none */
  int db;
  gboolean tls;   /* rediss forms: TLS over TCP, certificates always verified */
  char *tls_ca;   /* CA bundle file; NULL: the system's trust store */
  char *tls_cert; /* client certificate file, or NULL */
  char *tls_key;  /* its private key file, or NULL */
  char *tls_sni;  /* name sent in the handshake and verified; NULL: the host */
} RlConnConfig;

/* Parses @url (redis://, rediss:// or unix://) into @config; FALSE with REDIS_LOCK_ERROR_INVALID
 * and a message that never shows the password. The other forms (Sentinel, Cluster)
 * are INVALID here, with a message saying the URL names a deployment, not one server:
 * rl_url_parse() reads them. */
gboolean rl_conn_config_parse (const char *url, RlConnConfig *config, GError **error);
void rl_conn_config_clear (RlConnConfig *config);
/* A deep copy of @config into @copy. */
void rl_conn_config_copy (const RlConnConfig *config, RlConnConfig *copy);

/* Which deployment a URL names. */
typedef enum
{
  RL_TOPOLOGY_SINGLE,   /* redis://, unix://: one server */
  RL_TOPOLOGY_SENTINEL, /* redis-sentinel://: a master found through Sentinels */
  RL_TOPOLOGY_CLUSTER,  /* redis-cluster://: keys routed by slot over seed nodes */
} RlTopologyKind;

/* Every URL form, parsed. */
typedef struct
{
  RlTopologyKind kind;
  /* SINGLE: the server. SENTINEL and CLUSTER: what every data node is connected with
   * (username, password, db; host and path NULL, port 0); the address of each data
   * node comes from discovery. */
  RlConnConfig node;
  /* SENTINEL: the Sentinels (host, port with default 26379, and the
   * sentinel_username / sentinel_password of the query as username / password, db 0).
   * CLUSTER: the seed nodes (host, port with default 6379, the credentials of the
   * URL, db 0). In the order the URL gives them, duplicates kept; empty (not NULL)
   * for SINGLE. */
  GArray *hosts; /* RlConnConfig */
  char *master_name; /* SENTINEL: the fragment, %-decoded; NULL otherwise */
} RlUrl;

/* Parses any URL form into @parsed; FALSE with REDIS_LOCK_ERROR_INVALID and a message
 * that never shows a password:
 *   redis://[[user]:password@]host[:port][/db][?db=N&password=P&username=U]
 *   unix:///path[?db=N&password=P&username=U]
 *   redis-sentinel://[[user]:password@]host[:port][,host[:port]…][/db][?sentinel_username=U&sentinel_password=P]#master_name
 *   redis-cluster://[[user]:password@]host[:port][,host[:port]…]   (no db: a cluster has only db 0)
 *   rediss://, rediss-sentinel://, rediss-cluster://: the same over TLS, with
 *     ca=, cert=, key= and sni= in the query too
 * (memory:// is the memory store's, read by store.c before this parser.) A Sentinel URL
 * without a master name, an empty host in a list, a port out of range, a db on a
 * Cluster URL, a db, password or user name given twice (in the URL and its query) or an
 * unknown parameter is INVALID; so are the rediss forms in a build without TLS ("not
 * supported by this build"). A bad host of a list is named by its place ("the 2nd
 * host"), never quoted. On failure @parsed holds nothing to free. */
gboolean rl_url_parse (const char *url, RlUrl *parsed, GError **error);
void rl_url_clear (RlUrl *parsed);

/* Where @config points, for messages: "PATH", "HOST:PORT" or "[IPv6]:PORT", or a
 * description when they hold characters a misplaced password may have brought in. */
char *rl_conn_config_describe (const RlConnConfig *config);

/* @url as it may be shown in a message or a log: no piece of a password in it (the
 * user info and parameter values are "***"; a Sentinel URL's master name is shown when
 * it is plain and no query precedes it). */
char *rl_url_redact (const char *url);

#endif /* RL_URL_H */
