package server

import (
	"strconv"

	"github.com/silo-db/silo/db"
)

// Formatting a page of points read as typed columns (api.series_read_columns) into flatJSON arrays
// or CSV lines, exactly as the SQL's series_private.value_json and value_csv write them: numbers as
// the decimals they were given in, from their digits and scale with integer arithmetic, appended to
// one reused buffer (no allocation per point).

// nullScale in a scale column marks a null value.
const nullScale = -32768

// pageColumns is a page's columns by field, in the read's order.
type pageColumns struct {
	time  []int64
	kinds []string
	n     [8][]int64
	s     [8][]int16
	t     [8][]string
}

// seriesPageColumns puts the columns of a page, which come by stored position, in the read's
// order of fields.
func seriesPageColumns(p db.SeriesReadColumnsRow) pageColumns {
	n := [8][]int64{p.N1, p.N2, p.N3, p.N4, p.N5, p.N6, p.N7, p.N8}
	s := [8][]int16{p.S1, p.S2, p.S3, p.S4, p.S5, p.S6, p.S7, p.S8}
	t := [8][]string{p.T1, p.T2, p.T3, p.T4, p.T5, p.T6, p.T7, p.T8}
	c := pageColumns{time: p.TimeUs, kinds: p.Kinds}
	for k, pos := range p.Positions {
		if k < len(c.n) && pos >= 1 && int(pos) <= len(n) {
			c.n[k], c.s[k], c.t[k] = n[pos-1], s[pos-1], t[pos-1]
		}
	}
	return c
}

// appendPoint appends point i as a flatJSON array, or a CSV line (with its line break).
func (c *pageColumns) appendPoint(b []byte, i int, csv bool) []byte {
	if !csv {
		b = append(b, '[')
	}
	b = appendDecimal(b, c.time[i], 6)
	for k, kind := range c.kinds {
		b = append(b, ',')
		if c.s[k][i] == nullScale {
			if !csv {
				b = append(b, "null"...)
			}
			continue
		}
		switch kind {
		case "string":
			if csv {
				b = appendCSVString(b, c.t[k][i])
			} else {
				b = appendJSONString(b, c.t[k][i])
			}
		case "boolean":
			b = strconv.AppendBool(b, c.n[k][i] != 0)
		default:
			b = appendDecimal(b, c.n[k][i], int(c.s[k][i]))
		}
	}
	if csv {
		return append(b, '\n')
	}
	return append(b, ']')
}

// appendDecimal appends n / 10^s as series_private.value_json writes it: without trailing zeros
// for s from 1 to 18, n itself for 0, exponent form otherwise.
func appendDecimal(b []byte, n int64, s int) []byte {
	if s == 0 {
		return strconv.AppendInt(b, n, 10)
	}
	if s < 0 || s > 18 {
		b = strconv.AppendInt(b, n, 10)
		b = append(b, 'e')
		return strconv.AppendInt(b, int64(-s), 10)
	}
	u := uint64(n)
	if n < 0 {
		b = append(b, '-')
		u = uint64(-n) // two's complement: right for the smallest int64 too
	}
	p := uint64(pow10[s])
	b = strconv.AppendUint(b, u/p, 10)
	frac := u % p
	if frac == 0 {
		return b
	}
	for frac%10 == 0 {
		frac /= 10
		s--
	}
	b = append(b, '.')
	var digits [19]byte
	for j := s - 1; j >= 0; j-- {
		digits[j] = byte('0' + frac%10)
		frac /= 10
	}
	return append(b, digits[:s]...)
}

// appendJSONString appends t as PostgreSQL's to_json writes a string.
func appendJSONString(b []byte, t string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for j := 0; j < len(t); j++ {
		switch c := t[j]; c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// appendCSVString appends t as a CSV cell: quoted when it holds a quote, comma or line break, or is
// empty.
func appendCSVString(b []byte, t string) []byte {
	quote := t == ""
	for j := 0; j < len(t) && !quote; j++ {
		quote = t[j] == '"' || t[j] == ',' || t[j] == '\r' || t[j] == '\n'
	}
	if !quote {
		return append(b, t...)
	}
	b = append(b, '"')
	for j := 0; j < len(t); j++ {
		if t[j] == '"' {
			b = append(b, '"')
		}
		b = append(b, t[j])
	}
	return append(b, '"')
}
