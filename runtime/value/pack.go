package value

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Pack and Unpack hold state values in a compact binary form that is much
// cheaper to read back than JSON: every length is known before its data,
// so nothing is scanned twice, nothing is unescaped or validated, maps are
// made at their final size, and every string (keys included) is a slice of
// the input. The stores keep derived data in it
// (the segments of a long thread), never the record itself, which stays
// JSON.
//
// A packed value starts with PackMagic, which no JSON text starts with, and
// is followed by one value: a tag byte, then
//
//	null, false, true: nothing
//	int:    the zig-zag varint of the value
//	float:  the 8 bytes of its IEEE 754 bits, little-endian
//	string: the varint length, then the bytes
//	array:  the varint count, then the values
//	object: the varint count, then each key (varint length, bytes) and value
const PackMagic = 0xB5

const (
	tagNull = iota
	tagFalse
	tagTrue
	tagInt
	tagFloat
	tagString
	tagArray
	tagObject
)

// Pack appends the packed form of v, a state value, to dst.
func Pack(dst []byte, v any) ([]byte, error) {
	return pack(append(dst, PackMagic), v)
}

func pack(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, tagNull), nil
	case bool:
		if x {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case int:
		return binary.AppendVarint(append(b, tagInt), int64(x)), nil
	case float64:
		return binary.LittleEndian.AppendUint64(append(b, tagFloat), math.Float64bits(x)), nil
	case string:
		return append(binary.AppendUvarint(append(b, tagString), uint64(len(x))), x...), nil
	case []any:
		b = binary.AppendUvarint(append(b, tagArray), uint64(len(x)))
		for _, e := range x {
			var err error
			if b, err = pack(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]any:
		b = binary.AppendUvarint(append(b, tagObject), uint64(len(x)))
		for k, e := range x {
			b = append(binary.AppendUvarint(b, uint64(len(k))), k...)
			var err error
			if b, err = pack(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("cannot pack a %T", v)
}

// Packed reports whether b holds a packed value rather than JSON.
func Packed[T ~string | ~[]byte](b T) bool { return len(b) > 0 && b[0] == PackMagic }

var errPacked = errors.New("malformed packed value")

// Unpack reads a value written by Pack. It takes the packed bytes as a
// string, so that the strings it returns (keys included) are slices of it
// rather than copies.
func Unpack(s string) (any, error) {
	if !Packed(s) {
		return nil, errPacked
	}
	u := unpacker{s: s[1:], boxed: make(map[string]any, 16)}
	v, err := u.value(0)
	if err != nil {
		return nil, err
	}
	if u.i != len(u.s) {
		return nil, fmt.Errorf("%w: %d bytes after the value", errPacked, len(u.s)-u.i)
	}
	return v, nil
}

type unpacker struct {
	s string
	i int
	// boxed holds short string values already made interface values, so
	// that a recurring one (a role, a kind) is boxed once.
	boxed map[string]any
}

// maxDepth bounds nesting, as the JSON decoder does.
const maxDepth = 10000

// uvarint reads what binary.AppendUvarint wrote, from the string (as
// binary.Uvarint does from bytes), rejecting overflow as it does.
func (u *unpacker) uvarint() (uint64, error) {
	var x uint64
	for shift := uint(0); u.i < len(u.s) && shift < 64; shift += 7 {
		c := u.s[u.i]
		u.i++
		if c < 0x80 {
			if shift == 63 && c > 1 {
				break
			}
			return x | uint64(c)<<shift, nil
		}
		x |= uint64(c&0x7f) << shift
	}
	return 0, errPacked
}

// count reads a length and checks that at least min bytes per unit
// remain for it.
func (u *unpacker) count(min int) (int, error) {
	n, err := u.uvarint()
	if err != nil || n > uint64(len(u.s)-u.i)/uint64(min) {
		return 0, errPacked
	}
	return int(n), nil
}

func (u *unpacker) str() (string, error) {
	n, err := u.count(1)
	if err != nil {
		return "", err
	}
	s := u.s[u.i : u.i+n]
	u.i += n
	return s, nil
}

func (u *unpacker) value(depth int) (any, error) {
	if u.i >= len(u.s) || depth > maxDepth {
		return nil, errPacked
	}
	tag := u.s[u.i]
	u.i++
	switch tag {
	case tagNull:
		return nil, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagInt:
		x, err := u.uvarint()
		if err != nil {
			return nil, err
		}
		return int(int64(x>>1) ^ -int64(x&1)), nil
	case tagFloat:
		if len(u.s)-u.i < 8 {
			return nil, errPacked
		}
		var bits uint64
		for k := 7; k >= 0; k-- {
			bits = bits<<8 | uint64(u.s[u.i+k])
		}
		u.i += 8
		return math.Float64frombits(bits), nil
	case tagString:
		s, err := u.str()
		if err != nil || len(s) > internMax {
			return s, err
		}
		if v, ok := u.boxed[s]; ok {
			return v, nil
		}
		var v any = s
		u.boxed[s] = v
		return v, nil
	case tagArray:
		n, err := u.count(1)
		if err != nil {
			return nil, err
		}
		l := make([]any, n)
		for k := range l {
			if l[k], err = u.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return l, nil
	case tagObject:
		n, err := u.count(2)
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, n)
		for range n {
			k, err := u.str()
			if err != nil {
				return nil, err
			}
			if m[k], err = u.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: tag %d", errPacked, tag)
}
