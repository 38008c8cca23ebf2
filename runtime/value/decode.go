package value

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Decode parses one JSON value into state values: objects become
// map[string]any, arrays []any, integral numbers in range int and other
// numbers float64, as encoding/json with UseNumber and number would give.
// Anything but white space after the value is an error.
//
// It builds values straight from the tokens, so a number is converted
// from its text once, and a short string that recurs (an object's keys, a
// role, a kind) is allocated once per call: decoding a long conversation
// is dominated by allocation.
func Decode(b []byte) (any, error) {
	d := decoder{strs: make(map[string]string, 16)}
	d.dec = jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	if _, err := d.dec.ReadToken(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = fmt.Errorf("invalid character after top-level value at offset %d", d.dec.InputOffset())
		}
		return nil, err
	}
	return v, nil
}

type decoder struct {
	dec *jsontext.Decoder
	// strs interns short strings for the length of one Decode.
	strs map[string]string
}

// internMax is the longest string interned.
const internMax = 32

func (d *decoder) value() (any, error) {
	switch d.dec.PeekKind() {
	case '{':
		if _, err := d.dec.ReadToken(); err != nil {
			return nil, err
		}
		m := map[string]any{}
		for d.dec.PeekKind() == '"' {
			raw, err := d.dec.ReadValue()
			if err != nil {
				return nil, err
			}
			k := d.str(raw)
			if m[k], err = d.value(); err != nil {
				return nil, err
			}
		}
		if _, err := d.dec.ReadToken(); err != nil {
			return nil, err
		}
		return m, nil
	case '[':
		if _, err := d.dec.ReadToken(); err != nil {
			return nil, err
		}
		l := []any{}
		for k := d.dec.PeekKind(); k != ']' && k != jsontext.KindInvalid; k = d.dec.PeekKind() {
			v, err := d.value()
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		if _, err := d.dec.ReadToken(); err != nil {
			return nil, err
		}
		return l, nil
	case '"':
		raw, err := d.dec.ReadValue()
		if err != nil {
			return nil, err
		}
		return d.str(raw), nil
	case '0':
		raw, err := d.dec.ReadValue()
		if err != nil {
			return nil, err
		}
		return number(json.Number(raw))
	}
	t, err := d.dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch t.Kind() {
	case 't', 'f':
		return t.Bool(), nil
	case 'n':
		return nil, nil
	}
	return nil, errors.New("unexpected " + t.Kind().String())
}

// str is the text of a raw JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func (d *decoder) str(raw []byte) string {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		// the decoder accepted the string, so the only error left to
		// report is the invalid UTF-8 it has replaced
		b, _ := jsontext.AppendUnquote(nil, raw)
		return string(b)
	}
	if len(body) > internMax {
		return string(body)
	}
	if s, ok := d.strs[string(body)]; ok {
		return s
	}
	s := string(body)
	d.strs[s] = s
	return s
}
