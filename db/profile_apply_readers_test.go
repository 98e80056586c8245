package db_test

// Tests of what the write path tells a caller with readers (api.profile_apply_batch's p_readers,
// sql/profile/07_batch.sql's profile_private.results_for_readers): a write token writes any grain,
// but its results say nothing of a grain it may not read, while the dead letter keeps the full
// reason and a caller without readers (psql) sees what it always saw.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
)

// token is the readers of a write token without the role vip.
var token = []string{"_all", "_auth"}

// batchFor applies messages as one batch, told as a caller with readers (nil: everything).
func (e *applyEnv) batchFor(readers []string, msgs ...string) []db.ProfileApplyBatchRow {
	e.t.Helper()
	res, err := e.q.ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{
		Updates: json.RawMessage(e.ids.Replace("[" + strings.Join(msgs, ",") + "]")), Readers: readers})
	require.NoError(e.t, err)
	require.Len(e.t, res, len(msgs))
	return res
}

func statusesFor(rs []db.ProfileApplyBatchRow) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Status
	}
	return out
}

// upd is an update of grain path of $A: operation, _v as JSON, and further _value fields.
func upd(op, path, v string, meta ...string) string {
	value := `{"_v":` + v
	for _, x := range meta {
		value += "," + x
	}
	return `{"_operation":"` + op + `","_id":"$A","_path":["` + path + `"],"_value":` + value + `}}`
}

