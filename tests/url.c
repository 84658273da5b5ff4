/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* url.c: tests of the URL parser and its redaction (src/url.h).
 *
 * Every URL form a registry takes is read by rl_url_parse(): redis:// and unix:// (one
 * server, as rl_conn_config_parse() reads them), redis-sentinel:// (Sentinels and the
 * name of the master they watch) and redis-cluster:// (seed nodes). Good URLs are
 * checked field by field: hosts in the order given, default ports, IPv6 literals,
 * credentials of the data nodes and of the Sentinels, databases, a %-encoded master
 * name, the ?db=&password=&username= query of redis:// and rediss:// as of unix://, IPv6
 * addresses in brackets where a message shows an address. Bad URLs are INVALID with a
 * message that names the problem (and the place of a
 * bad host in a list). Whatever the URL, neither a message nor rl_url_redact() shows any
 * piece of its password. No server is needed: nothing here connects.
 */
#include "config.h"

#include <string.h>

#include "url.h"

/* The password of the URLs of the leak tests, in two halves that are checked apart. */
#define SECRET "s3cr3t-PW"

/* Parses @url, which must be good, into @parsed. */
static void
parse_ok (const char *url, RlUrl *parsed)
{
  g_autoptr (GError) error = NULL;

  if (!rl_url_parse (url, parsed, &error))
    g_error ("“%s” refused: %s", url, error->message);
  g_assert_nonnull (parsed->hosts);
}

static void
assert_config (const RlConnConfig *config, const char *host, int port, const char *username,
               const char *password, int db)
{
  g_assert_cmpstr (config->host, ==, host);
  g_assert_cmpint (config->port, ==, port);
  g_assert_null (config->path);
  g_assert_cmpstr (config->username, ==, username);
  g_assert_cmpstr (config->password, ==, password);
  g_assert_cmpint (config->db, ==, db);
}

static const RlConnConfig *
host_at (const RlUrl *parsed, guint i)
{
  g_assert_cmpuint (i, <, parsed->hosts->len);
  return &g_array_index (parsed->hosts, RlConnConfig, i);
}

/* Whether @text shows a piece of SECRET. */
static gboolean
shows_secret (const char *text)
{
  g_autofree char *lower = g_ascii_strdown (text, -1);

  return strstr (lower, "s3cr3t") != NULL || strstr (text, "PW") != NULL;
}

/* rl_url_parse (@url) fails with INVALID and a message containing @reason; neither the
 * message nor the redacted URL shows the password. */
static void
assert_refused (const char *url, const char *reason)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *shown = rl_url_redact (url);
  RlUrl parsed;

  g_assert_false (rl_url_parse (url, &parsed, &error));
  g_test_message ("%s: %s", url, error->message);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  if (strstr (error->message, reason) == NULL)
    g_error ("“%s”: the message “%s” does not say “%s”", url, error->message, reason);
  g_assert_nonnull (strstr (error->message, shown));
  g_assert_false (shows_secret (error->message));
  g_assert_false (shows_secret (shown));
  /* A failed parse leaves nothing to free, and clearing it again is harmless. */
  g_assert_null (parsed.hosts);
  g_assert_null (parsed.master_name);
  g_assert_null (parsed.node.host);
  rl_url_clear (&parsed);
}

static void
assert_redacted (const char *url, const char *expected)
{
  g_autofree char *shown = rl_url_redact (url);

  g_assert_cmpstr (shown, ==, expected);
}

/* --- One server ---------------------------------------------------------------------- */

