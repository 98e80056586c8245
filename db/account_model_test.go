package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

type accountBundle struct {
	ctx      context.Context
	tx       pgx.Tx
	q        *db.Queries
	personal string // alice's personal access id
	token    string // its token
}

func accountSetup(t *testing.T) *accountBundle {
	t.Helper()
	b := &accountBundle{ctx: context.Background(), tx: dbtest.Tx(t)}
	b.q = db.New(b.tx)
	row, err := b.q.AccountUserCreate(b.ctx, db.AccountUserCreateParams{Username: "alice", AccessName: "silo"})
	require.NoError(t, err)
	b.personal, b.token = row.AccessID, row.Token
	return b
}

// call runs one operation in a savepoint and decodes its body.
func (b *accountBundle) call(t *testing.T, fn func(q *db.Queries) (json.RawMessage, error)) (map[string]any, error) {
	t.Helper()
	var out map[string]any
	err := dbtest.Savepoint(t, b.tx, func(tx pgx.Tx) error {
		raw, err := fn(db.New(tx))
		if err != nil {
			return err
		}
		return json.Unmarshal(raw, &out)
	})
	return out, err
}

func (b *accountBundle) must(t *testing.T, fn func(q *db.Queries) (json.RawMessage, error)) map[string]any {
	t.Helper()
	out, err := b.call(t, fn)
	require.NoError(t, err)
	return out
}

func accountCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v", code, err)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

func (b *accountBundle) stream(t *testing.T, by, body string) (map[string]any, error) {
	return b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountStreamCreate(b.ctx, db.AccountStreamCreateParams{AccessID: by, Stream: json.RawMessage(body)})
	})
}

func (b *accountBundle) event(t *testing.T, by, body string) (map[string]any, error) {
	return b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountEventCreate(b.ctx, db.AccountEventCreateParams{AccessID: by, Event: json.RawMessage(body)})
	})
}

// app creates an app access with the given permissions and returns its id.
func (b *accountBundle) app(t *testing.T, by, body string) (string, error) {
	out, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountAccessCreate(b.ctx, db.AccountAccessCreateParams{AccessID: by, Access: json.RawMessage(body)})
	})
	if err != nil {
		return "", err
	}
	return out["access"].(map[string]any)["id"].(string), nil
}

func (b *accountBundle) events(t *testing.T, p db.AccountEventsGetParams) []map[string]any {
	t.Helper()
	if p.State == "" {
		p.State = "default"
	}
	out := b.must(t, func(q *db.Queries) (json.RawMessage, error) { return q.AccountEventsGet(b.ctx, p) })
	var list []map[string]any
	for _, e := range out["events"].([]any) {
		list = append(list, e.(map[string]any))
	}
	return list
}

func eventIDs(list []map[string]any) []string {
	ids := []string{}
	for _, e := range list {
		ids = append(ids, e["id"].(string))
	}
	return ids
}

// The tree every test below starts from: diary > heart > ecg, and work.
func (b *accountBundle) tree(t *testing.T) {
	t.Helper()
	for _, s := range []string{`{"id": "diary", "name": "Diary"}`, `{"id": "heart", "name": "Heart", "parentId": "diary"}`,
		`{"id": "ecg", "name": "ECG", "parentId": "heart"}`, `{"id": "work", "name": "Work"}`} {
		_, err := b.stream(t, b.personal, s)
		require.NoError(t, err)
	}
}

func TestAccountUsernames(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	create := func(name string) error {
		return dbtest.Savepoint(t, b.tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).AccountUserCreate(b.ctx, db.AccountUserCreateParams{Username: name, AccessName: "silo"})
			return err
		})
	}
	for _, ok := range []string{"bob-1", "12345", "a-very-long-but-fine-name", "abcde"} {
		require.NoError(t, create(ok), ok)
	}
	for _, bad := range []string{"abcd", "Alice", "-abcde", "abcde-", "ab_cd", "ab cd", "", "x123456789012345678901234567890123456789012345678901234567890"} {
		accountCode(t, create(bad), "SAUSR")
	}
	for _, reserved := range []string{"events", "profiles", "profile-updates", "dead-letters", "healthz", "readyz", "metrics", "belts", "series", "system"} {
		err := create(reserved)
		accountCode(t, err, "SAUSR")
		require.Contains(t, err.Error(), "reserved")
	}
	accountCode(t, create("alice"), "SACNF")
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM account.accesses a JOIN account.users u ON u.id = a.user_id WHERE u.username = 'bob-1' AND a.type = 'personal'`).Scan(new(int)))
}

// A token is shown once; only its hash is kept; a request authenticates with the user's own
// token only.
func TestAccountAuthenticate(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	var stored int
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM account.accesses WHERE token_hash = sha256(convert_to($1, 'UTF8'))`, b.token).Scan(&stored))
	require.Equal(t, 1, stored)
	require.Regexp(t, `^c[0-9a-f]{64}$`, b.token)
	require.Regexp(t, `^c[0-9a-f]{24}$`, b.personal)

	auth := func(user string, token *string) (db.AccountAuthenticateRow, error) {
		var row db.AccountAuthenticateRow
		err := dbtest.Savepoint(t, b.tx, func(tx pgx.Tx) error {
			var err error
			row, err = db.New(tx).AccountAuthenticate(b.ctx, db.AccountAuthenticateParams{Username: user, Token: token})
			return err
		})
		return row, err
	}
	row, err := auth("alice", &b.token)
	require.NoError(t, err)
	require.Equal(t, b.personal, row.AccessID)
	require.Equal(t, "personal", row.AccessType)
	require.Equal(t, []string{"account:alice"}, row.Readers)

	bob, err := b.q.AccountUserCreate(b.ctx, db.AccountUserCreateParams{Username: "bobby", AccessName: "silo"})
	require.NoError(t, err)
	_, err = auth("alice", &bob.Token)
	accountCode(t, err, "SAAUT")
	wrong := "cnope"
	_, err = auth("alice", &wrong)
	accountCode(t, err, "SAAUT")
	_, err = auth("alice", nil)
	accountCode(t, err, "SAHDR")
	_, err = auth("nobody", &b.token)
	accountCode(t, err, "SANFD")

	_, err = b.tx.Exec(b.ctx, `UPDATE account.accesses SET deleted = 1 WHERE id = $1`, bob.AccessID)
	require.NoError(t, err)
	_, err = auth("bobby", &bob.Token)
	accountCode(t, err, "SAAUT")
}

