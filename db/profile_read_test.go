package db_test

// Tests of the profile store's read path (sql/profile/09_read.sql). Each test writes its rows
// straight into profile.profilestore, so the document asserted is the document of exactly those
// rows. Correlation ids are unique per test: tests run in parallel, each in its own transaction.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// readRow is one row of profile.profilestore; empty fields take the table's defaults.
type readRow struct {
	Path      string
	Pit       string  // default _latest
	Value     string  // JSON; default the string "v"
	Certainty float64 // default 1
	Inserted  int64
	GrainType string // default t
	TTL       string // default P100Y
	TTN       string // default P100Y
	Reader    string // default _auth
	Origin    *string
}

func (r readRow) pit() string       { return readOr(r.Pit, "_latest") }
func (r readRow) value() string     { return readOr(r.Value, `"v"`) }
func (r readRow) ttl() string       { return readOr(r.TTL, "P100Y") }
func (r readRow) ttn() string       { return readOr(r.TTN, "P100Y") }
func (r readRow) reader() string    { return readOr(r.Reader, "_auth") }
func (r readRow) grainType() string { return readOr(r.GrainType, "t") }
func (r readRow) certainty() float64 {
	if r.Certainty == 0 {
		return 1
	}
	return r.Certainty
}

func readOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// readPit is the history pit of a value inserted at epoch milliseconds ms.
func readPit(ms int64) string {
	return "_" + time.UnixMilli(ms).UTC().Format("20060102T150405.000Z")
}

func readStr(s string) *string { return &s }

func readInt32(i int32) *int32 { return &i }

type readBundle struct {
	ctx context.Context
	tx  pgx.Tx
}

func readSetup(t *testing.T) *readBundle {
	t.Helper()
	return &readBundle{ctx: context.Background(), tx: dbtest.Tx(t)}
}

// insert writes rows of profile (profileType, correlationID).
func (b *readBundle) insert(t *testing.T, profileType, correlationID string, rows ...readRow) {
	t.Helper()
	for _, r := range rows {
		_, err := b.tx.Exec(b.ctx, `
			INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, certainty, grain_type,
			                                  inserted, ttl, reader, origin, ttn, expires_at, notify_at)
			VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8::bigint, $9::text, $10, $11, $12::text,
			        CASE WHEN $9::text <> 'P100Y' THEN to_timestamp($8::bigint / 1000.0) + $9::text::interval END,
			        CASE WHEN $12::text <> 'P100Y' THEN to_timestamp($8::bigint / 1000.0) + $12::text::interval END)`,
			correlationID, profileType, r.Path, r.pit(), r.value(), r.certainty(), r.grainType(),
			r.Inserted, r.ttl(), r.reader(), r.Origin, r.ttn())
		require.NoError(t, err)
	}
}

// get calls ProfileGet in a savepoint, so an expected error leaves the transaction usable.
func (b *readBundle) get(t *testing.T, arg db.ProfileGetParams) (db.ProfileGetRow, error) {
	t.Helper()
	var row db.ProfileGetRow
	err := dbtest.Savepoint(t, b.tx, func(tx pgx.Tx) error {
		var err error
		row, err = db.New(tx).ProfileGet(b.ctx, arg)
		return err
	})
	return row, err
}

func (b *readBundle) grain(t *testing.T, arg db.ProfileGrainGetParams) (db.ProfileGrainGetRow, error) {
	t.Helper()
	var row db.ProfileGrainGetRow
	err := dbtest.Savepoint(t, b.tx, func(tx pgx.Tx) error {
		var err error
		row, err = db.New(tx).ProfileGrainGet(b.ctx, arg)
		return err
	})
	return row, err
}

// readDocument is the document expected for rows: {"_id": id, <segments nested>: {<pit>: {...}}}.
func readDocument(id string, rows ...readRow) map[string]any {
	doc := map[string]any{"_id": id}
	for _, r := range rows {
		node := doc
		for _, seg := range strings.Split(strings.TrimPrefix(r.Path, "/"), "/") {
			child, ok := node[seg].(map[string]any)
			if !ok {
				child = map[string]any{}
				node[seg] = child
			}
			node = child
		}
		node[r.pit()] = map[string]any{
			"_v":      json.RawMessage(r.value()),
			"_c":      r.certainty(),
			"_in":     r.Inserted,
			"_ttl":    r.ttl(),
			"_ttn":    r.ttn(),
			"_origin": r.Origin,
			"_reader": r.reader(),
		}
	}
	return doc
}