static void
test_single (void)
{
  const char *urls[] = {
    "redis://h",
    "redis://:" SECRET "@127.0.0.1:7000/2",
    "redis://user:p%40ss@[::1]:7001/0",
    "REDIS://h:1",
    "unix:///tmp/r.sock?db=3&password=p%26w&username=u",
    "unix:///tmp/r.sock",
    "redis://h:7000?db=2&password=p%26w&username=u",
    "redis://u@h/3?password=" SECRET,
#ifdef RL_HAVE_GNUTLS
    "rediss://h?db=2&password=p%26w&username=u&sni=redis.example",
#endif
  };

  g_test_summary ("redis:// and unix:// are one server: `node` as rl_conn_config_parse() "
                  "fills it, no hosts, no master name.");
  for (gsize i = 0; i < G_N_ELEMENTS (urls); i++)
    {
      g_autoptr (GError) error = NULL;
      RlConnConfig expected;
      RlUrl parsed;

      g_assert_true (rl_conn_config_parse (urls[i], &expected, &error));
      g_assert_no_error (error);
      parse_ok (urls[i], &parsed);
      g_assert_cmpint (parsed.kind, ==, RL_TOPOLOGY_SINGLE);
      g_assert_cmpuint (parsed.hosts->len, ==, 0);
      g_assert_null (parsed.master_name);
      g_assert_cmpstr (parsed.node.host, ==, expected.host);
      g_assert_cmpint (parsed.node.port, ==, expected.port);
      g_assert_cmpstr (parsed.node.path, ==, expected.path);
      g_assert_cmpstr (parsed.node.username, ==, expected.username);
      g_assert_cmpstr (parsed.node.password, ==, expected.password);
      g_assert_cmpint (parsed.node.db, ==, expected.db);
      rl_conn_config_clear (&expected);
      rl_url_clear (&parsed);
      rl_url_clear (&parsed);
    }
}

static void
test_single_fields (void)
{
  RlUrl parsed;

  g_test_summary ("The fields of a redis:// and a unix:// URL.");
  parse_ok ("redis://:" SECRET "@127.0.0.1:7000/2", &parsed);
  assert_config (&parsed.node, "127.0.0.1", 7000, NULL, SECRET, 2);
  rl_url_clear (&parsed);

  parse_ok ("redis://user:p%40ss@[::1]/1", &parsed);
  assert_config (&parsed.node, "::1", 6379, "user", "p@ss", 1);
  rl_url_clear (&parsed);

  parse_ok ("unix:///tmp/r.sock?db=3&password=p%26w&username=u", &parsed);
  g_assert_cmpstr (parsed.node.path, ==, "/tmp/r.sock");
  g_assert_null (parsed.node.host);
  g_assert_cmpstr (parsed.node.username, ==, "u");
  g_assert_cmpstr (parsed.node.password, ==, "p&w");
  g_assert_cmpint (parsed.node.db, ==, 3);
  rl_url_clear (&parsed);

  /* redis:// and rediss:// take the query unix:// takes. */
  parse_ok ("redis://h:7000?db=2&password=p%26w%40&username=u", &parsed);
  assert_config (&parsed.node, "h", 7000, "u", "p&w@", 2);
  rl_url_clear (&parsed);

  parse_ok ("redis://u@[::1]/4?password=" SECRET, &parsed);
  assert_config (&parsed.node, "::1", 6379, "u", SECRET, 4);
  rl_url_clear (&parsed);

  parse_ok ("redis://:" SECRET "@h?db=5&username=alice", &parsed);
  assert_config (&parsed.node, "h", 6379, "alice", SECRET, 5);
  rl_url_clear (&parsed);

#ifdef RL_HAVE_GNUTLS
  parse_ok ("rediss://h:6380?db=1&password=pw&sni=redis.example", &parsed);
  assert_config (&parsed.node, "h", 6380, NULL, "pw", 1);
  g_assert_true (parsed.node.tls);
  g_assert_cmpstr (parsed.node.tls_sni, ==, "redis.example");
  rl_url_clear (&parsed);
#endif
}

/* --- Sentinel ------------------------------------------------------------------------ */

