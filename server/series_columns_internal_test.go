package server

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestReadFlatColumns(t *testing.T) {
	c := readFlatColumns([]byte(`{"format": "flatJSON", "fields": ["value", "deltaTime"], "points": [[20.1, 0], [20.15, 1.0000005], [-5e-2, 2e0], [71, 3]]}`), "e")
	require.NotNil(t, c)
	require.Equal(t, []string{"e"}, c.events)
	require.Equal(t, []string{"value", "deltaTime"}, c.fields)
	require.Equal(t, []int16{2, 0}, c.scales)
	require.Nil(t, c.points)
	require.Equal(t, []int64{0, 1000001, 2000000, 3000000}, c.time)
	require.Equal(t, []int64{2010, 2015, -5, 7100}, c.v[0])
	require.Nil(t, c.v[1])

	b := readSeriesBatch([]byte(`{"format": "seriesBatch", "data": [
		{"eventId": "a", "data": {"format": "flatJSON", "fields": ["timestamp", "x", "y"], "points": [[1000, 1, null], [1001.5, 2, 3.5]]}},
		{"data": {"fields": ["deltaTime", "x"], "points": [[0, 7]], "format": "flatJSON"}, "eventId": "b"}]}`))
	require.NotNil(t, b)
	require.True(t, b.batch)
	require.Equal(t, []string{"a", "b"}, b.events)
	require.Equal(t, []int32{3, 2}, b.counts)
	require.Equal(t, []int16{0, 0, 1, 0, 0}, b.scales)
	require.Equal(t, []int32{2, 1}, b.points)
	require.Equal(t, []int64{1000000000, 1001500000, 0}, b.time)
	require.Equal(t, []int64{1, 2, 7}, b.v[0])
	require.Equal(t, []int64{nullCell, 35, nullCell}, b.v[1])

	// What only the flatJSON way carries, or refuses in its own words.
	for _, body := range []string{
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": []}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, "1"]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, true]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1, 2]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[-1, 1]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[1e11, 1]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[null, 1]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1234567890123456789]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 123456789012345678], [1, 0.5]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1e1000000]]}`,
		`{"format": "flatJSON", "fields": ["value"], "points": [[1]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "timestamp"], "points": [[1, 1]]}`,
		`{"format": "flatJSON", "points": [[0, 1]], "fields": ["deltaTime", "value"]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]], "points": [[0, 2]]}`,
		`{"format": "flatjson", "fields": ["deltaTime", "value"], "points": [[0, 1]]}`,
		`{"fields": ["deltaTime", "value"], "points": [[0, 1]]}`,
		`[{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]]}]`,
	} {
		require.Nil(t, readFlatColumns([]byte(body), "e"), body)
	}
	for _, body := range []string{
		`{"format": "seriesBatch", "data": []}`,
		`{"format": "seriesBatch", "data": [{"eventId": 1, "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]]}}]}`,
		`{"format": "seriesBatch", "data": [{"eventId": "a"}]}`,
		`{"format": "flatJSON", "data": []}`,
	} {
		require.Nil(t, readSeriesBatch([]byte(body)), body)
	}
}