func readRequireDocument(t *testing.T, want map[string]any, got json.RawMessage) {
	t.Helper()
	require.True(t, json.Valid(got), "not JSON: %s", got)
	b, err := json.Marshal(want)
	require.NoError(t, err)
	require.JSONEq(t, string(b), string(got))
}

func readRequireCode(t *testing.T, err error, code string) *pgconn.PgError {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
	return pgErr
}

// readSelect keeps the rows whose path is in paths.
func readSelect(rows []readRow, paths ...string) []readRow {
	var out []readRow
	for _, r := range rows {
		for _, p := range paths {
			if r.Path == p {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// The seed's example profile, with history pits named as the store names them.
func TestProfileGetSeedExample(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	const (
		sep20 = 1537401600000 // 2018-09-20
		sep21 = 1537488000000
		sep22 = 1537574400000
		sep23 = 1537660800000
	)
	b.insert(t, "seed_example", "0815",
		readRow{Path: "/a1", Value: `"abc"`, Certainty: 0.4, Inserted: 123, Reader: "_all"},
		readRow{Path: "/a2/b1", Pit: "_20180921T000000.000Z", Value: `"21"`, Certainty: 0.1, Inserted: sep21, Reader: "_all"},
		readRow{Path: "/a2/b1", Pit: "_20180922T000000.000Z", Value: `"22"`, Certainty: 0.2, Inserted: sep22, Reader: "_all"},
		readRow{Path: "/a2/b1", Value: `"23"`, Certainty: 0.3, Inserted: sep23, Reader: "_all"},
		readRow{Path: "/a2/b2", Value: `"123456"`, Certainty: 0.4, Inserted: sep20, Reader: "_all"},
		readRow{Path: "/a3/b3/c3/d3/e3", Value: `"123456"`, Certainty: 0.5, Inserted: sep20, Reader: "_all"},
	)
	got, err := b.get(t, db.ProfileGetParams{ProfileType: "seed_example", CorrelationID: "0815", WithHistory: true})
	require.NoError(t, err)
	require.Equal(t, "0815", got.CorrelationID)
	require.Equal(t, "seed_example", got.ProfileType)
	readRequireDocument(t, map[string]any{
		"_id": "0815",
		"a1": map[string]any{
			"_latest": map[string]any{"_v": "abc", "_c": 0.4, "_in": 123, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": nil, "_reader": "_all"},
		},
		"a2": map[string]any{
			"b1": map[string]any{
				"_20180921T000000.000Z": map[string]any{"_v": "21", "_c": 0.1, "_in": sep21, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": nil, "_reader": "_all"},
				"_20180922T000000.000Z": map[string]any{"_v": "22", "_c": 0.2, "_in": sep22, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": nil, "_reader": "_all"},
				"_latest":               map[string]any{"_v": "23", "_c": 0.3, "_in": sep23, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": nil, "_reader": "_all"},
			},
			"b2": map[string]any{
				"_latest": map[string]any{"_v": "123456", "_c": 0.4, "_in": sep20, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": nil, "_reader": "_all"},
			},
		},
		"a3": map[string]any{"b3": map[string]any{"c3": map[string]any{"d3": map[string]any{"e3": map[string]any{
			"_latest": map[string]any{"_v": "123456", "_c": 0.5, "_in": sep20, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": nil, "_reader": "_all"},
		}}}}},
	}, got.JSONPayload)
	// Certainties are written as the real they are, not widened to double precision.
	require.Contains(t, string(got.JSONPayload), `"_c":0.4,`)
	require.NotRegexp(t, `"_c":[0-9.]{6,}`, string(got.JSONPayload))

	// Without history, b1 keeps only _latest.
	got, err = b.get(t, db.ProfileGetParams{ProfileType: "seed_example", CorrelationID: "0815", WithHistory: false})
	require.NoError(t, err)
	var partial struct {
		A2 map[string]map[string]json.RawMessage `json:"a2"`
	}
	require.NoError(t, json.Unmarshal(got.JSONPayload, &partial))
	require.Len(t, partial.A2["b1"], 1)
	require.Contains(t, partial.A2["b1"], "_latest")
}

func TestProfileGetFragments(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	const id = "read-fragments"
	rows := []readRow{
		{Path: "/customer/name", Pit: readPit(1000), Value: `"Ann"`, Inserted: 1000},
		{Path: "/customer/name", Value: `"Anna"`, Inserted: 2000},
		{Path: "/customer/address/city", Value: `"Bern"`, Inserted: 3000},
		{Path: "/customerx/flag", Value: `"x"`, Inserted: 3000},
		{Path: "/contract/id", Value: `"C-1"`, Inserted: 3000},
		{Path: "/a", Value: `"a"`, Inserted: 3000},
		{Path: "/a/b", Value: `"b"`, Inserted: 3000},
		{Path: "/a-x", Value: `"a-x"`, Inserted: 3000},
		{Path: "/c_stomer/z", Value: `"z"`, Inserted: 3000},
	}
	b.insert(t, "read", id, rows...)
	all := []string{"/customer/name", "/customer/address/city", "/customerx/flag", "/contract/id", "/a", "/a/b", "/a-x", "/c_stomer/z"}

	tests := []struct {
		name       string
		fragments  []string
		latestOnly bool
		want       []string // paths in the document; none: not found
	}{
		{name: "no filter", fragments: nil, want: all},
		{name: "empty list", fragments: []string{}, want: all},
		{name: "root", fragments: []string{"/"}, want: all},
		{name: "fragment", fragments: []string{"/customer"}, want: []string{"/customer/name", "/customer/address/city"}},
		{name: "grain without leading slash", fragments: []string{"customer/name"}, want: []string{"/customer/name"}},
		{name: "trailing slash", fragments: []string{"customer/address/"}, want: []string{"/customer/address/city"}},
		{name: "several", fragments: []string{"/customer/name", "contract"}, want: []string{"/customer/name", "/contract/id"}},
		{name: "overlapping", fragments: []string{"/customer", "/customer/name"}, want: []string{"/customer/name", "/customer/address/city"}},
		{name: "grain and fragment", fragments: []string{"/a"}, want: []string{"/a", "/a/b"}},
		{name: "below a grain", fragments: []string{"/a/b"}, want: []string{"/a/b"}},
		{name: "underscore is no wildcard", fragments: []string{"/c_stomer"}, want: []string{"/c_stomer/z"}},
		{name: "without history", fragments: []string{"/customer/name"}, latestOnly: true, want: []string{"/customer/name"}},
		{name: "segment prefix is no match", fragments: []string{"/cust"}},
		{name: "percent is no wildcard", fragments: []string{"/%"}},
		{name: "pit is no path", fragments: []string{"/customer/name/_latest"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.get(t, db.ProfileGetParams{ProfileType: "read", CorrelationID: id, Fragments: tt.fragments, WithHistory: !tt.latestOnly})
			if len(tt.want) == 0 {
				pgErr := readRequireCode(t, err, "SLNFD")
				require.Equal(t, "profile with correlation id 'read-fragments' and type 'read' not found", pgErr.Message)
				return
			}
			require.NoError(t, err)
			want := readSelect(rows, tt.want...)
			if tt.latestOnly {
				var latest []readRow
				for _, r := range want {
					if r.pit() == "_latest" {
						latest = append(latest, r)
					}
				}
				want = latest
			}
			readRequireDocument(t, readDocument(id, want...), got.JSONPayload)
		})
	}
}

// A path that is a grain and a fragment holds its pits and its children side by side, and the
// document's order is fixed: by segment, history pits oldest first, then _latest, then children.
func TestProfileGetGrainAndFragmentOrder(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	b.insert(t, "read", "read-order",
		readRow{Path: "/ab", Inserted: 5},
		readRow{Path: "/a-x", Inserted: 4},
		readRow{Path: "/a/b/c", Inserted: 3},
		readRow{Path: "/a/b", Inserted: 2},
		readRow{Path: "/a", Inserted: 1},
		readRow{Path: "/a", Pit: readPit(0), Inserted: 0},
	)
	got, err := b.get(t, db.ProfileGetParams{ProfileType: "read", CorrelationID: "read-order", WithHistory: true})
	require.NoError(t, err)
	pit := func(in string) string {
		return `{"_v":"v","_c":1,"_in":` + in + `,"_ttl":"P100Y","_ttn":"P100Y","_origin":null,"_reader":"_auth"}`
	}
	require.Equal(t, `{"_id":"read-order",`+
		`"a":{"_19700101T000000.000Z":`+pit("0")+`,"_latest":`+pit("1")+`,`+
		`"b":{"_latest":`+pit("2")+`,"c":{"_latest":`+pit("3")+`}}},`+
		`"a-x":{"_latest":`+pit("4")+`},`+
		`"ab":{"_latest":`+pit("5")+`}}`, string(got.JSONPayload))
}

func TestProfileGetReaders(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	const id = "read-readers"
	rows := []readRow{
		{Path: "/p/all", Reader: "_all", Inserted: 1},
		{Path: "/p/auth", Inserted: 1}, // the default reader, _auth
		{Path: "/p/role1", Reader: "role1", Inserted: 1},
		{Path: "/p/role2", Reader: "role2", Inserted: 1},
		{Path: "/p/mixed", Pit: readPit(1), Reader: "role1", Inserted: 1},
		{Path: "/p/mixed", Reader: "_all", Inserted: 2},
	}
	b.insert(t, "read", id, rows...)
	mixedLatest, mixedHistory := rows[5], rows[4]

	tests := []struct {
		name    string
		readers []string
		want    []readRow // none: not found
	}{
		{name: "unrestricted", readers: nil, want: rows},
		{name: "anonymous", readers: []string{"_all"}, want: []readRow{rows[0], mixedLatest}},
		{name: "any token", readers: []string{"_all", "_auth"}, want: []readRow{rows[0], rows[1], mixedLatest}},
		{name: "token with role1", readers: []string{"_all", "_auth", "role1"}, want: []readRow{rows[0], rows[1], rows[2], mixedHistory, mixedLatest}},
		{name: "role2 only", readers: []string{"role2"}, want: []readRow{rows[3]}},
		{name: "unknown role", readers: []string{"role3"}},
		{name: "no readers", readers: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.get(t, db.ProfileGetParams{ProfileType: "read", CorrelationID: id, WithHistory: true, Readers: tt.readers})
			if len(tt.want) == 0 {
				readRequireCode(t, err, "SLNFD")
				return
			}
			require.NoError(t, err)
			readRequireDocument(t, readDocument(id, tt.want...), got.JSONPayload)
		})
	}
}

func TestProfileGetNotFoundAndInvalid(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	b.insert(t, "read", "read-exists", readRow{Path: "/x", Inserted: 1})

	tests := []struct {
		name, profileType, correlationID, code, message string
	}{
		{name: "unknown id", profileType: "read", correlationID: "read-nobody", code: "SLNFD",
			message: "profile with correlation id 'read-nobody' and type 'read' not found"},
		{name: "other profile type", profileType: "other", correlationID: "read-exists", code: "SLNFD",
			message: "profile with correlation id 'read-exists' and type 'other' not found"},
		{name: "empty id", profileType: "read", correlationID: "", code: "SLINV",
			message: "profile type and correlation id are required"},
		{name: "empty type", profileType: "", correlationID: "read-exists", code: "SLINV",
			message: "profile type and correlation id are required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.get(t, db.ProfileGetParams{ProfileType: tt.profileType, CorrelationID: tt.correlationID, WithHistory: true})
			pgErr := readRequireCode(t, err, tt.code)
			require.Equal(t, tt.message, pgErr.Message)
		})
	}
}

func TestProfileGetResolveLinks(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	link := func(target string) readRow {
		return readRow{Path: "/new", Value: `"` + target + `"`, Inserted: 7}
	}
	target := readRow{Path: "/x", Value: `"target's"`, Inserted: 1}
	own := readRow{Path: "/x", Value: `"old's own"`, Inserted: 1}
	b.insert(t, "read", "read-link-target", target)
	b.insert(t, "read", "read-link-old", own) // written before the link: it stays where it is
	b.insert(t, "profile_link", "read-link-old", link("read-link-target"))
	b.insert(t, "profile_link", "read-link-older", link("read-link-old"))
	b.insert(t, "profile_link", "read-link-dangling", link("read-link-void"))

	tests := []struct {
		name, id string
		resolve  bool
		wantID   string // empty: not found
		want     readRow
	}{
		{name: "two links followed", id: "read-link-older", resolve: true, wantID: "read-link-target", want: target},
		{name: "one link followed", id: "read-link-old", resolve: true, wantID: "read-link-target", want: target},
		{name: "not linked", id: "read-link-target", resolve: true, wantID: "read-link-target", want: target},
		{name: "links ignored", id: "read-link-old", resolve: false, wantID: "read-link-old", want: own},
		{name: "links ignored, no data", id: "read-link-older", resolve: false},
		{name: "link to nothing", id: "read-link-dangling", resolve: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.get(t, db.ProfileGetParams{ProfileType: "read", CorrelationID: tt.id, WithHistory: true, ResolveLinks: tt.resolve})
			grain, grainErr := b.grain(t, db.ProfileGrainGetParams{ProfileType: "read", CorrelationID: tt.id, Path: "x",
				WithHistory: true, PageSize: 250, ResolveLinks: tt.resolve})
			if tt.wantID == "" {
				pgErr := readRequireCode(t, err, "SLNFD")
				require.Contains(t, pgErr.Message, "'"+tt.id+"'")
				readRequireCode(t, grainErr, "SLNFD")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantID, got.CorrelationID)
			readRequireDocument(t, readDocument(tt.wantID, tt.want), got.JSONPayload)
			require.NoError(t, grainErr)
			require.Equal(t, tt.wantID, grain.CorrelationID)
			readRequireDocument(t, readDocument(tt.wantID, tt.want), grain.JSONPayload)
		})
	}

	// The link itself is a profile of type profile_link, readable like any other.
	got, err := b.get(t, db.ProfileGetParams{ProfileType: "profile_link", CorrelationID: "read-link-old", WithHistory: true})
	require.NoError(t, err)
	readRequireDocument(t, readDocument("read-link-old", link("read-link-target")), got.JSONPayload)
}

// A caller follows a profile link only when it may read the link grain: otherwise it reads the id
// as given, and no error names the link's target.
func TestProfileGetResolveLinksRespectsReaders(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	link := func(target, reader string) readRow {
		return readRow{Path: "/new", Value: `"` + target + `"`, Inserted: 7, Reader: reader}
	}
	target := readRow{Path: "/x", Value: `"target's"`, Inserted: 1, Reader: "_all"}
	b.insert(t, "rr", "rr-target", target)
	b.insert(t, "profile_link", "rr-hidden", link("rr-target", "vip")) // rr-hidden -> rr-target, readable by vip
	b.insert(t, "profile_link", "rr-open", link("rr-mid", "_auth"))    // rr-open -> rr-mid -> rr-target
	b.insert(t, "profile_link", "rr-mid", link("rr-target", "vip"))

	token, vip := []string{"_all", "_auth"}, []string{"_all", "_auth", "vip"}
	tests := []struct {
		name, id string
		readers  []string
		wantID   string // the id read: found when it is rr-target, else not found
	}{
		{name: "hidden link not followed", id: "rr-hidden", readers: token, wantID: "rr-hidden"},
		{name: "hidden link followed by its reader", id: "rr-hidden", readers: vip, wantID: "rr-target"},
		{name: "hidden link followed without readers", id: "rr-hidden", wantID: "rr-target"},
		{name: "readable link followed up to the hidden one", id: "rr-open", readers: token, wantID: "rr-mid"},
		{name: "every link followed by their reader", id: "rr-open", readers: vip, wantID: "rr-target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.get(t, db.ProfileGetParams{ProfileType: "rr", CorrelationID: tt.id, WithHistory: true,
				ResolveLinks: true, Readers: tt.readers})
			grain, grainErr := b.grain(t, db.ProfileGrainGetParams{ProfileType: "rr", CorrelationID: tt.id, Path: "x",
				WithHistory: true, PageSize: 250, ResolveLinks: true, Readers: tt.readers})
			var resolved string
			require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT api.profile_link_resolve($1, $2)`, tt.id, tt.readers).Scan(&resolved))
			require.Equal(t, tt.wantID, resolved)
			if tt.wantID != "rr-target" {
				for _, err := range []error{err, grainErr} {
					pgErr := readRequireCode(t, err, "SLNFD")
					require.NotContains(t, pgErr.Message+pgErr.Detail+pgErr.Hint, "rr-target")
					if tt.wantID == tt.id {
						require.Empty(t, pgErr.Detail)
					} else {
						require.Equal(t, "Its profile links lead to correlation id '"+tt.wantID+"'.", pgErr.Detail)
					}
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantID, got.CorrelationID)
			readRequireDocument(t, readDocument(tt.wantID, target), got.JSONPayload)
			require.NoError(t, grainErr)
			require.Equal(t, tt.wantID, grain.CorrelationID)
		})
	}

	// Not found behind a link: the DETAIL names the target only to a caller that may read the link.
	for _, tc := range []struct {
		readers []string
		detail  string
	}{{token, ""}, {vip, "Its profile links lead to correlation id 'rr-target'."}} {
		_, err := b.grain(t, db.ProfileGrainGetParams{ProfileType: "rr", CorrelationID: "rr-hidden", Path: "nothing",
			WithHistory: true, PageSize: 250, ResolveLinks: true, Readers: tc.readers})
		require.Equal(t, tc.detail, readRequireCode(t, err, "SLNFD").Detail)
		_, err = b.get(t, db.ProfileGetParams{ProfileType: "rr", CorrelationID: "rr-hidden", Fragments: []string{"nothing"},
			WithHistory: true, ResolveLinks: true, Readers: tc.readers})
		require.Equal(t, tc.detail, readRequireCode(t, err, "SLNFD").Detail)
	}
}

// Keys and strings that need escaping in JSON come out as valid JSON with the same text; values of
// every grain type come out as stored.
func TestProfileGetEscapingAndValues(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	const id = `read-"escape"\id`
	rows := []readRow{
		{Path: `/say "hi"/back\slash`, Value: `"line\nbreak \"quoted\" \\ ✓"`, Inserted: 1, Origin: readStr(`/belts/"1"\`)},
		{Path: "/ünïcødé ✓/日本", Value: `"値"`, Inserted: 2, Reader: `role "q"`},
		{Path: "/tab\there/nul\u0001ctl", Value: `"\u0001"`, Inserted: 3},
		{Path: "/<&>'/%_", Value: `"<&>"`, Inserted: 4, TTL: "P3M", TTN: "PT1.5S"},
		{Path: "/values/array", GrainType: "a", Value: `["a", "b\"c", "a"]`, Certainty: 0.25, Inserted: 5},
		{Path: "/values/empty", GrainType: "a", Value: `[]`, Inserted: 6},
		{Path: "/values/counter", GrainType: "c", Value: `{"_step": 1.5, "_current": 3, "_initial": 0}`, Certainty: 0.7, Inserted: 7},
	}
	b.insert(t, "read", id, rows...)

	got, err := b.get(t, db.ProfileGetParams{ProfileType: "read", CorrelationID: id, WithHistory: true})
	require.NoError(t, err)
	readRequireDocument(t, readDocument(id, rows...), got.JSONPayload)

	got, err = b.get(t, db.ProfileGetParams{ProfileType: "read", CorrelationID: id, WithHistory: true, Readers: []string{`role "q"`}})
	require.NoError(t, err)
	readRequireDocument(t, readDocument(id, rows[1]), got.JSONPayload)

	got, err = b.get(t, db.ProfileGetParams{ProfileType: "read", CorrelationID: id, WithHistory: true, Fragments: []string{`say "hi"`, "/<&>'/%_"}})
	require.NoError(t, err)
	readRequireDocument(t, readDocument(id, rows[0], rows[3]), got.JSONPayload)

	grain, err := b.grain(t, db.ProfileGrainGetParams{ProfileType: "read", CorrelationID: id, Path: "ünïcødé ✓/日本", WithHistory: true, PageSize: 10})
	require.NoError(t, err)
	readRequireDocument(t, readDocument(id, rows[1]), grain.JSONPayload)
}

func TestProfileGrainGetPaging(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	const id = "read-paging"
	latest := readRow{Path: "/customer/contract", Value: `"6"`, Inserted: 6000}
	rows := []readRow{latest}
	history := map[int]readRow{}
	for i := 1; i <= 5; i++ {
		ms := int64(i) * 1000
		history[i] = readRow{Path: "/customer/contract", Pit: readPit(ms), Value: `"` + string(rune('0'+i)) + `"`, Inserted: ms}
		rows = append(rows, history[i])
	}
	secret := readRow{Path: "/customer/contract", Pit: readPit(500), Value: `"0"`, Inserted: 500, Reader: "secret"}
	rows = append(rows, secret)
	// Neighbours that are not part of the grain.
	b.insert(t, "read", id, append(rows, readRow{Path: "/customer/contract/terms", Inserted: 1}, readRow{Path: "/customer/contracts", Inserted: 1})...)
	token := []string{"_all", "_auth"}

	tests := []struct {
		name         string
		readers      []string
		noHistory    bool
		size, offset int32
		want         []readRow // in document order
		total        int32
	}{
		{name: "all versions", readers: token, size: 250, want: []readRow{latest, history[5], history[4], history[3], history[2], history[1]}, total: 6},
		{name: "first page", readers: token, size: 2, want: []readRow{latest, history[5]}, total: 6},
		{name: "second page", readers: token, size: 2, offset: 2, want: []readRow{history[4], history[3]}, total: 6},
		{name: "last page", readers: token, size: 2, offset: 4, want: []readRow{history[2], history[1]}, total: 6},
		{name: "short last page", readers: token, size: 4, offset: 4, want: []readRow{history[2], history[1]}, total: 6},
		{name: "past the end", readers: token, size: 2, offset: 6, want: nil, total: 6},
		{name: "one per page", readers: token, size: 1, offset: 3, want: []readRow{history[3]}, total: 6},
		{name: "without history", readers: token, noHistory: true, size: 250, want: []readRow{latest}, total: 1},
		{name: "without history, past the end", readers: token, noHistory: true, size: 250, offset: 1, want: nil, total: 1},
		{name: "unrestricted", readers: nil, size: 250, offset: 5, want: []readRow{history[1], secret}, total: 7},
		{name: "secret only", readers: []string{"secret"}, size: 250, want: []readRow{secret}, total: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.grain(t, db.ProfileGrainGetParams{ProfileType: "read", CorrelationID: id, Path: "customer/contract",
				WithHistory: !tt.noHistory, PageSize: tt.size, PageOffset: tt.offset, Readers: tt.readers})
			require.NoError(t, err)
			require.Equal(t, id, got.CorrelationID)
			require.Equal(t, "read", got.ProfileType)
			require.Equal(t, tt.total, got.TotalGrainVersions)
			want := readDocument(id, tt.want...)
			if len(tt.want) == 0 {
				want = map[string]any{"_id": id, "customer": map[string]any{"contract": map[string]any{}}}
			}
			readRequireDocument(t, want, got.JSONPayload)
			raw := string(got.JSONPayload)
			for i := 1; i < len(tt.want); i++ {
				require.Less(t, strings.Index(raw, `"`+tt.want[i-1].pit()+`"`), strings.Index(raw, `"`+tt.want[i].pit()+`"`),
					"%s before %s", tt.want[i-1].pit(), tt.want[i].pit())
			}
		})
	}
}

func TestProfileGrainGetPaths(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	const id = "read-paths"
	contract := readRow{Path: "/customer/contract", Inserted: 1}
	a := readRow{Path: "/a", Inserted: 1}
	gone := readRow{Path: "/gone", Pit: readPit(1), Inserted: 1} // _latest deleted, history kept
	b.insert(t, "read", id, contract, a, gone,
		readRow{Path: "/a/b", Inserted: 1},
		readRow{Path: "/secret/x", Reader: "role1", Inserted: 1},
	)

	tests := []struct {
		name       string
		id, path   string
		readers    []string
		latestOnly bool
		size       *int32 // default 250
		offset     int32
		want       *readRow
		code       string
		message    string
	}{
		{name: "relative path", path: "customer/contract", want: &contract},
		{name: "absolute path", path: "/customer/contract", want: &contract},
		{name: "trailing slash", path: "/customer/contract/", want: &contract},
		{name: "grain that is also a fragment", path: "a", want: &a},
		{name: "empty path", path: "", code: "SLINV", message: "you need to provide the full path of the grain"},
		{name: "root", path: "/", code: "SLINV", message: "you need to provide the full path of the grain"},
		{name: "fragment", path: "customer", code: "SLINV", message: "you need to provide the full path of the grain"},
		{name: "unknown grain", path: "customer/nope", code: "SLNFD",
			message: "grain '/customer/nope' of profile with correlation id 'read-paths' and type 'read' not found"},
		{name: "unknown profile", id: "read-nobody", path: "customer/contract", code: "SLNFD"},
		{name: "segment prefix", path: "cust", code: "SLNFD"},
		{name: "unreadable fragment", path: "secret", readers: []string{"_all", "_auth"}, code: "SLNFD"},
		{name: "readable fragment", path: "secret", readers: []string{"role1"}, code: "SLINV"},
		{name: "history only, without history", path: "gone", latestOnly: true, code: "SLNFD"},
		{name: "history only", path: "gone", want: &gone},
		{name: "page size 1", path: "customer/contract", size: readInt32(1), want: &contract},
		{name: "page size 0", path: "customer/contract", size: readInt32(0), code: "SLINV", message: "page size must be between 1 and 250"},
		{name: "page size 251", path: "customer/contract", size: readInt32(251), code: "SLINV", message: "page size must be between 1 and 250"},
		{name: "negative offset", path: "customer/contract", offset: -1, code: "SLINV", message: "offset must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size := int32(250)
			if tt.size != nil {
				size = *tt.size
			}
			got, err := b.grain(t, db.ProfileGrainGetParams{ProfileType: "read", CorrelationID: readOr(tt.id, id), Path: tt.path,
				WithHistory: !tt.latestOnly, PageSize: size, PageOffset: tt.offset, Readers: tt.readers})
			if tt.code != "" {
				pgErr := readRequireCode(t, err, tt.code)
				if tt.message != "" {
					require.Equal(t, tt.message, pgErr.Message)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, int32(1), got.TotalGrainVersions)
			readRequireDocument(t, readDocument(id, *tt.want), got.JSONPayload)
		})
	}
}

// The flat views decode every grain type for psql.
func TestProfileStoreViews(t *testing.T) {
	t.Parallel()
	b := readSetup(t)
	const id = "read-views"
	b.insert(t, "read", id,
		readRow{Path: "/t", Pit: readPit(1000), Value: `"old"`, Inserted: 1000},
		readRow{Path: "/t", Value: `"new"`, Inserted: 1537660800123, Origin: readStr("/belts/1"), Reader: "_all", Certainty: 0.4},
		readRow{Path: "/a", GrainType: "a", Value: `["x", "y"]`, Inserted: 1, TTL: "P1D"},
		readRow{Path: "/c", GrainType: "c", Value: `{"_step": 1.5, "_current": 3, "_initial": 0}`, Inserted: 1},
	)
	b.insert(t, "profile_link", id, readRow{Path: "/new", Value: `"read-views-target"`, Inserted: 1537660800123})

	rows, err := b.tx.Query(b.ctx, `
		SELECT path, grain_type, value_text, value_array, counter_current::text, counter_step::text,
		       counter_initial::text, certainty, inserted, ttl, reader, origin, expires_at
		FROM api.profilestore_latest WHERE correlation_id = $1 AND profile_type = 'read' ORDER BY path`, id)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[readLatest])
	require.NoError(t, err)
	for i := range got {
		got[i].Inserted = got[i].Inserted.UTC()
		if got[i].ExpiresAt != nil {
			utc := got[i].ExpiresAt.UTC()
			got[i].ExpiresAt = &utc
		}
	}
	day := time.UnixMilli(1).UTC().Add(24 * time.Hour)
	require.Equal(t, []readLatest{
		{Path: "/a", GrainType: "a", ValueArray: []string{"x", "y"}, Certainty: 1,
			Inserted: time.UnixMilli(1).UTC(), TTL: "P1D", Reader: "_auth", ExpiresAt: &day},
		{Path: "/c", GrainType: "c", CounterCurrent: readStr("3"), CounterStep: readStr("1.5"), CounterInitial: readStr("0"),
			Certainty: 1, Inserted: time.UnixMilli(1).UTC(), TTL: "P100Y", Reader: "_auth"},
		{Path: "/t", GrainType: "t", ValueText: readStr("new"), Certainty: 0.4,
			Inserted: time.UnixMilli(1537660800123).UTC(), TTL: "P100Y", Reader: "_all", Origin: readStr("/belts/1")},
	}, got)

	rows, err = b.tx.Query(b.ctx, `SELECT pit || '=' || value_text FROM api.profilestore_history WHERE correlation_id = $1 AND path = '/t' ORDER BY pit`, id)
	require.NoError(t, err)
	pits, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{readPit(1000) + "=old", "_latest=new"}, pits)

	var target, resolved string
	var inserted time.Time
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT target_correlation_id, resolved_correlation_id, inserted FROM api.profile_links WHERE correlation_id = $1`, id).
		Scan(&target, &resolved, &inserted))
	require.Equal(t, "read-views-target", target)
	require.Equal(t, "read-views-target", resolved)
	require.True(t, inserted.Equal(time.UnixMilli(1537660800123)))
}

// readLatest is a row of api.profilestore_latest as TestProfileStoreViews selects it.
type readLatest struct {
	Path, GrainType                             string
	ValueText                                   *string
	ValueArray                                  []string
	CounterCurrent, CounterStep, CounterInitial *string
	Certainty                                   float32
	Inserted                                    time.Time
	TTL, Reader                                 string
	Origin                                      *string
	ExpiresAt                                   *time.Time
}