static void
test_sentinel_one_host (void)
{
  RlUrl parsed;

  g_test_summary ("redis-sentinel://HOST#MASTER: one Sentinel on port 26379, no credentials, "
                  "db 0.");
  parse_ok ("redis-sentinel://sentinel.example#mymaster", &parsed);
  g_assert_cmpint (parsed.kind, ==, RL_TOPOLOGY_SENTINEL);
  g_assert_cmpuint (parsed.hosts->len, ==, 1);
  assert_config (host_at (&parsed, 0), "sentinel.example", 26379, NULL, NULL, 0);
  assert_config (&parsed.node, NULL, 0, NULL, NULL, 0);
  g_assert_cmpstr (parsed.master_name, ==, "mymaster");
  rl_url_clear (&parsed);
}

static void
test_sentinel_several_hosts (void)
{
  RlUrl parsed;

  g_test_summary ("Several Sentinels in the order given, default and explicit ports, IPv6, "
                  "the data nodes' credentials and db, the Sentinels' credentials from the "
                  "query, a %-encoded master name.");
  parse_ok ("redis-sentinel://user:" SECRET "@s1:26380,s2,[::1]:26381,[fe80::1%25lo]/3"
            "?sentinel_password=sp%26w&sentinel_username=su#my%20master%2F1",
            &parsed);
  g_assert_cmpint (parsed.kind, ==, RL_TOPOLOGY_SENTINEL);
  g_assert_cmpuint (parsed.hosts->len, ==, 4);
  assert_config (host_at (&parsed, 0), "s1", 26380, "su", "sp&w", 0);
  assert_config (host_at (&parsed, 1), "s2", 26379, "su", "sp&w", 0);
  assert_config (host_at (&parsed, 2), "::1", 26381, "su", "sp&w", 0);
  assert_config (host_at (&parsed, 3), "fe80::1%lo", 26379, "su", "sp&w", 0);
  assert_config (&parsed.node, NULL, 0, "user", SECRET, 3);
  g_assert_cmpstr (parsed.master_name, ==, "my master/1");
  rl_url_clear (&parsed);

  parse_ok ("REDIS-SENTINEL://:p%2C%3F%23%2F%40@a:1,b:2/?sentinel_password=x#m", &parsed);
  g_assert_cmpuint (parsed.hosts->len, ==, 2);
  assert_config (host_at (&parsed, 0), "a", 1, NULL, "x", 0);
  assert_config (host_at (&parsed, 1), "b", 2, NULL, "x", 0);
  assert_config (&parsed.node, NULL, 0, NULL, "p,?#/@", 0);
  g_assert_cmpstr (parsed.master_name, ==, "m");
  rl_url_clear (&parsed);
}

static void
test_sentinel_raw_comma_in_password (void)
{
  RlUrl parsed;

  g_test_summary ("A raw “,” in the user info does not split the host list.");
  parse_ok ("redis-sentinel://u:a,b@h1,h2#m", &parsed);
  g_assert_cmpuint (parsed.hosts->len, ==, 2);
  g_assert_cmpstr (parsed.node.password, ==, "a,b");
  rl_url_clear (&parsed);
}

/* --- Cluster ------------------------------------------------------------------------- */

static void
test_cluster (void)
{
  RlUrl parsed;

  g_test_summary ("redis-cluster://: seeds in the order given, port 6379 by default, the "
                  "credentials in each seed and in `node`, db 0 (“/0” allowed).");
  parse_ok ("redis-cluster://seed", &parsed);
  g_assert_cmpint (parsed.kind, ==, RL_TOPOLOGY_CLUSTER);
  g_assert_cmpuint (parsed.hosts->len, ==, 1);
  assert_config (host_at (&parsed, 0), "seed", 6379, NULL, NULL, 0);
  assert_config (&parsed.node, NULL, 0, NULL, NULL, 0);
  g_assert_null (parsed.master_name);
  rl_url_clear (&parsed);

  parse_ok ("redis-cluster://alice:" SECRET "@10.0.0.1:7000,10.0.0.2,[::1]:7002/0", &parsed);
  g_assert_cmpuint (parsed.hosts->len, ==, 3);
  assert_config (host_at (&parsed, 0), "10.0.0.1", 7000, "alice", SECRET, 0);
  assert_config (host_at (&parsed, 1), "10.0.0.2", 6379, "alice", SECRET, 0);
  assert_config (host_at (&parsed, 2), "::1", 7002, "alice", SECRET, 0);
  assert_config (&parsed.node, NULL, 0, "alice", SECRET, 0);
  rl_url_clear (&parsed);

  parse_ok ("Redis-Cluster://:pw@h:1/", &parsed);
  assert_config (host_at (&parsed, 0), "h", 1, NULL, "pw", 0);
  assert_config (&parsed.node, NULL, 0, NULL, "pw", 0);
  rl_url_clear (&parsed);
}

