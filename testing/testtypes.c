/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testtypes.c: the GTypes of redislock-test.h, for GValues and language bindings.
 *
 * The test server is reference-counted so that a binding can hold it (the
 * RedislockTesting GIR and typelib): its boxed type copies by taking a reference and
 * frees by dropping one, as the registry's and the lock's do in ../types.c. Its TLS
 * flags and file kinds are a GFlags and a GEnum so that bindings see named values. The
 * Cluster and Sentinel handles are not reference-counted and have no GType: they are
 * not introspected. These types live in the testing library with the functions they
 * describe, so the production library registers no test type.
 */
#include "config.h"

#include <redislock/redislock-test.h>

G_DEFINE_BOXED_TYPE (RedisLockTestServer, redis_lock_test_server, redis_lock_test_server_ref,
                     redis_lock_test_server_free)

G_DEFINE_FLAGS_TYPE (RedisLockTestTlsFlags, redis_lock_test_tls_flags,
                     G_DEFINE_ENUM_VALUE (REDIS_LOCK_TEST_TLS_DEFAULT, "default"),
                     G_DEFINE_ENUM_VALUE (REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT,
                                          "require-client-cert"),
                     G_DEFINE_ENUM_VALUE (REDIS_LOCK_TEST_TLS_EXPIRED, "expired"))

G_DEFINE_ENUM_TYPE (RedisLockTestTlsFile, redis_lock_test_tls_file,
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_TEST_TLS_CA, "ca"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_TEST_TLS_CLIENT_CERT, "client-cert"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_TEST_TLS_CLIENT_KEY, "client-key"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_TEST_TLS_OTHER_CA, "other-ca"))
