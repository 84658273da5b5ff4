/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* reply-map.h: one field of a RESP2 map, a flat array of names and values (name, value,
 * name, value…), the form in which CLUSTER SHARDS, SENTINEL MASTER and SENTINEL
 * REPLICAS answer a RESP2 client.
 *
 * Two libraries read such maps: the Cluster topology (cluster.c, CLUSTER SHARDS) and the
 * testing library's Sentinel deployment (testing/testsentinel.c, SENTINEL MASTER and
 * REPLICAS). Inline in a header, so that both compile the one copy and the production
 * library exports no private symbol for the other.
 */
#ifndef RL_REPLY_MAP_H
#define RL_REPLY_MAP_H

#include <string.h>
#include <hiredis/hiredis.h>

/* The value of field @name of @map, or NULL when @map is not an array or has no such
 * field. */
static inline const redisReply *
rl_reply_map_get (const redisReply *map, const char *name)
{
  if (map->type != REDIS_REPLY_ARRAY)
    return NULL;
  for (size_t i = 0; i + 1 < map->elements; i += 2)
    if (map->element[i]->type == REDIS_REPLY_STRING && strcmp (map->element[i]->str, name) == 0)
      return map->element[i + 1];
  return NULL;
}

#endif /* RL_REPLY_MAP_H */
