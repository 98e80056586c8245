package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCountPoints(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body string
		n    int
	}{
		{`{"format":"flatJSON","fields":["deltaTime","value"],"points":[[0,1],[1,2],[2,3]]}`, 3},
		{`{"points":[], "fields":["points"]}`, 0},
		{`{"fields":["a","b"],"format":"flatJSON","points":[[0,"[\"points\",[1]]"],[1,{"x":[2]}]]}`, 2},
		{`{"format":"seriesBatch","data":[{"eventId":"a","data":{"points":[[0,1],[1,2]]}},{"eventId":"b","data":{"points":[[0,1]]}}]}`, 3},
		{`{"note":"\"points\":[[1]]","points":[[1 , 2] , [3,4]]}`, 2},
	} {
		require.Equal(t, c.n, countPoints([]byte(c.body)), c.body)
	}
}
