package db

import (
	"math"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// The short path writes what pgx's own array codec writes, byte for byte.
func TestIntArrayCodecMatchesPgx(t *testing.T) {
	m := pgtype.NewMap()
	for _, xs := range [][]int64{nil, {}, {0}, {1, -1, math.MaxInt64, math.MinInt64, 1700000000000000}} {
		want, err := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, xs, []byte("prefix"))
		require.NoError(t, err)
		got, err := int8ArrayPlan{}.Encode(xs, []byte("prefix"))
		require.NoError(t, err)
		if xs == nil {
			require.Nil(t, got, "nil is NULL")
			continue
		}
		require.Equal(t, want, got, "%v", xs)
	}
	for _, xs := range [][]int32{nil, {}, {0}, {1, -1, math.MaxInt32, math.MinInt32, 100}} {
		want, err := m.Encode(pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, xs, []byte("prefix"))
		require.NoError(t, err)
		got, err := int4ArrayPlan{}.Encode(xs, []byte("prefix"))
		require.NoError(t, err)
		if xs == nil {
			require.Nil(t, got, "nil is NULL")
			continue
		}
		require.Equal(t, want, got, "%v", xs)
	}
	// The short paths serve exactly their slice type in binary, for their array type.
	c := intArrayCodec{&pgtype.ArrayCodec{}}
	require.IsType(t, int8ArrayPlan{}, c.PlanEncode(m, pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, []int64{}))
	require.IsType(t, int4ArrayPlan{}, c.PlanEncode(m, pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, []int32{}))
}
