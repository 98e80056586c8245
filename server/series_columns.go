package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Series bodies as typed columns. Most series bodies are a sensor's numbers: for those the handler
// reads the flatJSON (or seriesBatch) itself, into one array per column (times in microseconds,
// numbers as their digits at one scale per body and field, as the SQL stores them), and calls
// api.series_append_columns, which checks and writes them without any JSON. PostgreSQL then does
// per point a few integer comparisons and the insert, rather than reading jsonb and converting each
// cell from text.
//
// The reader takes only what it can carry exactly: a valid body whose cells are JSON numbers (null
// in value columns), of at most 18 significant digits that fit the body's scale, times from 0 to
// 1e11 seconds. Anything else (strings, booleans, longer numbers, a ragged or repeated member,
// bodies the SQL refuses) goes the flatJSON way, api.series_append_requests, whose rules and
// messages are the reference; so does a request with an idempotency key, whose answer that
// function records.

// seriesTryColumns writes a body as columns when it can be read so. handled is false when the body
// must go the flatJSON way (see above), which checks it as every JSON body is checked; otherwise the
// body was written (err nil) or refused. The reader checks JSON's grammar as it reads, so a body it
// writes needs no json.Valid pass first; the rules beyond JSON's (UTF-8, no \u0000) are checked
// here.
func (s *server) seriesTryColumns(ctx context.Context, access, event string, body []byte, key *string) (handled bool, err error) {
	if key != nil || !utf8.Valid(body) || hasNULEscape(body) {
		return false, nil
	}
	var c *seriesColumns
	if event == "" {
		c = readSeriesBatch(body)
	} else {
		c = readFlatColumns(body, event)
	}
	if c == nil {
		return false, nil
	}
	err = s.columnsJoin.do(ctx, access, c)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "SASTR" {
		return false, nil // refused: the flatJSON way says why, in the client's own terms
	}
	return true, err
}

// jsonScan reads a JSON text, checking its grammar as it goes: what it accepts is valid JSON (the
// route still checks UTF-8 and \u0000 on the whole body), so a body it reads whole needs no
// json.Valid pass first (a tenth of a large body's cost in Go). Values it skips are checked with
// json.Valid.
type jsonScan struct {
	b []byte
	i int
}

func (s *jsonScan) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// next skips blanks and returns the next byte (0 at the end).
func (s *jsonScan) next() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// str reads a string.
func (s *jsonScan) str() (string, bool) {
	if s.next() != '"' {
		return "", false
	}
	start := s.i
	escaped := false
	for s.i++; s.i < len(s.b); s.i++ {
		if s.b[s.i] < 0x20 {
			return "", false // a control character must be escaped
		}
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i++
		case '"':
			s.i++
			if !escaped {
				return string(s.b[start+1 : s.i-1]), true
			}
			var out string
			if json.Unmarshal(s.b[start:s.i], &out) != nil {
				return "", false
			}
			return out, true
		}
	}
	return "", false
}

// skip skips one value of any kind, and checks it.
func (s *jsonScan) skip() bool {
	s.ws()
	start := s.i
	return s.pass() && json.Valid(s.b[start:s.i])
}

// pass moves past one value of any kind.
func (s *jsonScan) pass() bool {
	switch s.next() {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		depth := 0
		for ; s.i < len(s.b); s.i++ {
			switch s.b[s.i] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			case '"':
				if _, ok := s.str(); !ok {
					return false
				}
				s.i--
			}
		}
		return false
	default:
		for s.i < len(s.b) && s.b[s.i] != ',' && s.b[s.i] != '}' && s.b[s.i] != ']' && s.b[s.i] != ' ' &&
			s.b[s.i] != '\n' && s.b[s.i] != '\t' && s.b[s.i] != '\r' {
			s.i++
		}
		return true
	}
}

