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
} RlConnConfig;

/* Parses @url (redis:// or unix://) into @config; FALSE with REDIS_LOCK_ERROR_INVALID
 * and a message that never shows the password. */
gboolean rl_conn_config_parse (const char *url, RlConnConfig *config, GError **error);
void rl_conn_config_clear (RlConnConfig *config);

/* Where @config points, for messages: "PATH" or "HOST:PORT", or a description when
 * they hold characters a misplaced password may have brought in. */
char *rl_conn_config_describe (const RlConnConfig *config);

/* @url as it may be shown in a message or a log: no piece of a password in it. */
char *rl_url_redact (const char *url);

#endif /* RL_URL_H */