// The reader checks JSON's grammar as it reads: a body that is not JSON is never read.
func TestSeriesColumnsRefuseInvalidJSON(t *testing.T) {
	for _, points := range []string{`[[0, 1.]]`, `[[0, 01]]`, `[[0, -]]`, `[[0, 1.2.3]]`, `[[0, 1e]]`, `[[0, 1e+]]`,
		`[[0, .5]]`, `[[0, nul]]`, `[[0, nulls]]`, `[[0, 1],]`, `[[0, 1,]]`, `[[0 1]]`, `[[0, 1]`, `[[0, +1]]`, `[[0, 0x1]]`} {
		body := `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": ` + points + `}`
		require.False(t, json.Valid([]byte(body)), body)
		require.Nil(t, readFlatColumns([]byte(body), "e"), body)
	}
	for _, body := range []string{
		"{\"format\": \"flatJSON\", \"fields\": [\"deltaTime\", \"val\tue\"], \"points\": [[0, 1]]}",
		`{"format": "flatJSON", "x": [1,], "fields": ["deltaTime", "value"], "points": [[0, 1]]}`,
		`{"format": "flatJSON", "x": tru, "fields": ["deltaTime", "value"], "points": [[0, 1]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]]} x`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]],}`,
	} {
		require.False(t, json.Valid([]byte(body)), body)
		require.Nil(t, readFlatColumns([]byte(body), "e"), body)
	}
	batch := `{"format": "seriesBatch", "data": [{"eventId": "a", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1.]]}}]}`
	require.Nil(t, readSeriesBatch([]byte(batch)))
	require.NotNil(t, readSeriesBatch([]byte(strings.Replace(batch, "1.]", "1.0]", 1))))
}

// FuzzSeriesColumns feeds arbitrary flatJSON bodies to the typed-column reader: it either leaves
// the body to the flatJSON way (nil) or reads every cell exactly: each time, in microseconds, is
// the JSON number rounded half away from zero, and each value, at its column's scale, equals the
// JSON number (null for null).
//
//	go test ./server/ -run '^$' -fuzz FuzzSeriesColumns -fuzztime 60s
func FuzzSeriesColumns(f *testing.F) {
	for _, s := range []string{
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 20.1], [1.5, 20.15], [2, null]]}`,
		`{"format": "flatJSON", "fields": ["latitude", "timestamp", "longitude"], "points": [[46.5, 1700000000.000001, 6.6e1]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0.0000005, -0.0], [99999999999.9999999, 1E-18]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 999999999999999999], [1, 1e17]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "a", "b", "c", "d", "e", "f", "g", "h"], "points": [[0, 1, 2, 3, 4, 5, 6, 7, 8]]}`,
		`{"format": "flatJSON", "x": {"y": ["]", "\""]}, "fields": ["deltaTime", "v\u00e9"], "points": [[0, 1]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := readFlatColumns(body, "e")
		if c != nil || readSeriesBatch(body) != nil {
			require.True(t, json.Valid(body), "the reader checks the grammar: it read %q", body)
		}
		if c == nil || !utf8.Valid(body) || hasNULEscape(body) {
			return // the flatJSON way, or refused by the route
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var flat struct {
			Format string
			Fields []string
			Points [][]*json.Number
		}
		require.NoError(t, dec.Decode(&flat), "%s", body)
		require.Equal(t, "flatJSON", flat.Format)
		require.Equal(t, flat.Fields, c.fields)
		require.Len(t, c.time, len(flat.Points))
		ti := -1
		for i, name := range flat.Fields {
			if name == "deltaTime" || name == "timestamp" {
				ti = i
			}
		}
		require.GreaterOrEqual(t, ti, 0)
		for j, p := range flat.Points {
			require.Len(t, p, len(flat.Fields))
			k := 0
			for i, cell := range p {
				if i == ti {
					require.NotNil(t, cell)
					x, ok := new(big.Rat).SetString(cell.String())
					require.True(t, ok)
					x.Mul(x, big.NewRat(1000000, 1))
					require.True(t, x.Sign() >= 0 && x.Cmp(big.NewRat(100000000000000000, 1)) < 0, "%s", cell)
					// Half away from zero: floor(x + 1/2) for x ≥ 0.
					x.Add(x, big.NewRat(1, 2))
					want := new(big.Int).Quo(x.Num(), x.Denom())
					require.Equal(t, want.Int64(), c.time[j], "time %s", cell)
					continue
				}
				got := c.v[k][j]
				scale := c.scales[i]
				k++
				if cell == nil {
					require.Equal(t, int64(nullCell), got)
					continue
				}
				x, ok := new(big.Rat).SetString(cell.String())
				require.True(t, ok)
				stored := new(big.Rat).SetFrac(big.NewInt(got), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
				require.Equal(t, 0, x.Cmp(stored), "value %s read as %d at scale %d", cell, got, scale)
				require.Less(t, abs64(got), int64(1000000000000000000))
			}
		}
	})
}