// object reads an object, calling member for each key with the scanner at its value; member
// reads the value and says whether it could. A key given twice makes the object unreadable (jsonb
// keeps the last; the flatJSON way handles it).
func (s *jsonScan) object(member func(key string) bool) bool {
	if s.next() != '{' {
		return false
	}
	s.i++
	seen := map[string]bool{}
	if s.next() == '}' {
		s.i++
		return true
	}
	for {
		k, ok := s.str()
		if !ok || seen[k] || s.next() != ':' {
			return false
		}
		seen[k] = true
		s.i++
		if !member(k) {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem for each element.
func (s *jsonScan) array(elem func() bool) bool {
	if s.next() != '[' {
		return false
	}
	s.i++
	if s.next() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// number reads a JSON number as digits m and exponent e (value = m × 10^e), trailing zeros moved
// into e (zero is 0, 0). ok is false for anything but a number, or more than 18 digits.
func (s *jsonScan) number() (m int64, e int, ok bool) {
	c := s.next()
	if c != '-' && (c < '0' || c > '9') {
		return 0, 0, false
	}
	neg := c == '-'
	if neg {
		s.i++
	}
	// JSON's grammar: an integer part of one digit or a non-zero digit first, a fraction of one
	// digit or more after a dot, an exponent of one digit or more.
	if s.i >= len(s.b) || s.b[s.i] < '0' || s.b[s.i] > '9' ||
		(s.b[s.i] == '0' && s.i+1 < len(s.b) && s.b[s.i+1] >= '0' && s.b[s.i+1] <= '9') {
		return 0, 0, false
	}
	digits, zeros, frac := 0, 0, 0 // significant digits kept, trailing zeros pending, fraction digits
	inFrac := false
	for ; s.i < len(s.b); s.i++ {
		d := s.b[s.i]
		if d == '.' {
			if inFrac || s.i+1 >= len(s.b) || s.b[s.i+1] < '0' || s.b[s.i+1] > '9' {
				return 0, 0, false
			}
			inFrac = true
			continue
		}
		if d < '0' || d > '9' {
			break
		}
		if inFrac {
			frac++
		}
		if d == '0' {
			if digits > 0 {
				zeros++
			}
			continue
		}
		for ; zeros > 0; zeros-- {
			m *= 10
			digits++
		}
		m = m*10 + int64(d-'0')
		digits++
		if digits > 18 {
			return 0, 0, false
		}
	}
	e = zeros - frac
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		sign := 1
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			if s.b[s.i] == '-' {
				sign = -1
			}
			s.i++
		}
		if s.i >= len(s.b) || s.b[s.i] < '0' || s.b[s.i] > '9' {
			return 0, 0, false
		}
		x := 0
		for ; s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9'; s.i++ {
			if x < 10000 {
				x = x*10 + int(s.b[s.i]-'0')
			}
		}
		e += sign * x
	}
	if m == 0 {
		return 0, 0, true
	}
	if e < -400 || e > 400 {
		return 0, 0, false
	}
	if neg {
		m = -m
	}
	return m, e, true
}

var pow10 = [19]int64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000, 10000000000,
	100000000000, 1000000000000, 10000000000000, 100000000000000, 1000000000000000, 10000000000000000,
	100000000000000000, 1000000000000000000}

// numDigits is the number of decimal digits of m > 0.
func numDigits(m int64) int {
	n := 1
	for n < 19 && m >= pow10[n] {
		n++
	}
	return n
}

// micros is a time cell (seconds, m × 10^e) in microseconds, rounded half away from zero as
// PostgreSQL rounds numerics. ok is false outside 0 to 1e11 seconds (the flatJSON way refuses it).
func micros(m int64, e int) (int64, bool) {
	if m < 0 {
		return 0, false
	}
	if m == 0 {
		return 0, true
	}
	if numDigits(m)+e > 11 {
		return 0, false
	}
	x := e + 6
	if x >= 0 {
		return m * pow10[x], true // below 10^17: the check above
	}
	if -x > 18 {
		return 0, true
	}
	d := pow10[-x]
	q, r := m/d, m%d
	if 2*r >= d {
		q++
	}
	return q, true
}

// readFlatColumns reads a flatJSON body for event into columns; nil when it cannot be carried so.
func readFlatColumns(body []byte, event string) *seriesColumns {
	c := newSeriesColumns(body, false)
	s := &jsonScan{b: body}
	if !c.flat(s, event, &[8][]columnCell{}) || s.next() != 0 {
		return nil
	}
	return c
}

// newSeriesColumns makes the columns to read body into, each with room for every point the body
// may hold: one per '[' in it (a point is an array; so are a body's fields and points).
func newSeriesColumns(body []byte, batch bool) *seriesColumns {
	n := bytes.Count(body, []byte{'['})
	return &seriesColumns{batch: batch, time: make([]int64, 0, n)}
}

// columnCell is a value cell as read: its digits m and exponent e (the value is m × 10^e), or null.
type columnCell struct {
	m    int64
	e    int
	null bool
}

