package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

// A body sent without an Idempotency-Key goes as typed columns when it can (api.series_append_columns),
// with a key the flatJSON way (api.series_append_requests): both must store the same points and
// refuse the same bodies with the same answer; and the read, formatted by the Go shell from typed
// columns, must say what api.series_get (formatted by SQL) says, in flatJSON and CSV.
func TestSeriesColumnsMatchFlatJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	b := &accountBundle{srv: httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test"}))}
	t.Cleanup(b.srv.Close)
	var access string
	require.NoError(t, pool.QueryRow(ctx, `SELECT access_id, token FROM api.account_user_create('alice')`).Scan(&access, &b.token))
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/alice/streams", b.token, `{"id": "s", "name": "S"}`).status)
	holder := func(typ string) string {
		a := b.do(t, "POST", "/alice/events", b.token, `{"streamIds": ["s"], "type": "series:`+typ+`", "time": 1000}`)
		require.Equal(t, http.StatusCreated, a.status, a.body)
		return a.object("event")["id"].(string)
	}
	other := holder("count/steps")
	key := 0
	post := func(path, body string, keyed bool) (int, string) {
		h := map[string]string{"Authorization": b.token}
		if keyed {
			key++
			h["Idempotency-Key"] = fmt.Sprintf("k%d", key)
		}
		status, _, out := b.raw(t, "POST", path, h, body)
		return status, out
	}
	for _, c := range []struct {
		typ    string
		bodies []string
	}{
		{"mass/kg", []string{
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 70.25], [1, 70.5], [2, -0.05], [3, 1e3], [4, 12345678901234567], [5, 0.000000000000000001]]}`,
			`{"format": "flatJSON", "fields": ["value", "timestamp"], "points": [[1.50, 1006], [2, 1007.0000004], [3, 1007.0000005], [4, 1006]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[10, 1], [10, 2], [2, 3]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[11, 1e300], [12, 123456789012345678901], [13, "4.5"]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[14, 1], [15, null]]}`,
			`{"format": "flatJSON", "fields": ["timestamp", "value"], "points": [[999, 1]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[-1, 1]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[16, 1, 2]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "weight"], "points": [[17, 1]]}`,
		}},
		{"position/wgs84", []string{
			`{"format": "flatJSON", "fields": ["deltaTime", "longitude", "latitude", "speed"], "points": [[0, 6.6, 46.5, null], [1, 6.61, 46.51, 3]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[2, 46.5, null]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "latitude"], "points": [[3, 46.5]]}`,
		}},
		{"music/soundcloud", []string{
			`{"format": "flatJSON", "fields": ["deltaTime", "id"], "points": [[0, 42], [1, 4.2e1], [2, 100.0]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "id"], "points": [[3, 4.5]]}`,
		}},
		{"music/basic", []string{
			`{"format": "flatJSON", "fields": ["deltaTime", "title", "track", "year"], "points": [[0, "a \"b\"\n, c", 3, 1999], [1, null, null, 2000], [2, "", 1, 2]]}`,
		}},
		{"boolean/bool", []string{
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, true], [1, "false"]]}`,
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[2, 1]]}`,
		}},
	} {
		typed, flat := holder(c.typ), holder(c.typ)
		for _, body := range c.bodies {
			s1, out1 := post("/alice/events/"+typed+"/series", body, false)
			s2, out2 := post("/alice/events/"+flat+"/series", body, true)
			require.Equal(t, s2, s1, "%s: %s / %s", body, out1, out2)
			if s1 != http.StatusOK {
				var e1, e2 struct{ Error json.RawMessage }
				require.NoError(t, json.Unmarshal([]byte(out1), &e1))
				require.NoError(t, json.Unmarshal([]byte(out2), &e2))
				require.JSONEq(t, string(e2.Error), string(e1.Error), body)
			}
		}
		// The first body again, in a seriesBatch with a body of another holder, each way.
		for i, h := range []string{typed, flat} {
			batch := `{"format": "seriesBatch", "data": [{"eventId": "` + h + `", "data": ` + c.bodies[0] + `}, {"eventId": "` + other + `", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[` + fmt.Sprint(i) + `, 1]]}}]}`
			s, out := post("/alice/series/batch", batch, i == 1)
			require.Equal(t, http.StatusOK, s, out)
		}
		// Each body again as the second of a seriesBatch whose first body has its type (typed, the
		// second then takes the checks of the first's fields as its own), and the second body's
		// event unknown: the same answers either way, with data[1] named in a refusal of its body.
		typed2, flat2 := holder(c.typ), holder(c.typ)
		for _, second := range append(slices.Clone(c.bodies), "unknown") {
			var status [2]int
			var out [2]string
			for i, hs := range [][2]string{{typed, typed2}, {flat, flat2}} {
				id, body := hs[1], second
				if second == "unknown" {
					id, body = "nope", c.bodies[0]
				}
				batch := `{"format": "seriesBatch", "data": [{"eventId": "` + hs[0] + `", "data": ` + c.bodies[0] + `}, {"eventId": "` + id + `", "data": ` + body + `}]}`
				status[i], out[i] = post("/alice/series/batch", batch, i == 1)
			}
			require.Equal(t, status[1], status[0], "%s: %s / %s", second, out[0], out[1])
			if status[0] != http.StatusOK {
				var e1, e2 struct{ Error json.RawMessage }
				require.NoError(t, json.Unmarshal([]byte(out[0]), &e1))
				require.NoError(t, json.Unmarshal([]byte(out[1]), &e2))
				require.JSONEq(t, string(e2.Error), string(e1.Error), second)
				if second != "unknown" {
					require.Contains(t, out[0], "data[1]", second)
				}
			}
		}

		for _, q := range []string{"", "?fields=timestamp", "?fromDeltaTime=1&toDeltaTime=12"} {
			r1 := b.do(t, "GET", "/alice/events/"+typed+"/series"+q, b.token, "")
			r2 := b.do(t, "GET", "/alice/events/"+flat+"/series"+q, b.token, "")
			require.Equal(t, http.StatusOK, r1.status, r1.body)
			require.Equal(t, r2.body["points"], r1.body["points"], c.typ+q)
			require.Equal(t, r2.body["fields"], r1.body["fields"], c.typ+q)
			status, _, csv1 := b.raw(t, "GET", "/alice/events/"+typed+"/series"+q, map[string]string{"Authorization": b.token, "Accept": "text/csv"}, "")
			require.Equal(t, http.StatusOK, status)
			_, _, csv2 := b.raw(t, "GET", "/alice/events/"+flat+"/series"+q, map[string]string{"Authorization": b.token, "Accept": "text/csv"}, "")
			require.Equal(t, csv2, csv1, c.typ+q)
		}
		// The Go shell's text is the SQL's, byte for byte.
		status, _, raw := b.raw(t, "GET", "/alice/events/"+typed+"/series", map[string]string{"Authorization": b.token}, "")
		require.Equal(t, http.StatusOK, status)
		var got struct{ Points json.RawMessage }
		require.NoError(t, json.Unmarshal([]byte(raw), &got))
		var lines []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(line ORDER BY at), '{}') FROM api.series_read($1, $2)`, access, typed).Scan(&lines))
		want := "["
		for i, l := range lines {
			if i > 0 {
				want += ","
			}
			want += l
		}
		require.Equal(t, want+"]", string(got.Points), c.typ)
		if c.typ == "position/wgs84" {
			// Fields chosen out of the type's order and not its first ones: the page's columns
			// come by stored position and are put back in the read's order.
			status, _, raw := b.raw(t, "GET", "/alice/events/"+typed+"/series?fields=deltaTime&fields=speed&fields=longitude",
				map[string]string{"Authorization": b.token}, "")
			require.Equal(t, http.StatusOK, status, raw)
			var sub struct {
				Fields []string
				Points json.RawMessage
			}
			require.NoError(t, json.Unmarshal([]byte(raw), &sub))
			require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(line ORDER BY at), '{}') FROM api.series_read($1, $2, p_fields => '{deltaTime,speed,longitude}')`,
				access, typed).Scan(&lines))
			require.Equal(t, "["+strings.Join(lines, ",")+"]", string(sub.Points))
			require.NotEmpty(t, lines)
			require.Len(t, sub.Fields, 3)
		}
	}
}