static void
test_copy (void)
{
  RlConnConfig config = { .host = g_strdup ("h"),
                          .port = 7,
                          .username = g_strdup ("u"),
                          .password = g_strdup ("p"),
                          .db = 4 };
  RlConnConfig copy;

  g_test_summary ("rl_conn_config_copy() copies every field deeply.");
  rl_conn_config_copy (&config, &copy);
  rl_conn_config_clear (&config);
  assert_config (&copy, "h", 7, "u", "p", 4);
  rl_conn_config_clear (&copy);

  config = (RlConnConfig){ .path = g_strdup ("/tmp/r.sock") };
  rl_conn_config_copy (&config, &copy);
  rl_conn_config_clear (&config);
  g_assert_cmpstr (copy.path, ==, "/tmp/r.sock");
  g_assert_null (copy.host);
  g_assert_null (copy.username);
  rl_conn_config_clear (&copy);
}

/* --- Bad input ----------------------------------------------------------------------- */

typedef struct
{
  const char *url;
  const char *reason; /* a piece of the message */
} BadUrl;

static const BadUrl bad_urls[] = {
  /* Sentinel: a master name is required. */
  { "redis-sentinel://h1", "no master name" },
  { "redis-sentinel://h1#", "no master name" },
  { "redis-sentinel://h1?sentinel_password=" SECRET, "no master name" },
  { "redis-sentinel://h1#m%01", "control characters" },
  /* Empty hosts. */
  { "redis-sentinel://#m", "no host" },
  { "redis-sentinel://:" SECRET "@/0#m", "no host" },
  { "redis-cluster://", "no host" },
  { "redis-cluster://:7000", "no host" },
  { "redis-cluster://h1,,h2", "the 2nd host is empty" },
  { "redis-cluster://h1,", "the 2nd host is empty" },
  { "redis-cluster://,h1", "the 1st host is empty" },
  { "redis-cluster://h1,h2,:7000", "the 3rd host is empty" },
  { "redis-cluster://1,2,3,4,5,6,7,8,9,10,11,", "the 12th host is empty" },
  { "redis-cluster://1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,",
    "the 21st host is empty" },
  /* Ports. */
  { "redis-cluster://h1:7000,h2:0", "the port of the 2nd host is not a number from 1 to 65535" },
  { "redis-cluster://h1:65536,h2", "the port of the 1st host is not a number" },
  { "redis-cluster://h1,h2:x", "the port of the 2nd host is not a number" },
  { "redis-sentinel://h1:-1#m", "the port of the host is not a number" },
  { "redis-cluster://h1,::1", "the port of the 2nd host is not a number" },
  { "redis-cluster://h1:1:2", "the port of the host is not a number" },
  /* Hosts. */
  { "redis-cluster://[::1:7000", "the host is not valid" },
  { "redis-cluster://h1,[::1", "the 2nd host is not valid" },
  { "redis-cluster://h1,h%202", "the 2nd host contains white space or control characters" },
  { "redis-cluster://h%zz", "the host is not valid (a host name, or an IPv6 address in brackets)" },
  /* A raw "@", "/", "?" or "#" in a password. */
  { "redis-cluster://u:" SECRET "@x@h1", "the host contains “@”" },
  { "redis-cluster://u:" SECRET "/x@h1", "the port of the host is not a number" },
  { "redis-sentinel://u:" SECRET "?x@h1#m", "the port of the host is not a number" },
  { "redis-sentinel://u:" SECRET "#x@h1", "the port of the host is not a number" },
  { "redis-cluster://u:s3cr3t%zz-PW@h1", "the user name or password is not valid" },
  /* Databases. */
  { "redis-cluster://h/1", "a Redis Cluster has only database 0" },
  { "redis-cluster://h/x", "the database is not a number" },
  { "redis-sentinel://h/0/1#m", "the database is not a number" },
  { "redis-sentinel://:" SECRET "@h/" SECRET "#m", "the database is not a number" },
  /* Queries and fragments. */
  { "redis-cluster://h?password=" SECRET, "redis-cluster:// URLs take no query or fragment" },
  { "redis-cluster://h#top", "redis-cluster:// URLs take no query or fragment" },
  { "redis-sentinel://h?colour=blue#m",
    "an unknown parameter (accepted: sentinel_password, sentinel_username)" },
  { "redis-sentinel://h?password=" SECRET "#m", "an unknown parameter" },
  { "redis-sentinel://h?SENTINEL_PASSWORD=" SECRET "#m",
    "unknown parameter “SENTINEL_PASSWORD” (names are lower case)" },
  { "redis-sentinel://h?sentinel_password=" SECRET "&" SECRET "#m",
    "the query is not NAME=VALUE pairs" },
  { "redis-sentinel://h?sentinel_password=s3cr3t&PW=1#m", "an unknown parameter" },
  { "redis-sentinel://h?sentinel_password=a&sentinel_password=b#m", "more than once" },
  { "redis-sentinel://h?sentinel_password=" SECRET "%zz#m", "the query is not valid" },
  /* TLS. */
  { "rediss://:" SECRET "@h?ca=/nonexistent/ca.pem", "the file named by ca= cannot be read" },
  { "rediss://h?cert=/etc/hostname", "a client certificate needs both cert= and key=" },
  { "rediss://h?ca=", "the file named by ca= cannot be read (empty name)" },
  { "rediss://h?sni=a%20b", "sni= is not a host name" },
  { "rediss://h?colour=blue",
    "an unknown parameter (accepted: ca, cert, db, key, password, sni, username)" },
  { "rediss://h#x", "rediss:// URLs take no fragment" },
  { "rediss-sentinel://:" SECRET "@h?key=/nonexistent#m", "the file named by key= cannot be read" },
  { "rediss-cluster://h1,h2?colour=blue", "an unknown parameter (accepted: ca, cert, key, sni)" },
  { "redis-cluster://h1?ca=/etc/hostname", "redis-cluster:// URLs take no query or fragment" },
  /* Schemes. */
  { "redis-cluster:h1", "not a valid absolute URL" },
#ifdef RL_HAVE_GNUTLS
  { "http://h", "unsupported scheme “http” (expected redis://, rediss://, unix://, "
                "redis-sentinel://, rediss-sentinel://, redis-cluster://, rediss-cluster:// or "
                "memory://)" },
#else
  { "http://h", "unsupported scheme “http” (expected redis://, unix://, redis-sentinel://, "
                "redis-cluster:// or memory://)" },
#endif
  { "", "not a" },
  /* redis:// and unix:// as before. */
  { "redis://", "no host" },
  { "redis://h:0", "port 0" },
  { "redis://h#top", "redis:// URLs take no fragment" },
  { "redis://h/0?db=1", "the database is given twice (in the path and as db=)" },
  { "redis://:" SECRET "@h?password=" SECRET, "the password is given twice" },
  { "redis://u@h?username=v", "the user name is given twice" },
  { "redis://h?colour=blue", "an unknown parameter (accepted: db, password, username)" },
  { "redis://h?db=" SECRET, "the database is not a number" },
  { "redis://h?PASSWORD=" SECRET, "unknown parameter “PASSWORD” (names are lower case)" },
  { "redis://h?password=s3cr3t@PW", "an “@” after the host" },
  { "redis://u:s3cr3t?PW@h", "the port is not a number" },
  { "unix:///tmp/r.sock?colour=blue", "an unknown parameter (accepted: db, password, username)" },
  { "unix:///tmp/r.sock?PASSWORD=" SECRET, "unknown parameter “PASSWORD” (names are lower case)" },
  { "unix:///tmp/r.sock?db=1&db=2", "more than once" },
};

