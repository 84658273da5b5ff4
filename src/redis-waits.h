/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-waits.h: the Redis side of the waits-for records (see redis-waits.c). */
#ifndef RL_REDIS_WAITS_H
#define RL_REDIS_WAITS_H

#include <glib.h>

struct redisReply;

/* The WAITS script (its text, for the store's script cache). */
extern const char rl_redis_waits_script[];

/* Fills @argv (8 entries, EVALSHA line with the script's slots argv[0..1] left for the
 * caller) for RlStoreVTable.waits_update on the hash @key; @ttl_text is a buffer of
 * 24 bytes the caller keeps until the call is sent. */
void rl_redis_waits_argv (const char *argv[8], const char *key, const char *id,
                          const char *record, gint64 ttl_ms, gboolean read,
                          char ttl_text[24]);

/* Appends the records of the script's @reply (an array of strings) to @records (NULL:
 * ignored). FALSE with @error when the reply is not such an array. */
gboolean rl_redis_waits_read_reply (const struct redisReply *reply, GPtrArray *records,
                                    GError **error);

#endif /* RL_REDIS_WAITS_H */