func TestProfileApplyResultsForReaders(t *testing.T) {
	t.Parallel()
	vip := `"_reader":"vip"`
	// setup writes grains of $A: h (text, vip), m (text 5, vip), c (counter, vip), open (text, _auth).
	setup := func(e *applyEnv) {
		require.Equal(t, []string{"ok", "ok", "ok", "ok"}, statuses(e.batch(
			upd("_set", "h", `"secret"`, `"_in":1000`, vip),
			upd("_set", "m", `"5"`, `"_in":1000`, vip),
			upd("_set", "c", `"start"`, `"_in":1000`, vip),
			upd("_set", "open", `"public"`, `"_in":1000`),
		)))
	}

	t.Run("a noop on a grain the caller may not read is told as ok", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		setup(e)
		before := e.grains("$A")
		probes := []string{
			upd("_set_if_not_exist", "h", `"guess"`),
			upd("_set_with_history_distinct", "h", `"secret"`),
			upd("_set_max", "m", `"1"`),
			upd("_set_min_with_history", "m", `"9"`),
			upd("_set_if_not_exist", "open", `"guess"`),
			upd("_set_with_history_distinct", "open", `"public"`),
			upd("_array_remove", "missing", `"x"`), // nothing there to hide: noop
		}
		want := []string{"noop", "noop", "noop", "noop", "noop", "noop", "noop"}
		require.Equal(t, want, statusesFor(e.batchFor(nil, probes...)), "without readers: as a psql user")
		require.Equal(t, want, statusesFor(e.batchFor([]string{"_all", "_auth", "vip"}, probes...)), "a caller that reads vip")
		require.Equal(t, []string{"ok", "ok", "ok", "ok", "noop", "noop", "noop"},
			statusesFor(e.batchFor(token, probes...)))
		require.Equal(t, before, e.grains("$A"), "told ok, nothing was written")
		// The statuses of api.profile_apply_batch without readers are those it always gave.
		require.Equal(t, want, statuses(e.batch(probes...)))
		// api.profile_apply takes the readers too.
		var status string
		require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT status FROM api.profile_apply($1::jsonb, p_readers => $2)`,
			e.ids.Replace(upd("_set_if_not_exist", "h", `"guess"`)), token).Scan(&status))
		require.Equal(t, "ok", status)
	})

	t.Run("a noop is judged by the grain it read, not by what the batch wrote later", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		setup(e)
		res := e.batchFor(token,
			upd("_set_with_history_distinct", "h", `"secret"`),
			upd("_set", "h", `"mine"`, `"_in":2000`))
		require.Equal(t, []string{"ok", "ok"}, statusesFor(res))
		require.Contains(t, e.grains("$A"), gr("/h", `"mine"`, 2000), "the caller's own value, readable by it")
	})

	t.Run("a grain type clash does not name the type the caller may not read", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		setup(e)
		clashes := []string{
			upd("_inc", "h", `"0|1|1"`),                     // the direct statement
			upd("_set_with_history_distinct", "c", `["x"]`), // the general statement
			upd("_array_append", "open", `["x"]`),           // a grain the caller may read
		}
		for _, tc := range []struct {
			readers []string
			reasons []string
		}{
			{nil, []string{
				"Grain type differs from the existing grain: _inc writes grain type c, the grain at /h has grain type t",
				"Grain type differs from the existing grain: _set_with_history_distinct writes grain type a, the grain at /c has grain type t",
				"Grain type differs from the existing grain: _array_append writes grain type a, the grain at /open has grain type t",
			}},
			{token, []string{
				"Grain type differs from the existing grain: _inc writes grain type c, the grain at /h has another grain type",
				"Grain type differs from the existing grain: _set_with_history_distinct writes grain type a, the grain at /c has another grain type",
				"Grain type differs from the existing grain: _array_append writes grain type a, the grain at /open has grain type t",
			}},
		} {
			res := e.batchFor(tc.readers, clashes...)
			for i, r := range res {
				require.Equal(t, "dead_letter", r.Status, i)
				require.Equal(t, ptr("SPTYP"), r.SQLState, i)
				require.Equal(t, ptr(tc.reasons[i]), r.Reason, i)
				// The dead letter, which only admins read, keeps the full reason.
				d := e.deadLetter(*r.DeadLetterID)
				require.Equal(t, strings.ReplaceAll(tc.reasons[i], "another grain type", "grain type t"), d.Reason)
			}
		}
	})

	t.Run("a counter clash in the general statement", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		e.one(upd("_inc", "n", `"0|1|1"`, `"_in":1000`, vip))
		r := e.batchFor(token, upd("_set_max", "n", `"7"`))[0]
		require.Equal(t, "dead_letter", r.Status)
		require.Equal(t, ptr("Grain type differs from the existing grain: _set_max writes grain type t, the grain at /n has another grain type"), r.Reason)
		require.Equal(t, "Grain type differs from the existing grain: _set_max writes grain type t, the grain at /n has grain type c",
			e.deadLetter(*r.DeadLetterID).Reason)
	})

	t.Run("links the caller may not read", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		link := func(from, to, reader string) string {
			return `{"_operation":"_profile_link","_id":"` + from + `","_value":{"_v":"` + to + `","_reader":"` + reader + `"}}`
		}
		set := `{"_id":"$A","_path":["g"],"_value":{"_v":"x"}}`
		require.Equal(t, []string{"ok", "ok"}, statuses(e.batch(link("$A", "$B", "vip"), link("$B", "$C", "_auth"))))

		// The update goes to $C either way; the caller learns the target only through links it may read.
		r := e.batchFor(token, set)[0]
		require.Equal(t, "ok", r.Status)
		require.Equal(t, ptr(e.id("$A")), r.CorrelationID)
		require.Equal(t, ptr(e.id("$C")), e.batchFor(nil, set)[0].CorrelationID)
		require.Equal(t, ptr(e.id("$C")), e.batchFor([]string{"vip", "_auth"}, set)[0].CorrelationID)
		require.Equal(t, ptr(e.id("$C")), e.batchFor(token, strings.ReplaceAll(set, "$A", "$B"))[0].CorrelationID)
		require.Len(t, e.grains("$C"), 1)
		require.Equal(t, `"x"`, e.grains("$C")[0].Value)
		require.Len(t, e.grains("$A"), 1, "only the link")

		// A cycle through a link the caller may not read: rejected, without the hidden link.
		r = e.batchFor(token, link("$C", "$A", "_auth"))[0]
		require.Equal(t, "dead_letter", r.Status)
		require.Equal(t, ptr("SPLNK"), r.SQLState)
		require.Equal(t, ptr("Profile link would create a cycle: the links of "+e.id("$A")+" lead back to "+e.id("$C")), r.Reason)
		full := "Profile link would create a cycle: " + e.id("$C") + " -> " + e.id("$A") + " -> " + e.id("$B") + " -> " + e.id("$C")
		require.Equal(t, full, e.deadLetter(*r.DeadLetterID).Reason)
		require.Equal(t, ptr(full), e.batchFor([]string{"vip", "_auth"}, link("$C", "$A", "_auth"))[0].Reason)
		// Through links it may read, the cycle is shown whole.
		require.Equal(t, ptr("Profile link would create a cycle: "+e.id("$C")+" -> "+e.id("$B")+" -> "+e.id("$C")),
			e.batchFor(token, link("$C", "$B", "_auth"))[0].Reason)

		// api.profile_link_resolve follows only the links the readers may read.
		for _, tc := range []struct {
			readers []string
			want    string
		}{{nil, "$C"}, {token, "$A"}, {[]string{"vip"}, "$B"}, {[]string{"vip", "_auth"}, "$C"}} {
			var got string
			require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT api.profile_link_resolve($1, $2)`, e.id("$A"), tc.readers).Scan(&got))
			require.Equal(t, e.id(tc.want), got, tc.readers)
		}
	})
}