static void
test_bad (gconstpointer data)
{
  const BadUrl *bad = data;

  assert_refused (bad->url, bad->reason);
}

static void
test_conn_config_refuses_deployments (void)
{
  const char *urls[] = {
    "redis-sentinel://h#m",
    "redis-cluster://h1,h2",
    "redis-cluster://:" SECRET "@h1:1:2",
  };

  g_test_summary ("rl_conn_config_parse() takes one server: a Sentinel or Cluster URL, "
                  "rediss forms included, is INVALID, naming a deployment.");
  for (gsize i = 0; i < G_N_ELEMENTS (urls); i++)
    {
      g_autoptr (GError) error = NULL;
      RlConnConfig config;

      g_assert_false (rl_conn_config_parse (urls[i], &config, &error));
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_assert_nonnull (strstr (error->message, "names a deployment, not one server"));
      g_assert_false (shows_secret (error->message));
      g_assert_null (config.host);
    }
  {
    g_autoptr (GError) error = NULL;
    RlConnConfig config;

    g_assert_false (rl_conn_config_parse ("rediss-cluster://h", &config, &error));
    g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
    g_assert_nonnull (strstr (error->message, "names a deployment, not one server"));
  }
  {
    g_autoptr (GError) error = NULL;
    RlConnConfig config;

    g_assert_false (rl_conn_config_parse ("http://h", &config, &error));
#ifdef RL_HAVE_GNUTLS
    g_assert_nonnull (strstr (error->message, "(expected redis://, rediss:// or unix://)"));
#else
    g_assert_nonnull (strstr (error->message, "(expected redis:// or unix://)"));
#endif
  }
}

