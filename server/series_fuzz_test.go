package server

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzSeriesCSV feeds arbitrary bodies to the CSV reader of the series routes: it refuses them
// with an error (a 400) or makes a flatJSON object of strings and nulls with one header of
// fields, never anything else. The seed corpus is in testdata/fuzz/FuzzSeriesCSV.
//
//	go test ./server/ -run '^$' -fuzz FuzzSeriesCSV -fuzztime 60s
func FuzzSeriesCSV(f *testing.F) {
	for _, s := range []string{
		"deltaTime,value\n0,1.5\n1,2\n",
		"timestamp,latitude,longitude\r\n1700000000,46.5,6.6\r\n",
		"deltaTime,value\n0,\"1,5\"\n1,\n",
		"deltaTime,value\n0\n1,2,3\n",
		"\"unterminated\n",
		"",
		"deltaTime\xff,value\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := seriesCSV(body)
		if err != nil {
			require.Nil(t, out)
			return
		}
		var flat struct {
			Format string
			Fields []string
			Points [][]*string
		}
		require.NoError(t, json.Unmarshal(out, &flat), "%s", out)
		require.Equal(t, "flatJSON", flat.Format)
		require.NotNil(t, flat.Fields)
		require.NotNil(t, flat.Points)
	})
}
