package db

import (
	"math"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// The short paths write what pgx's own array codec writes, byte for byte.
func TestIntArrayCodecMatchesPgx(t *testing.T) {
	m := pgtype.NewMap()
	matches(t, m, pgtype.Int8ArrayOID, intArrayPlan[int64]{pgtype.Int8OID},
		[][]int64{nil, {}, {0}, {1, -1, math.MaxInt64, math.MinInt64, 1700000000000000}})
	matches(t, m, pgtype.Int4ArrayOID, intArrayPlan[int32]{pgtype.Int4OID},
		[][]int32{nil, {}, {0}, {1, -1, math.MaxInt32, math.MinInt32, 100}})
	// The short paths serve exactly their slice type in binary, for their array type.
	c := intArrayCodec{&pgtype.ArrayCodec{}}
	require.IsType(t, intArrayPlan[int64]{}, c.PlanEncode(m, pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, []int64{}))
	require.IsType(t, intArrayPlan[int32]{}, c.PlanEncode(m, pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, []int32{}))
}

func matches[T int32 | int64](t *testing.T, m *pgtype.Map, oid uint32, plan intArrayPlan[T], cases [][]T) {
	t.Helper()
	for _, xs := range cases {
		want, err := m.Encode(oid, pgtype.BinaryFormatCode, xs, []byte("prefix"))
		require.NoError(t, err)
		got, err := plan.Encode(xs, []byte("prefix"))
		require.NoError(t, err)
		if xs == nil {
			require.Nil(t, got, "nil is NULL")
			continue
		}
		require.Equal(t, want, got, "%v", xs)
	}
}