/* --- Redaction ----------------------------------------------------------------------- */

static void
test_redact (void)
{
  g_test_summary ("rl_url_redact() on the deployment forms: scheme, plain hosts and ports, db, "
                  "the names of known parameters, a plain master name when no query precedes "
                  "it; the user info is “***”.");
  assert_redacted ("redis-sentinel://s1:26380,s2,[::1]:26381/3#mymaster",
                   "redis-sentinel://s1:26380,s2,[::1]:26381/3#mymaster");
  assert_redacted ("redis-sentinel://user:" SECRET "@s1#my-master.2_b",
                   "redis-sentinel://***@s1#my-master.2_b");
  assert_redacted ("redis-sentinel://s1#my%20master", "redis-sentinel://s1#***");
  assert_redacted ("redis-sentinel://:" SECRET "@s1,s2/0?sentinel_password=" SECRET
                   "&sentinel_username=u#mymaster",
                   "redis-sentinel://***@s1,s2/0?sentinel_password=***&sentinel_username=***#***");
  assert_redacted ("redis-sentinel://s1?" SECRET "=1&db=2#m", "redis-sentinel://s1?***&***#***");
  assert_redacted ("redis-cluster://u:" SECRET "@10.0.0.1:7000,10.0.0.2",
                   "redis-cluster://***@10.0.0.1:7000,10.0.0.2");
  assert_redacted ("redis-cluster://h1,,h2,", "redis-cluster://h1,,h2,");
  assert_redacted ("redis-cluster://h%2B1,h2", "redis-cluster://***,h2");
  assert_redacted ("redis-cluster://h/" SECRET "?password=" SECRET "#" SECRET,
                   "redis-cluster://h/***?***#***");
  assert_redacted ("REDIS-CLUSTER://h", "redis-cluster://h");
  assert_redacted ("rediss-cluster://:" SECRET "@h1,h2", "rediss-cluster://***@h1,h2");
  assert_redacted ("rediss://:" SECRET "@h:6380?ca=/etc/ca.pem&sni=redis.example",
                   "rediss://***@h:6380?ca=***&sni=***");
  assert_redacted ("rediss-cluster://h1,h2?ca=/x&" SECRET "=1", "rediss-cluster://h1,h2?ca=***&***");
  assert_redacted ("redis-cluster:" SECRET, "redis-cluster:***");
  /* Whatever GUri or the host list cannot read shows nothing after the scheme. */
  assert_redacted ("redis-cluster://h1:" SECRET ",h2", "redis-cluster://***");
  assert_redacted ("redis-cluster://u:" SECRET "@x@h1", "redis-cluster://***");
  assert_redacted ("redis-sentinel://" SECRET "%zz@h#m", "redis-sentinel://***");
  /* An "@" after the authority: a user info cut short by a raw "#", "/" or "?". */
  assert_redacted ("redis-sentinel://s3cr3t#PW@h1", "redis-sentinel://***");
  assert_redacted ("redis://s3cr3t#PW@h1", "redis://***");
  assert_redacted ("redis://s3cr3t/PW@h1", "redis://***");
  /* redis:// and unix:// as before. */
  assert_redacted ("redis://:" SECRET "@h:1/2", "redis://***@h:1/2");
  assert_redacted ("unix:///tmp/r.sock?db=2&password=" SECRET,
                   "unix:///tmp/r.sock?db=2&password=***");
  assert_redacted ("redis://[::1]:7000?db=2&password=" SECRET "&username=u",
                   "redis://[::1]:7000?db=2&password=***&username=***");
  assert_redacted ("rediss://h?db=2&password=" SECRET, "rediss://h?db=2&password=***");
}

