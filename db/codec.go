package db

import (
	"context"
	"encoding/binary"
	"unsafe"

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
				return intArrayPlan[int64]{pgtype.Int8OID}
			}
		case []int32:
			if oid == pgtype.Int4ArrayOID {
				return intArrayPlan[int32]{pgtype.Int4OID}
			}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// intArrayPlan writes a []T as an array of elem (int8 for int64, int4 for int32).
type intArrayPlan[T int32 | int64] struct{ elem uint32 }

// Encode writes PostgreSQL's binary array: dimensions, a null flag, the element type, the
// dimension's length and lower bound, then every element as its length and its bytes. A nil
// slice is NULL, as pgx encodes it.
func (p intArrayPlan[T]) Encode(value any, buf []byte) ([]byte, error) {
	xs := value.([]T)
	if xs == nil {
		return nil, nil
	}
	size := int(unsafe.Sizeof(T(0)))
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, p.elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(xs)))
	buf = binary.BigEndian.AppendUint32(buf, 1)
	step := 4 + size
	buf = append(buf, make([]byte, step*len(xs))...)
	out := buf[len(buf)-step*len(xs):]
	for i, x := range xs {
		e := out[step*i:]
		binary.BigEndian.PutUint32(e, uint32(size))
		if size == 8 {
			binary.BigEndian.PutUint64(e[4:], uint64(x))
		} else {
			binary.BigEndian.PutUint32(e[4:], uint32(x))
		}
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