func TestAccountAccesses(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)

	out := b.must(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountAccessCreate(b.ctx, db.AccountAccessCreateParams{AccessID: b.personal,
			Access: json.RawMessage(`{"name": "manager", "permissions": [{"streamId": "diary", "level": "manage"}]}`)})
	})
	access := out["access"].(map[string]any)
	require.Equal(t, "app", access["type"])
	require.Regexp(t, `^c[0-9a-f]{64}$`, access["token"])
	require.Equal(t, []any{map[string]any{"streamId": "diary", "level": "manage"}}, access["permissions"])
	require.Equal(t, b.personal, access["createdBy"])
	manager := access["id"].(string)

	// A manager grants within what it manages, and nothing wider.
	reader, err := b.app(t, manager, `{"name": "reader", "permissions": [{"streamId": "heart", "level": "read"}]}`)
	require.NoError(t, err)
	_, err = b.app(t, manager, `{"name": "wider", "permissions": [{"streamId": "work", "level": "read"}]}`)
	accountCode(t, err, "SAFRB")
	_, err = b.app(t, manager, `{"name": "star", "permissions": [{"streamId": "*", "level": "read"}]}`)
	accountCode(t, err, "SAFRB")
	_, err = b.app(t, reader, `{"name": "from-reader", "permissions": [{"streamId": "heart", "level": "read"}]}`)
	accountCode(t, err, "SAFRB")

	for _, tc := range []struct{ body, code string }{
		{`[]`, "SASTR"},
		{`{"permissions": [{"streamId": "diary", "level": "read"}]}`, "SAINV"},
		{`{"name": "x"}`, "SAINV"},
		{`{"name": "x", "permissions": []}`, "SAINV"},
		{`{"name": "x", "permissions": [{"streamId": "diary", "level": "admin"}]}`, "SAINV"},
		{`{"name": "x", "permissions": [{"streamId": "diary"}]}`, "SAINV"},
		{`{"name": "x", "permissions": ["diary"]}`, "SAINV"},
		{`{"name": "x", "permissions": [{"streamId": "diary", "level": "read"}, {"streamId": "diary", "level": "manage"}]}`, "SAINV"},
		{`{"name": "x", "type": "personal", "permissions": [{"streamId": "diary", "level": "read"}]}`, "SAINV"},
		{`{"name": "x", "bogus": 1, "permissions": [{"streamId": "diary", "level": "read"}]}`, "SAINV"},
		{`{"name": "x", "permissions": [{"streamId": "nowhere", "level": "read"}]}`, "SAREF"},
		{`{"name": "manager", "permissions": [{"streamId": "diary", "level": "read"}]}`, "SACNF"},
	} {
		_, err := b.app(t, b.personal, tc.body)
		accountCode(t, err, tc.code)
	}
	_, err = b.app(t, b.personal, `{"name": "manager", "deviceName": "phone", "permissions": [{"streamId": "*", "level": "create-only"}]}`)
	require.NoError(t, err, "another device name is another access")

	list := func(by string) []any {
		return b.must(t, func(q *db.Queries) (json.RawMessage, error) { return q.AccountAccessesGet(b.ctx, by) })["accesses"].([]any)
	}
	require.Len(t, list(b.personal), 4)
	mine := list(manager)
	require.Len(t, mine, 1)
	require.Equal(t, reader, mine[0].(map[string]any)["id"])
	require.NotContains(t, mine[0], "token")
}