static void
test_describe (void)
{
  static const struct
  {
    const char *url;
    const char *shown;
  } cases[] = {
    { "redis://127.0.0.1:7000", "127.0.0.1:7000" },
    { "redis://[::1]:7000", "[::1]:7000" },
    { "redis://[::1]", "[::1]:6379" },
    { "redis://[fe80::1%25lo]:1", "the host of the URL, port 1" },
    { "redis://redis.example/2?password=" SECRET, "redis.example:6379" },
    { "unix:///tmp/r.sock?password=" SECRET, "/tmp/r.sock" },
  };

  g_test_summary ("rl_conn_config_describe() shows where a URL points as messages give it: "
                  "HOST:PORT, an IPv6 address in brackets, the socket path.");
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr (GError) error = NULL;
      g_autofree char *shown = NULL;
      RlConnConfig config;

      g_assert_true (rl_conn_config_parse (cases[i].url, &config, &error));
      g_assert_no_error (error);
      shown = rl_conn_config_describe (&config);
      g_assert_cmpstr (shown, ==, cases[i].shown);
      rl_conn_config_clear (&config);
    }
}

/* URLs with the password everywhere it may end up, good and bad. */
static const char *const secret_urls[] = {
  "redis-sentinel://:" SECRET "@h1,h2#m",
  "redis-sentinel://" SECRET "@h1,h2#m",
  "redis-sentinel://u:" SECRET "@h1,h2/1?sentinel_password=" SECRET "#m",
  "redis-sentinel://h1?sentinel_password=s3cr3t#PW",
  "redis-sentinel://h1?sentinel_password=s3cr3t&PW#m",
  "redis-sentinel://h1?sentinel_password=s3cr3t=PW#m",
  "redis-sentinel://h1?sentinel_username=s3cr3t&sentinel_password=PW#m",
  "redis-sentinel://u:s3cr3t#PW@h1#m",
  "redis-sentinel://s3cr3t#PW@h1",
  "redis-sentinel://u:s3cr3t/PW@h1#m",
  "redis-sentinel://u:s3cr3t?PW@h1#m",
  "redis-sentinel://u:s3cr3t@PW@h1#m",
  "redis-sentinel://u:s3cr3t,PW@h1,h2#m",
  "redis-sentinel://u:s3cr3t:PW@h1#m",
  "redis-sentinel://:" SECRET "@h1:99999#m",
  "redis-sentinel://:" SECRET "@h1,,h2#m",
  "redis-sentinel://:" SECRET "@h1",
  "redis-sentinel://:s3cr3t%00PW@h1#m",
  "redis-sentinel://:s3cr3t%zzPW@h1#m",
  "redis-cluster://:" SECRET "@h1,h2",
  "redis-cluster://" SECRET "@h1",
  "redis-cluster://u:s3cr3t#PW@h1,h2",
  "redis-cluster://u:s3cr3t/PW@h1,h2",
  "redis-cluster://u:s3cr3t?PW@h1,h2",
  "redis-cluster://u:s3cr3t@PW@h1,h2",
  "redis-cluster://h1,u:s3cr3t@PW@h2",
  "redis-cluster://:" SECRET "@h1/1",
  "redis-cluster://:" SECRET "@h1?x=1",
  "redis-cluster://:" SECRET "@h1:0",
  "redis-cluster://:" SECRET "@[::1",
  "rediss-sentinel://:" SECRET "@h1#m",
  "rediss-cluster://:" SECRET "@h1,h2",
  "redis://:" SECRET "@h1,h2:1",
  "redis://s3cr3t#PW@h1",
  "redis://u:s3cr3t#PW@h1",
  "unix:///tmp/r.sock?password=s3cr3t#PW",
  "redis://h?password=" SECRET,
  "redis://h?password=s3cr3t&PW",
  "redis://h?password=s3cr3t#PW",
  "redis://h?password=s3cr3t@PW",
  "redis://h/1?db=2&password=" SECRET,
  "rediss://h?password=s3cr3t&PW=1",
  "unix:///tmp/r.sock?password=s3cr3t&PW",
};

