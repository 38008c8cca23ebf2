package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/value"
)

// decode reads one JSON value into out as the state holds values: the
// numbers in its free-form parts (a state's values, a run's input, an
// event's update, an error's details: anything typed any) are ints when
// they are integers in the 64-bit range, exactly (beyond 2^53, where a
// float64 rounds them), and float64 otherwise, as runtime/value decodes
// them.
func decode(r io.Reader, out any) error {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return err
	}
	return exact(reflect.ValueOf(out))
}

// decodeBytes is decode over b; a long event is read by decodeEvent.
func decodeBytes(b []byte, out any) error {
	if ev, ok := out.(*engine.Event); ok && len(b) >= fastEvent {
		return decodeEvent(b, ev)
	}
	return decode(bytes.NewReader(b), out)
}

// fastEvent is the length from which an event is read by decodeEvent:
// a shorter one reads faster by decode alone.
const fastEvent = 1024

// eventMaps are the free-form maps of an event, by their names on the
// wire.
var eventMaps = [...]string{"update", "appended", "state"}

// decodeEvent reads one event into ev as decode does, the values of its
// updates and its state (a run_end carries the run's whole state) built
// straight from their tokens by value.Decode (then normalised, as decode
// has them), and its other members by decode, without the maps. Anything
// unusual (not an object, an escaped name, one of the maps' names in
// another case or twice, a map that is not an object, bad JSON) is read
// by decode alone: the values, and any error, are decode's.
func decodeEvent(b []byte, ev *engine.Event) error {
	slow := func() error { return decode(bytes.NewReader(b), ev) }
	if ev.Update != nil || ev.Appended != nil || ev.State != nil {
		// encoding/json adds to maps an event already holds
		return slow()
	}
	d := jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if d.PeekKind() != '{' {
		return slow()
	}
	if _, err := d.ReadToken(); err != nil {
		return slow()
	}
	var found [len(eventMaps)]bool
	var vals [len(eventMaps)]map[string]any
	rest := append(make([]byte, 0, 256), '{')
	for d.PeekKind() == '"' {
		name, err := d.ReadValue()
		if err != nil || bytes.IndexByte(name, '\\') >= 0 {
			return slow()
		}
		key := string(name[1 : len(name)-1])
		k := slices.Index(eventMaps[:], key)
		if k < 0 && slices.ContainsFunc(eventMaps[:], func(m string) bool { return strings.EqualFold(m, key) }) || k >= 0 && found[k] {
			// (encoding/json matches names in any case, and merges a
			// map given twice)
			return slow()
		}
		raw, err := d.ReadValue()
		if err != nil {
			return slow()
		}
		if k < 0 {
			if len(rest) > 1 {
				rest = append(rest, ',')
			}
			rest = append(append(append(rest, name...), ':'), raw...)
			continue
		}
		v, err := value.Decode(raw)
		if err == nil {
			// as decode has them: a whole number written as a float
			// (2.0) is an int
			v, err = value.Normalize(v)
		}
		m, ok := v.(map[string]any)
		if err != nil || !ok && v != nil {
			return slow()
		}
		found[k], vals[k] = true, m
	}
	if _, err := d.ReadToken(); err != nil {
		return slow()
	}
	var got engine.Event
	if err := decode(bytes.NewReader(append(rest, '}')), &got); err != nil {
		return slow()
	}
	for k, out := range []*map[string]any{&got.Update, &got.Appended, &got.State} {
		if found[k] {
			*out = vals[k]
		}
	}
	*ev = got
	return nil
}

// exact turns the json.Numbers UseNumber left in v's free-form parts into
// state values.
func exact(v reflect.Value) error {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			return exact(v.Elem())
		}
	case reflect.Struct:
		var errs []error
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				errs = append(errs, exact(v.Field(i)))
			}
		}
		return errors.Join(errs...)
	case reflect.Slice, reflect.Array:
		var errs []error
		for i := range v.Len() {
			errs = append(errs, exact(v.Index(i)))
		}
		return errors.Join(errs...)
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		if m, ok := v.Interface().(map[string]any); ok && v.CanSet() {
			// free-form as a whole: normalised at once, copied only
			// where a number changes
			n, err := value.Normalize(m)
			if err != nil {
				return err
			}
			v.Set(reflect.ValueOf(n))
			return nil
		}
		var errs []error
		it := v.MapRange()
		for it.Next() {
			// a map's values are not addressable: each is converted in
			// a copy, and put back
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			errs = append(errs, exact(e))
			v.SetMapIndex(it.Key(), e)
		}
		return errors.Join(errs...)
	case reflect.Interface:
		if v.IsNil() || !v.CanSet() {
			return nil
		}
		n, err := value.Normalize(v.Interface())
		if err != nil {
			return err
		}
		if n == nil {
			v.SetZero()
		} else {
			v.Set(reflect.ValueOf(n))
		}
	}
	return nil
}
