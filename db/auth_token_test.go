package db_test

// Tests of access tokens (sql/auth/01_token.sql): who api.token_authenticate lets in, and what
// it may read and do.

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// A request without a token is refused unless an operator turned anonymous reads on; tokens are
// not affected by the setting.
func TestTokenAuthenticateAnonymous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	tok, err := q.TokenCreate(ctx, db.TokenCreateParams{Name: "anon-test", Roles: []string{"vip"}})
	require.NoError(t, err)
	authenticate := func(token *string) (db.TokenAuthenticateRow, error) {
		var row db.TokenAuthenticateRow
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			var err error
			row, err = db.New(tx).TokenAuthenticate(ctx, token)
			return err
		})
		return row, err
	}
	empty := ""
	set := func(value string) error {
		return dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = $1 WHERE key = 'auth.anonymous_reads'`, value)
			return err
		})
	}

	// The default, as the migration installs it.
	var value, description string
	require.NoError(t, tx.QueryRow(ctx, `SELECT value, description FROM silo.settings WHERE key = 'auth.anonymous_reads'`).Scan(&value, &description))
	require.Equal(t, "false", value)
	require.NotEmpty(t, description)
	for _, token := range []*string{nil, &empty} {
		_, err := authenticate(token)
		pgErr := readRequireCode(t, err, "SLAUT")
		require.Equal(t, "an access token is required", pgErr.Message)
		require.Contains(t, pgErr.Hint, "auth.anonymous_reads")
	}
	id, err := authenticate(&tok.Token)
	require.NoError(t, err)
	require.Equal(t, []string{"_all", "_auth", "vip"}, id.Readers)

	// Turned on: the anonymous identity, which reads _all only and can do nothing else.
	require.NoError(t, set("true"))
	for _, token := range []*string{nil, &empty} {
		id, err := authenticate(token)
		require.NoError(t, err)
		require.Equal(t, db.TokenAuthenticateRow{Readers: []string{"_all"}}, id)
	}
	id, err = authenticate(&tok.Token)
	require.NoError(t, err)
	require.Equal(t, tok.ID, *id.TokenID)
	bad := "silo_unknown"
	_, err = authenticate(&bad)
	requireSQLState(t, err, "SLAUT")

	// Only true and false: a mistyped value fails the UPDATE rather than meaning either.
	for _, v := range []string{"yes", "TRUE", "on", ""} {
		requireSQLState(t, set(v), "23514")
	}
	// Turned off again, or the row deleted: refused.
	require.NoError(t, set("false"))
	_, err = authenticate(nil)
	requireSQLState(t, err, "SLAUT")
	require.NoError(t, set("true"))
	_, err = tx.Exec(ctx, `DELETE FROM silo.settings WHERE key = 'auth.anonymous_reads'`)
	require.NoError(t, err)
	_, err = authenticate(nil)
	requireSQLState(t, err, "SLAUT")
}
