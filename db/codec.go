package db

import (
	"context"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// registerCodecs makes a connection encode what the series routes send by the ten thousand in one
// pass: pgx's generic array codec boxes every element of a []int64 or []int32 in an interface (an
// allocation each, and work for the garbage collector), which was most of the Go side's cost of a
// large body. The values and their encoding are pgx's own; only the path is shorter.
func registerCodecs(conn *pgx.Conn) {
	m := conn.TypeMap()
	if t, ok := m.TypeForOID(pgtype.Int8ArrayOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: intArrayCodec{t.Codec}})
	}
	if t, ok := m.TypeForOID(pgtype.Int4ArrayOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: intArrayCodec{t.Codec}})
	}
}

// intArrayCodec is int8[]'s or int4[]'s codec, with a []int64 or []int32 in binary written
// straight.
type intArrayCodec struct{ pgtype.Codec }

func (c intArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case []int64:
			if oid == pgtype.Int8ArrayOID {
				return int8ArrayPlan{}
			}
		case []int32:
			if oid == pgtype.Int4ArrayOID {
				return int4ArrayPlan{}
			}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// arrayHeader writes the start of PostgreSQL's binary array of n elements of type elem: dimensions,
// a null flag, the element type, the dimension's length and lower bound. Every element then
// follows as its length and its bytes.
func arrayHeader(buf []byte, elem uint32, n int) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1)
}

type int8ArrayPlan struct{}

// Encode writes xs as int8[]; a nil slice is NULL, as pgx encodes it.
func (int8ArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	xs := value.([]int64)
	if xs == nil {
		return nil, nil
	}
	buf = arrayHeader(buf, pgtype.Int8OID, len(xs))
	buf = append(buf, make([]byte, 12*len(xs))...)
	out := buf[len(buf)-12*len(xs):]
	for i, x := range xs {
		binary.BigEndian.PutUint32(out[12*i:], 8)
		binary.BigEndian.PutUint64(out[12*i+4:], uint64(x))
	}
	return buf, nil
}

type int4ArrayPlan struct{}

// Encode writes xs as int4[]; a nil slice is NULL, as pgx encodes it.
func (int4ArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	xs := value.([]int32)
	if xs == nil {
		return nil, nil
	}
	buf = arrayHeader(buf, pgtype.Int4OID, len(xs))
	buf = append(buf, make([]byte, 8*len(xs))...)
	out := buf[len(buf)-8*len(xs):]
	for i, x := range xs {
		binary.BigEndian.PutUint32(out[8*i:], 4)
		binary.BigEndian.PutUint32(out[8*i+4:], uint32(x))
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
