package db_test

// Tests of the length rule of profile link targets (sql/profile/04_validate.sql): the target of a
// _profile_link becomes the correlation id that later updates of the linked id are written to, so
// a target too long for the primary key of profile.profilestore is rejected when the link is sent,
// not by every later update of that id.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

const linkTargetTooLong = "The link target (_v) is longer than 512 bytes"

func linkMsg(from, to string) string {
	return `{"_operation":"_profile_link","_id":"` + from + `","_value":{"_v":"` + to + `"}}`
}

// randomText is n bytes of hexadecimal text that does not compress, so the index row of a key that
// holds it is as long as the text.
func randomText(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, (n+1)/2)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)[:n]
}

// A 1 MiB link target is dead-lettered with its reason; the id stays unlinked and its later
// updates apply.
func TestProfileLinkTargetTooLongIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	huge := strings.Repeat("x", 1<<20)
	res := e.one(linkMsg("$A", huge))
	require.Equal(t, "dead_letter", res.Status)
	require.Equal(t, "SPVAL", *res.SQLState)
	require.Equal(t, linkTargetTooLong, *res.Reason)
	require.Equal(t, ptr(e.id("$A")), res.CorrelationID)
	dl := e.deadLetter(*res.DeadLetterID)
	require.Equal(t, "SPVAL", dl.SQLState)
	require.Equal(t, linkTargetTooLong, dl.Reason)
	require.Equal(t, "validating _v for _profile_link", dl.Context)
	require.Empty(t, e.grains("$A"), "no link was written")

	res = e.one(`{"_id":"$A","_path":["g"],"_value":{"_v":"x","_in":1000}}`)
	require.Equal(t, "ok", res.Status)
	require.Equal(t, ptr(e.id("$A")), res.CorrelationID)
	require.Equal(t, []grainRow{gr("/g", `"x"`, 1000)}, e.grains("$A"))
}

// The limit counts bytes, not characters, and a target at the limit is accepted: every key a later
// update may write under it fits, even the longest key the key rule lets the linked id send.
func TestProfileLinkTargetAtTheLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, target, reason string
	}{
		{"512 bytes", strings.Repeat("t", 512), ""},
		{"513 bytes", strings.Repeat("t", 513), linkTargetTooLong},
		{"256 two-byte characters", strings.Repeat("é", 256), ""},
		{"257 two-byte characters", strings.Repeat("é", 257), linkTargetTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newApplyEnv(t)
			res := e.one(linkMsg("$A", tc.target))
			if tc.reason != "" {
				require.Equal(t, "dead_letter", res.Status)
				require.Equal(t, "SPVAL", *res.SQLState)
				require.Equal(t, tc.reason, *res.Reason)
				return
			}
			require.Equal(t, "ok", res.Status, res.Reason)
			target, err := e.q.ProfileLinkResolve(e.ctx, e.id("$A"))
			require.NoError(t, err)
			require.Equal(t, tc.target, target)
		})
	}

	t.Run("the longest key under a target at the limit fits", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		target := randomText(t, 512)
		require.Equal(t, "ok", e.one(linkMsg("$A", target)).Status)
		// _id "$A", profile type _d and a path of one segment: 2000 bytes in all, the most the key
		// rule allows.
		seg := randomText(t, 2000-len(e.id("$A"))-len("_d")-len("/"))
		for _, op := range []string{"_set", "_set_with_history"} {
			res := e.one(`{"_operation":"` + op + `","_id":"$A","_path":["` + seg + `"],"_value":{"_v":"x"}}`)
			require.Equal(t, "ok", res.Status, res.Reason)
			require.Equal(t, &target, res.CorrelationID)
		}
		var n int
		require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT count(*) FROM profile.profilestore
			WHERE correlation_id = $1 AND path = $2`, target, "/"+seg).Scan(&n))
		require.Equal(t, 2, n, "the _latest and the archived pit")
	})
}

// Through the asynchronous updater: the rejected link is dead-lettered and the lane goes on, so
// the update after it for the same id applies in the same step and no lane is blocked.
func TestProfileLinkTargetTooLongDoesNotBlockTheLane(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	id := "link-target-too-long"
	msgs := []string{
		linkMsg(id, strings.Repeat("x", 1<<20)),
		`{"_id":"` + id + `","_path":["g"],"_value":{"_v":"x"}}`,
	}
	_, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
	require.NoError(t, err)

	res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
	require.NoError(t, err)
	require.Nil(t, res.Error)
	require.Zero(t, res.FailedLanes)
	require.EqualValues(t, 2, res.Taken)
	require.EqualValues(t, 1, res.Ok)
	require.EqualValues(t, 1, res.DeadLetter)

	var reason, state string
	require.NoError(t, tx.QueryRow(ctx, `SELECT reason, sqlstate FROM profile.dead_letters
		WHERE correlation_id = $1 AND operation = '_profile_link'`, id).Scan(&reason, &state))
	require.Equal(t, linkTargetTooLong, reason)
	require.Equal(t, "SPVAL", state)
	var value string
	require.NoError(t, tx.QueryRow(ctx, `SELECT value #>> '{}' FROM profile.profilestore
		WHERE correlation_id = $1 AND path = '/g' AND pit = '_latest'`, id).Scan(&value))
	require.Equal(t, "x", value)
	var blocked, left int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.inbox_lanes WHERE attempts > 0`).Scan(&blocked))
	require.Zero(t, blocked)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.inbox`).Scan(&left))
	require.Zero(t, left)
}
