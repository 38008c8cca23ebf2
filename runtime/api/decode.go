package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"

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

// decodeBytes is decode over b.
func decodeBytes(b []byte, out any) error { return decode(bytes.NewReader(b), out) }

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