// readSeriesBatch reads a seriesBatch body into columns; nil when it cannot be carried so.
func readSeriesBatch(body []byte) *seriesColumns {
	c := newSeriesColumns(body, true)
	var cells [8][]columnCell // each body's, reused from body to body
	s := &jsonScan{b: body}
	format := false
	ok := s.object(func(key string) bool {
		switch key {
		case "format":
			f, ok := s.str()
			format = f == "seriesBatch"
			return ok && format
		case "data":
			return s.array(func() bool {
				var event string
				var data []byte
				ok := s.object(func(key string) bool {
					switch key {
					case "eventId":
						var ok bool
						event, ok = s.str()
						return ok
					case "data":
						// Moved past here, read (and so checked) by flat below.
						s.ws()
						start := s.i
						if !s.pass() {
							return false
						}
						data = s.b[start:s.i]
						return true
					default:
						return s.skip()
					}
				})
				if !ok || event == "" || data == nil {
					return false
				}
				return c.flat(&jsonScan{b: data}, event, &cells)
			})
		default:
			return s.skip()
		}
	})
	if !ok || !format || s.next() != 0 || len(c.events) == 0 {
		return nil
	}
	return c
}

// flat reads one flatJSON body for event and appends it to c.
func (c *seriesColumns) flat(s *jsonScan, event string, cells *[8][]columnCell) bool {
	var fields []string
	format, havePoints := false, false
	start := len(c.time)
	ti := -1
	// The cells of each value column as read (m, e), scaled once the body's scale is known; cells
	// is the caller's room for them, emptied here.
	for k := range cells {
		cells[k] = cells[k][:0]
	}
	ok := s.object(func(key string) bool {
		switch key {
		case "format":
			f, ok := s.str()
			format = f == "flatJSON"
			return ok && format
		case "fields":
			if fields != nil || havePoints {
				return false
			}
			fields = []string{}
			return s.array(func() bool {
				f, ok := s.str()
				if !ok {
					return false
				}
				if f == "deltaTime" || f == "timestamp" {
					if ti >= 0 {
						return false
					}
					ti = len(fields)
				}
				fields = append(fields, f)
				return len(fields) <= 9
			})
		case "points":
			if fields == nil || ti < 0 {
				return false // points before fields: read in two passes the flatJSON way
			}
			havePoints = true
			return s.array(func() bool {
				col := 0
				ok := s.array(func() bool {
					if col >= len(fields) {
						return false
					}
					k := col
					col++
					if k == ti {
						m, e, ok := s.number()
						if !ok {
							return false
						}
						us, ok := micros(m, e)
						c.time = append(c.time, us)
						return ok
					}
					if k > ti {
						k--
					}
					if s.next() == 'n' {
						if !bytes.HasPrefix(s.b[s.i:], []byte("null")) {
							return false
						}
						s.i += 4
						cells[k] = append(cells[k], columnCell{null: true})
						return true
					}
					m, e, ok := s.number()
					cells[k] = append(cells[k], columnCell{m: m, e: e})
					return ok
				})
				return ok && col == len(fields)
			})
		default:
			return s.skip()
		}
	})
	points := len(c.time) - start
	if !ok || !format || !havePoints || points == 0 {
		return false
	}
	// The body's scale of each value column: the largest any of its numbers needs.
	scales := make([]int16, len(fields))
	for k := range len(fields) - 1 {
		scale := 0
		for _, x := range cells[k] {
			if !x.null && -x.e > scale {
				scale = -x.e
			}
		}
		if scale > 18 {
			return false
		}
		col := c.v[k]
		if col == nil {
			// The first body with this column: the bodies before it have none (nulls).
			col = make([]int64, start, max(cap(c.time), start+points))
			for i := range col {
				col[i] = nullCell
			}
		}
		for _, x := range cells[k] {
			if x.null {
				col = append(col, nullCell)
				continue
			}
			sh := scale + x.e // digits to add: the number at the body's scale
			if sh > 18 || (x.m != 0 && numDigits(abs64(x.m))+sh > 18) {
				return false
			}
			col = append(col, x.m*pow10[sh])
		}
		c.v[k] = col
		pos := k
		if k >= ti {
			pos++
		}
		scales[pos] = int16(scale)
	}
	// Columns this body does not have: nulls, so that every column has one value per point.
	for k := len(fields) - 1; k < 8; k++ {
		if c.v[k] != nil {
			for range points {
				c.v[k] = append(c.v[k], nullCell)
			}
		}
	}
	if c.batch {
		c.points = append(c.points, int32(points))
	}
	c.events = append(c.events, event)
	c.fields = append(c.fields, fields...)
	c.counts = append(c.counts, int32(len(fields)))
	c.scales = append(c.scales, scales...)
	return true
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
