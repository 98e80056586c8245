package db_test

// The operational data store (sql/ods/): process-flow events set startedAt from the first event
// ingested and finishedAt from the first terminal one; objects are appended; a unit of work reads
// back whole; archiving keeps the first archivedAt; bad items are refused one by one.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// odsIngest calls api.ods_ingest from psql's side and returns status per item.
func odsIngest(t *testing.T, tx pgx.Tx, events string) []string {
	t.Helper()
	rows, err := tx.Query(context.Background(), `SELECT status || coalesce(':' || sqlstate, '') FROM api.ods_ingest($1::jsonb)`, events)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

type uowDoc struct {
	UnitOfWorkID string  `json:"unitOfWorkId"`
	JourneyType  *string `json:"journeyType"`
	GlobalStatus *string `json:"globalStatus"`
	StartedAt    *string `json:"startedAt"`
	FinishedAt   *string `json:"finishedAt"`
	ArchivedAt   *string `json:"archivedAt"`
	Summary      *struct {
		Events    int    `json:"events"`
		LastEvent string `json:"lastEvent"`
	} `json:"summary"`
	MdsObjects     []json.RawMessage `json:"mdsObjects"`
	PdsObjects     []json.RawMessage `json:"pdsObjects"`
	ProcessObjects []json.RawMessage `json:"processObjects"`
	CustomObjects  []json.RawMessage `json:"customObjects"`
}

func odsGet(t *testing.T, q *db.Queries, id string) uowDoc {
	t.Helper()
	raw, err := q.OdsUnitOfWorkGet(context.Background(), id)
	require.NoError(t, err)
	var d uowDoc
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

func TestOdsIngestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	q := db.New(tx)

	// Ingest order decides startedAt, not time order: the first event ingested has a later time.
	got := odsIngest(t, tx, `[
		{"unitOfWorkId": "u1", "journeyType": "PAYMENT", "globalStatus": "PENDING", "name": "Initiated", "createdAt": "2021-05-16T10:00:00Z"},
		{"unitOfWorkId": "u1", "globalStatus": "ACCEPTED", "name": "Accepted", "createdAt": "2021-05-16T09:00:00Z"}]`)
	require.Equal(t, []string{"stored", "stored"}, got)
	d := odsGet(t, q, "u1")
	require.Equal(t, "2021-05-16T10:00:00.000Z", *d.StartedAt)
	require.Nil(t, d.FinishedAt)
	require.Equal(t, "ACCEPTED", *d.GlobalStatus)
	require.Equal(t, "PAYMENT", *d.JourneyType)

	// The first terminal event sets finishedAt; a later one changes neither it nor the status.
	got = odsIngest(t, tx, `[
		{"unitOfWorkId": "u1", "globalStatus": "COMPLETED", "name": "Completed", "createdAt": "2021-05-16T11:00:00+02:00"},
		{"unitOfWorkId": "u1", "globalStatus": "REJECTED", "name": "Late", "createdAt": "2021-05-16T12:00:00Z"}]`)
	require.Equal(t, []string{"stored", "stored"}, got)
	d = odsGet(t, q, "u1")
	require.Equal(t, "2021-05-16T09:00:00.000Z", *d.FinishedAt)
	require.Equal(t, "COMPLETED", *d.GlobalStatus)
	require.Equal(t, 4, d.Summary.Events)
	require.Equal(t, "Late", d.Summary.LastEvent)
	require.Len(t, d.ProcessObjects, 4)

	// Objects of every kind; one sent twice is a duplicate.
	rows, err := tx.Query(ctx, `SELECT status FROM api.ods_append($1::jsonb)`, `[
		{"unitOfWorkId": "u1", "kind": "MDS", "type": "pacs.008", "id": "m1", "createdAt": "2021-05-16T10:00:01Z", "payload": {"amount": 1}},
		{"unitOfWorkId": "u1", "kind": "PDS", "type": "Party", "payload": {"name": "x"}},
		{"unitOfWorkId": "u1", "kind": "CUSTOM", "type": "note", "payload": "free text"},
		{"unitOfWorkId": "u1", "kind": "MDS", "type": "pacs.008", "id": "m1", "createdAt": "2021-05-16T10:00:01Z", "payload": {"amount": 1}}]`)
	require.NoError(t, err)
	statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"stored", "stored", "stored", "duplicate"}, statuses)
	d = odsGet(t, q, "u1")
	require.Len(t, d.MdsObjects, 1)
	require.Len(t, d.PdsObjects, 1)
	require.Len(t, d.CustomObjects, 1)
	// The unit of work counts the objects stored, not the duplicates (TTL mode's count of what it
	// drops with whole partitions).
	_, err = tx.Exec(ctx, `SELECT * FROM api.ods_ingest('{"unitOfWorkId": "u1", "id": "e1", "globalStatus": "COMPLETED", "createdAt": "2021-05-16T13:00:00Z"}');
		SELECT * FROM api.ods_ingest('{"unitOfWorkId": "u1", "id": "e1", "globalStatus": "COMPLETED", "createdAt": "2021-05-16T13:00:00Z"}')`)
	require.NoError(t, err)
	var counted, stored int
	require.NoError(t, tx.QueryRow(ctx, `SELECT u.object_count, (SELECT count(*) FROM ods.objects o WHERE o.unit_of_work_id = u.id)
		FROM ods.unit_of_works u WHERE u.id = 'u1'`).Scan(&counted, &stored))
	require.Equal(t, 8, stored, "four events, three objects, one more event sent twice")
	require.Equal(t, stored, counted)

	// Objects of a unit of work not seen yet create it without startedAt.
	_, err = tx.Exec(ctx, `SELECT * FROM api.ods_append('{"unitOfWorkId": "u2", "kind": "MDS", "type": "t", "payload": 1}')`)
	require.NoError(t, err)
	d = odsGet(t, q, "u2")
	require.Nil(t, d.StartedAt)
	require.Equal(t, 0, d.Summary.Events)

	// Archiving sets archivedAt once.
	raw, err := q.OdsUnitOfWorkArchive(ctx, "u1")
	require.NoError(t, err)
	var first uowDoc
	require.NoError(t, json.Unmarshal(raw, &first))
	require.NotNil(t, first.ArchivedAt)
	_, err = tx.Exec(ctx, `SELECT api.ods_unit_of_work_archive('u1', '2030-01-01')`)
	require.NoError(t, err)
	require.Equal(t, *first.ArchivedAt, *odsGet(t, q, "u1").ArchivedAt)

	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).OdsUnitOfWorkArchive(ctx, "nope")
		return err
	})
	requireSQLState(t, err, "SLNFD")
	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).OdsUnitOfWorkGet(ctx, "nope")
		return err
	})
	requireSQLState(t, err, "SLNFD")
}

