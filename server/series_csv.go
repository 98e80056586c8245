package server

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// CSV for series: a body of Content-Type text/csv is read as flatJSON, its header row the fields
// and each further row a point, every cell a JSON string (an empty cell null). The SQL then types
// each cell by its field as it types flatJSON strings, so CSV and flatJSON follow one set of rules.

// seriesCSV turns a CSV body into a flatJSON body.
func seriesCSV(body []byte) ([]byte, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("the CSV body must be UTF-8")
	}
	if bytes.IndexByte(body, 0) >= 0 {
		return nil, errors.New("the CSV body may not contain NUL characters")
	}
	rd := csv.NewReader(bytes.NewReader(body))
	rd.FieldsPerRecord = -1 // a ragged row is the SQL's to refuse, with Pryv's message
	rd.ReuseRecord = true
	header, err := rd.Read()
	if err == io.EOF {
		return nil, errors.New("the CSV body must start with a header row naming the fields")
	}
	if err != nil {
		return nil, fmt.Errorf("the CSV body cannot be read: %w", err)
	}
	out := bytes.NewBuffer(make([]byte, 0, len(body)*2+64))
	out.WriteString(`{"format":"flatJSON","fields":[`)
	for i, f := range header {
		if i > 0 {
			out.WriteByte(',')
		}
		writeJSONString(out, strings.TrimSpace(f))
	}
	out.WriteString(`],"points":[`)
	for n := 0; ; n++ {
		rec, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the CSV body cannot be read: %w", err)
		}
		if n > 0 {
			out.WriteByte(',')
		}
		out.WriteByte('[')
		for i, cell := range rec {
			if i > 0 {
				out.WriteByte(',')
			}
			if cell == "" {
				out.WriteString("null")
				continue
			}
			writeJSONString(out, cell)
		}
		out.WriteByte(']')
	}
	out.WriteString(`]}`)
	return out.Bytes(), nil
}

// writeJSONString writes s as a JSON string.
func writeJSONString(out *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a valid UTF-8 string always marshals
	out.Write(b)
}

// csvLine is one CSV line (with its line break) of the given cells, quoted where needed.
func csvLine(cells []string) string {
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write(cells) // a strings.Builder does not fail
	w.Flush()
	return b.String()
}
