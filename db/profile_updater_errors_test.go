package db_test

// Tests of how the asynchronous updater (sql/profile/11_updater.sql) treats unexpected errors by
// their class (api.error_class, sql/error/01_class.sql): a deterministic one is dead-lettered at
// once in both modes and its lane goes on; a transient one follows updater.unexpected_errors.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// failOn makes every write of correlation id "poison" whose value holds "bad" fail with SQLSTATE
// code, from a trigger of the test's transaction (rolled back with it). Validation cannot catch
// it: the error comes from inside the apply, as an oversized index row or a broken constraint
// would.
func failOn(t *testing.T, tx pgx.Tx, code, message string) {
	t.Helper()
	_, err := tx.Exec(context.Background(), fmt.Sprintf(`
		CREATE FUNCTION pg_temp.fail_on_bad() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.correlation_id = 'poison' AND NEW.value::text LIKE '%%bad%%' THEN
				RAISE EXCEPTION '%s' USING ERRCODE = '%s', DETAIL = 'a test trigger';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_on_bad BEFORE INSERT OR UPDATE ON profile.profilestore
			FOR EACH ROW EXECUTE FUNCTION pg_temp.fail_on_bad();`, message, code))
	require.NoError(t, err)
}

func TestProfileInboxErrorsByClass(t *testing.T) {
	for _, c := range []struct {
		mode, code, message string
		deadLettered        bool // else the lane blocks at the failing message
	}{
		{"retry", "54000", "index row requires 12040 bytes, maximum size is 8191", true},
		{"retry", "22023", "invalid parameter value", true},
		{"retry", "23514", "new row violates check constraint", true},
		{"retry", "P0001", "refused by a trigger", true},
		{"retry", "40P01", "deadlock detected", false},
		{"retry", "55P03", "could not obtain lock on row", false},
		{"retry", "53100", "could not extend file: No space left on device", false},
		{"dead_letter", "54000", "index row requires 12040 bytes, maximum size is 8191", true},
		{"dead_letter", "40P01", "deadlock detected", true},
		{"dead_letter", "55P03", "could not obtain lock on row", true},
	} {
		t.Run(c.mode+"/"+c.code, func(t *testing.T) {
			tx := dbtest.Tx(t)
			q := db.New(tx)
			ctx := context.Background()
			// One lane: every message below shares it, as the correlation ids hashed to a lane do.
			_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = '1' WHERE key = 'updater.lanes'`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `UPDATE silo.settings SET value = $1 WHERE key = 'updater.unexpected_errors'`, c.mode)
			require.NoError(t, err)
			failOn(t, tx, c.code, c.message)
			msgs := []string{appendMsg("poison", "1"), appendMsg("healthy", "1"), appendMsg("poison", "bad"),
				appendMsg("healthy", "2"), appendMsg("poison", "2")}
			row, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
			require.NoError(t, err)
			badID := *row.FirstID + 2

			res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
			require.NoError(t, err)
			require.EqualValues(t, 1, res.Lanes)
			var waiting, blocked, dead int
			require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM profile.inbox),
				(SELECT count(*) FROM profile.inbox_lanes WHERE attempts > 0), (SELECT count(*) FROM profile.dead_letters)`).
				Scan(&waiting, &blocked, &dead))

			if c.deadLettered {
				// Dead-lettered where it failed; the messages after it, of both ids, applied in this step.
				require.EqualValues(t, 5, res.Taken)
				require.EqualValues(t, 4, res.Ok)
				require.EqualValues(t, 1, res.DeadLetter)
				require.Zero(t, res.FailedLanes)
				require.Nil(t, res.Error)
				require.False(t, res.More)
				require.JSONEq(t, `{"_array_append": 5}`, string(res.Operations))
				require.Equal(t, []string{"1", "2"}, seqOf(t, tx, "healthy"))
				require.Equal(t, []string{"1", "2"}, seqOf(t, tx, "poison"))
				require.Zero(t, waiting)
				require.Zero(t, blocked)
				var id, state, reason, context, message string
				require.NoError(t, tx.QueryRow(ctx, `SELECT correlation_id, sqlstate, reason, context, message::text
					FROM profile.dead_letters`).Scan(&id, &state, &reason, &context, &message))
				require.Equal(t, "poison", id)
				require.Equal(t, c.code, state)
				require.Equal(t, c.message+": a test trigger", reason)
				require.Contains(t, context, "fail_on_bad")
				require.JSONEq(t, appendMsg("poison", "bad"), message)
				return
			}
			// Transient in retry mode: the lane applies what precedes the failing message and waits there.
			require.EqualValues(t, 2, res.Taken)
			require.EqualValues(t, 2, res.Ok)
			require.Zero(t, res.DeadLetter)
			require.EqualValues(t, 1, res.FailedLanes)
			require.NotNil(t, res.Error)
			require.Contains(t, *res.Error, c.message)
			require.Contains(t, *res.Error, c.code)
			require.Equal(t, []string{"1"}, seqOf(t, tx, "healthy"))
			require.Equal(t, []string{"1"}, seqOf(t, tx, "poison"))
			require.Equal(t, 3, waiting)
			require.Equal(t, 1, blocked)
			require.Zero(t, dead)
			lanes, err := q.ProfileInboxBlockedLanes(ctx)
			require.NoError(t, err)
			require.Len(t, lanes, 1)
			require.Equal(t, badID, lanes[0].MessageID)
			require.Equal(t, c.code, *lanes[0].LastSQLState)
			require.Contains(t, *lanes[0].LastError, c.message)

			// Tried again once the back-off has passed, and still blocked while the cause stays.
			_, err = tx.Exec(ctx, `UPDATE profile.inbox_lanes SET retry_at = clock_timestamp() - interval '1 s' WHERE attempts > 0`)
			require.NoError(t, err)
			res, err = q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
			require.NoError(t, err)
			require.Zero(t, res.Taken)
			require.EqualValues(t, 1, res.FailedLanes)
			require.NoError(t, tx.QueryRow(ctx, `SELECT max(attempts) FROM profile.inbox_lanes`).Scan(&blocked))
			require.Equal(t, 2, blocked)

			// The cause goes away: the lane applies in order and is ready again.
			_, err = tx.Exec(ctx, `DROP TRIGGER fail_on_bad ON profile.profilestore;
				UPDATE profile.inbox_lanes SET retry_at = clock_timestamp() - interval '1 s' WHERE attempts > 0`)
			require.NoError(t, err)
			res, err = q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
			require.NoError(t, err)
			require.EqualValues(t, 3, res.Taken)
			require.Equal(t, []string{"1", "bad", "2"}, seqOf(t, tx, "poison"))
			require.Equal(t, []string{"1", "2"}, seqOf(t, tx, "healthy"))
		})
	}
}