static void
test_password_never_shown (void)
{
  g_test_summary ("Neither the message of a refused URL nor the redacted URL shows any piece "
                  "of its password.");
  for (gsize i = 0; i < G_N_ELEMENTS (secret_urls); i++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (GError) single_error = NULL;
      g_autofree char *shown = rl_url_redact (secret_urls[i]);
      RlConnConfig config;
      RlUrl parsed;

      g_test_message ("%s -> %s", secret_urls[i], shown);
      if (shows_secret (shown))
        g_error ("URL %" G_GSIZE_FORMAT " shows its password redacted: %s", i, shown);
      if (rl_url_parse (secret_urls[i], &parsed, &error))
        rl_url_clear (&parsed);
      else if (shows_secret (error->message))
        g_error ("URL %" G_GSIZE_FORMAT " shows its password: %s", i, error->message);
      if (rl_conn_config_parse (secret_urls[i], &config, &single_error))
        rl_conn_config_clear (&config);
      else if (shows_secret (single_error->message))
        g_error ("URL %" G_GSIZE_FORMAT " shows its password: %s", i, single_error->message);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/url/single/same-as-conn-config", test_single);
  g_test_add_func ("/url/single/fields", test_single_fields);
  g_test_add_func ("/url/sentinel/one-host", test_sentinel_one_host);
  g_test_add_func ("/url/sentinel/several-hosts", test_sentinel_several_hosts);
  g_test_add_func ("/url/sentinel/raw-comma-in-password", test_sentinel_raw_comma_in_password);
  g_test_add_func ("/url/cluster/seeds", test_cluster);
  g_test_add_func ("/url/conn-config/copy", test_copy);
  g_test_add_func ("/url/conn-config/refuses-deployments", test_conn_config_refuses_deployments);
  g_test_add_func ("/url/conn-config/describe", test_describe);
  for (gsize i = 0; i < G_N_ELEMENTS (bad_urls); i++)
    {
      g_autofree char *path = g_strdup_printf ("/url/invalid/%02" G_GSIZE_FORMAT, i);

      g_test_add_data_func (path, &bad_urls[i], test_bad);
    }
  g_test_add_func ("/url/redact/deployments", test_redact);
  g_test_add_func ("/url/redact/password-never-shown", test_password_never_shown);
  return g_test_run ();
}