func TestOdsIngestRefusals(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	got := odsIngest(t, tx, `[
		42,
		{"globalStatus": "PENDING"},
		{"unitOfWorkId": "u", "globalStatus": "WHATEVER"},
		{"unitOfWorkId": "u"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": "yesterday"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "journeyType": "TRAVEL"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "ttl": -3},
		{"unitOfWorkId": "u", "globalStatus": "PENDING"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": "2021-02-30T00:00:00Z"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": "2021-02-03T00:00:00"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": "1960-01-01T00:00:00Z"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": 1621123200000, "id": "ms"},
		{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": "2021-05-16T02:00+02:00", "id": "offset"}]`)
	require.Equal(t, []string{"refused:SOINV", "refused:SOINV", "refused:SOSTA", "refused:SOSTA", "refused:SOTIM",
		"refused:SOINV", "refused:SOINV", "stored", "refused:SOTIM", "refused:SOTIM", "refused:SOTIM", "stored", "stored"}, got)
	var times []time.Time
	rows0, err := tx.Query(context.Background(), `SELECT created_at FROM ods.objects WHERE object_id IN ('ms', 'offset') ORDER BY object_id`)
	require.NoError(t, err)
	times, err = pgx.CollectRows(rows0, pgx.RowTo[time.Time])
	require.NoError(t, err)
	require.Equal(t, "2021-05-16T00:00:00Z", times[0].UTC().Format(time.RFC3339))
	require.Equal(t, "2021-05-16T00:00:00Z", times[1].UTC().Format(time.RFC3339))

	rows, err := tx.Query(context.Background(), `SELECT status || coalesce(':' || sqlstate, '') FROM api.ods_append($1::jsonb)`,
		`[{"unitOfWorkId": "u", "kind": "XX", "type": "t", "payload": 1}, {"unitOfWorkId": "u", "kind": "MDS", "payload": 1},
		  {"unitOfWorkId": "u", "kind": "MDS", "type": "t"}]`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"refused:SOINV", "refused:SOINV", "refused:SOINV"}, out)

	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `SELECT * FROM api.ods_ingest('"text"')`)
		return err
	})
	requireSQLState(t, err, "SLINV")
}

func TestOdsIngestRequestsIdempotency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	body := `[{"events": {"unitOfWorkId": "k", "globalStatus": "PENDING", "id": "e1"}, "idempotency_key": "key-1"},
	          {"events": [{"unitOfWorkId": "k2", "globalStatus": "PENDING"}]}]`
	rows, err := q.OdsIngestRequests(ctx, []byte(body))
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, int32(1), rows[0].Request)
	require.Equal(t, "stored", rows[0].Status)
	require.False(t, rows[0].Replayed)

	rows, err = q.OdsIngestRequests(ctx, []byte(`[{"events": {"unitOfWorkId": "k", "globalStatus": "PENDING", "id": "e1"}, "idempotency_key": "key-1"}]`))
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.True(t, rows[0].Replayed)
	require.Equal(t, 1, odsGet(t, q, "k").Summary.Events)

	rows, err = q.OdsIngestRequests(ctx, []byte(`[{"events": {"unitOfWorkId": "k", "globalStatus": "COMPLETED"}, "idempotency_key": "key-1"}]`))
	require.NoError(t, err)
	require.Equal(t, "refused", rows[0].Status)
	require.Equal(t, "SLIDM", *rows[0].SQLState)
}