func TestAccountStreams(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)

	out, err := b.stream(t, b.personal, `{"name": "Blood Pressure!", "parentId": "heart", "clientData": {"color": "red"}}`)
	require.NoError(t, err)
	s := out["stream"].(map[string]any)
	require.Equal(t, "blood-pressure", s["id"])
	require.Equal(t, "heart", s["parentId"])
	require.Equal(t, []any{}, s["children"])
	require.Equal(t, map[string]any{"color": "red"}, s["clientData"])
	out, err = b.stream(t, b.personal, `{"name": "blood pressure"}`)
	require.NoError(t, err)
	require.Equal(t, "blood-pressure-2", out["stream"].(map[string]any)["id"], "a made id is numbered while taken")

	for _, tc := range []struct{ body, code string }{
		{`"x"`, "SASTR"},
		{`{}`, "SAINV"},
		{`{"name": ""}`, "SAINV"},
		{`{"name": "x", "id": "Bad Id"}`, "SAINV"},
		{`{"name": "x", "extra": true}`, "SAINV"},
		{`{"name": "x", "parentId": "nowhere"}`, "SAREF"},
		{`{"name": "x", "id": "diary"}`, "SACNF"},
		{`{"name": "Heart", "parentId": "diary"}`, "SACNF"},
	} {
		_, err := b.stream(t, b.personal, tc.body)
		accountCode(t, err, tc.code)
	}

	manager, err := b.app(t, b.personal, `{"name": "m", "permissions": [{"streamId": "heart", "level": "manage"}]}`)
	require.NoError(t, err)
	contributor, err := b.app(t, b.personal, `{"name": "c", "permissions": [{"streamId": "heart", "level": "contribute"}]}`)
	require.NoError(t, err)
	_, err = b.stream(t, manager, `{"name": "Pulse", "parentId": "ecg"}`)
	require.NoError(t, err, "manage on heart covers ecg")
	_, err = b.stream(t, manager, `{"name": "Root"}`)
	accountCode(t, err, "SAFRB")
	_, err = b.stream(t, manager, `{"name": "Elsewhere", "parentId": "work"}`)
	accountCode(t, err, "SAFRB")
	_, err = b.stream(t, contributor, `{"name": "Pulse2", "parentId": "heart"}`)
	accountCode(t, err, "SAFRB")

	get := func(by string, parent *string, state string) []any {
		return b.must(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.AccountStreamsGet(b.ctx, db.AccountStreamsGetParams{AccessID: by, ParentID: parent, State: state})
		})["streams"].([]any)
	}
	all := get(b.personal, nil, "default")
	require.Len(t, all, 3) // by name
	require.Equal(t, []any{"diary", "work", "blood-pressure-2"}, []any{all[0].(map[string]any)["id"], all[1].(map[string]any)["id"], all[2].(map[string]any)["id"]})
	heart := all[0].(map[string]any)["children"].([]any)[0].(map[string]any)
	require.Equal(t, "heart", heart["id"])
	require.Len(t, heart["children"], 2)

	// An app access sees its subtree, rooted where its permission is.
	mine := get(contributor, nil, "default")
	require.Len(t, mine, 1)
	require.Equal(t, "heart", mine[0].(map[string]any)["id"])
	require.Equal(t, "diary", mine[0].(map[string]any)["parentId"])
	children := get(b.personal, ptr("heart"), "default")
	require.Len(t, children, 2)
	_, err = b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountStreamsGet(b.ctx, db.AccountStreamsGetParams{AccessID: contributor, ParentID: ptr("work"), State: "default"})
	})
	accountCode(t, err, "SAREF")

	// Trashed streams show with state all only.
	_, err = b.stream(t, b.personal, `{"name": "Old", "trashed": true}`)
	require.NoError(t, err)
	require.Len(t, get(b.personal, nil, "default"), 3)
	require.Len(t, get(b.personal, nil, "all"), 4)
}

// Every table, column and sequence of schema account says what it is (COMMENT ON), for DBAs
// reading \d+.
func TestAccountSchemaCommented(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	var missing []string
	rows, err := tx.Query(context.Background(), `
		SELECT c.oid::regclass::text FROM pg_class c
		WHERE c.relnamespace = 'account'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
		  AND obj_description(c.oid, 'pg_class') IS NULL
		  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')) -- identity sequences
		UNION ALL
		SELECT c.oid::regclass::text || '.' || a.attname FROM pg_class c
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE c.relnamespace = 'account'::regnamespace AND c.relkind IN ('r', 'p')
		  AND col_description(c.oid, a.attnum) IS NULL
		UNION ALL
		SELECT 'schema account' WHERE obj_description('account'::regnamespace, 'pg_namespace') IS NULL`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		missing = append(missing, s)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, missing, "objects of schema account without COMMENT ON")
	var tables int
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT count(*) FROM pg_class WHERE relnamespace = 'account'::regnamespace AND relkind = 'r'`).Scan(&tables))
	require.Equal(t, 10, tables)
}
