package db_test

// Tests of the API cache's store (sql/cache/01_store.sql): the configuration (the seed's format,
// errors naming the key), storing with xx and nx, stale stores refused, invalidation by path and
// session, and by the profile store's writes.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestCacheConfigAndStore(t *testing.T) {
	tx := dbtest.Tx(t)
	ctx := context.Background()
	q := db.New(tx)
	str := func(sql string, args ...any) string {
		t.Helper()
		var s string
		require.NoError(t, tx.QueryRow(ctx, sql, args...).Scan(&s))
		return s
	}
	err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).CacheConfigLoad(ctx, []byte(`{"GET/posts/": {"defaults": {"action": "cache", "session": "<bool>", "expires": "5000 ms"}}}`))
		return err
	})
	require.Error(t, err) // "<bool>" is the seed's placeholder, not a value
	require.Contains(t, err.Error(), "GET/posts/.defaults.session: must be true or false")
	for doc, want := range map[string]string{
		`{"posts": {}}`: "an endpoint must be written <METHOD>/path/",
		`{"GET/posts": {"defaults": {"expires": 0}}}`:                                 "GET/posts.defaults.expires",
		`{"GET/posts": {"defaults": {"xx": true, "nx": true}}}`:                       "xx and nx exclude each other",
		`{"GET/posts": {"overrides": {"rules": [{"rule": "type"}]}}}`:                 "GET/posts.overrides.rules[1].rule",
		`{"GET/posts": {"overrides": {"rules": [{"rule": "a:1&a:2"}]}}}`:              "appears twice",
		`{"GET/posts": {"defaults": {"action": "delete"}}}`:                           "GET/posts.defaults.action",
		`{"GET/posts": {"overrides": {"rules": [{"rule": "a:1", "colour": "red"}]}}}`: "overrides.rules[1].colour: unknown setting",
	} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error { _, err := db.New(tx).CacheConfigLoad(ctx, []byte(doc)); return err })
		require.ErrorContains(t, err, want, doc)
		require.ErrorContains(t, err, "SCCFG", doc)
	}
	_, err = q.CacheConfigLoad(ctx, []byte(`{"GET/posts/{id}/": {"defaults": {"action": "cache", "session": "true", "expires": "5000 ms"},
		"overrides": {"rules": [{"rule": "type:User,Group&id:*&access_token:*", "action": "invalidate"}]}}}`))
	require.NoError(t, err)
	require.Equal(t, `GET /posts/{id} cache true 5000 [{"nx": null, "xx": null, "rule": "type:User,Group&id:*&access_token:*", "action": "invalidate", "params": {"id": "*", "type": ["Group", "User"]}, "session": null, "expires_ms": null}]`,
		str(`SELECT concat_ws(' ', method, path, action, session::text, expires_ms, rules) FROM api.cache_rules`))

	put := func(key, path, session string, since time.Time, xx, nx bool) bool {
		t.Helper()
		ok, err := q.CachePut(ctx, db.CachePutParams{Key: key, Path: path, Session: session, Status: 200, ContentType: "application/json",
			Body: []byte(`{}`), Etag: `"e"`, ExpiresMs: 60000, Since: since, Xx: xx, Nx: nx})
		require.NoError(t, err)
		return ok
	}
	now := time.Now()
	require.False(t, put("k1", "/posts/1", "", now, true, false), "xx: only over an entry")
	require.True(t, put("k1", "/posts/1", "", now, false, true), "nx: no entry yet")
	require.False(t, put("k1", "/posts/1", "", now, false, true), "nx: there is one")
	require.True(t, put("k1", "/posts/1", "", now, true, false), "xx: there is one")
	require.True(t, put("k2", "/posts/1/comments", "s-a", now, false, false))
	require.True(t, put("k3", "/posts/1/comments", "s-b", now, false, false))
	require.True(t, put("k4", "/posts/10", "", now, false, false))
	got, err := q.CacheGet(ctx, "k1")
	require.NoError(t, err)
	require.Len(t, got, 1)

	// A session's invalidation drops its entries only; a path's drops the paths under it, not
	// /posts/10.
	_, err = tx.Exec(ctx, `SELECT cache_private.invalidate('/posts/1', 's-a')`)
	require.NoError(t, err)
	require.Equal(t, "k1 k3 k4", str(`SELECT string_agg(key, ' ' ORDER BY key) FROM cache.entries`))
	n, err := q.CacheInvalidate(ctx, db.CacheInvalidateParams{Path: "/posts/1"})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.Equal(t, "k4", str(`SELECT string_agg(key, ' ' ORDER BY key) FROM cache.entries`))
	// A response computed before that invalidation is not stored after it.
	require.False(t, put("k5", "/posts/1", "", now, false, false))
	require.True(t, put("k5", "/posts/1", "", time.Now().Add(time.Second), false, false))
}
