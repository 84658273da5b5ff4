/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* key-slot.h: the Redis Cluster slot of a key, the cluster specification's HASH_SLOT:
 * CRC16-XMODEM of the key (or of its hash tag, what lies between the first '{' and the
 * first '}' after it, when something does) modulo 16384.
 *
 * Two libraries need it: the Cluster topology routes every command by it (cluster.c),
 * and the testing library answers redis_lock_test_cluster_key_slot() with it
 * (testing/testcluster.c). Inline in a header, so that both compile the one copy and
 * the production library exports no private symbol for the other.
 */
#ifndef RL_KEY_SLOT_H
#define RL_KEY_SLOT_H

#include <string.h>
#include <glib.h>

#define RL_CLUSTER_SLOTS 16384

/* CRC16-XMODEM (polynomial 0x1021, initial value 0) of @len bytes at @data. */
static inline guint16
rl_crc16_xmodem (const char *data, gsize len)
{
  guint16 crc = 0;

  for (gsize i = 0; i < len; i++)
    {
      crc ^= (guint16) ((guint8) data[i] << 8);
      for (int bit = 0; bit < 8; bit++)
        crc = (crc & 0x8000) != 0 ? (guint16) ((crc << 1) ^ 0x1021) : (guint16) (crc << 1);
    }
  return crc;
}

/* The slot of @key. */
static inline guint
rl_key_slot (const char *key)
{
  const char *open = strchr (key, '{');
  gsize len = strlen (key);

  if (open != NULL)
    {
      const char *close = strchr (open + 1, '}');
      if (close != NULL && close > open + 1)
        {
          key = open + 1;
          len = (gsize) (close - open - 1);
        }
    }
  return rl_crc16_xmodem (key, len) & (RL_CLUSTER_SLOTS - 1);
}

#endif /* RL_KEY_SLOT_H */
