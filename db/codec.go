package db

import (
	"context"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// registerCodecs makes a connection encode what the series routes send by the ten thousand in one
// pass: pgx's generic array codec boxes every element of a []int64 in an interface (an allocation
// each, and work for the garbage collector), which was most of the Go side's cost of a large body.
// The values and their encoding are pgx's own; only the path is shorter.
func registerCodecs(conn *pgx.Conn) {
	m := conn.TypeMap()
	if t, ok := m.TypeForOID(pgtype.Int8ArrayOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: int8ArrayCodec{t.Codec}})
	}
}

// int8ArrayCodec is int8[]'s codec, with a []int64 in binary written straight.
type int8ArrayCodec struct{ pgtype.Codec }

func (c int8ArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([]int64); ok && format == pgtype.BinaryFormatCode {
		return int8ArrayPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

type int8ArrayPlan struct{}

// Encode writes PostgreSQL's binary array: dimensions, a null flag, the element type, each
// dimension's length and lower bound, then every element as its length and its bytes. A nil
// slice is NULL, as pgx encodes it.
func (int8ArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	xs := value.([]int64)
	if xs == nil {
		return nil, nil
	}
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, pgtype.Int8OID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(xs)))
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = append(buf, make([]byte, 12*len(xs))...)
	out := buf[len(buf)-12*len(xs):]
	for i, x := range xs {
		binary.BigEndian.PutUint32(out[12*i:], 8)
		binary.BigEndian.PutUint64(out[12*i+4:], uint64(x))
	}
	return buf, nil
}

// afterConnect runs registerCodecs, then the hook a caller set, if any.
func afterConnect(next func(context.Context, *pgx.Conn) error) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		registerCodecs(conn)
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}
