package indexes

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The type letters that start an encoded value (see the package doc).
const (
	letterBoolean  = 'B'
	letterDouble   = 'D'
	letterGUID     = 'G'
	letterInt32    = 'I'
	letterInt64    = 'L'
	letterString   = 'S'
	letterDateTime = 'T'
	letterBinary   = 'X'
)

// dateTimeLayout is the fixed-width UTC form of an encoded DateTime, less
// its final "Z".
const dateTimeLayout = "2006-01-02T15:04:05.0000000"

// canonicalNaN is the one bit pattern every NaN is encoded as.
const canonicalNaN = 0x7FF8000000000000

// EncodeValue returns the key text of a property value, one of the Go types
// a storeadapter.Entity holds (string, bool, int32, int64, float64,
// time.Time, storeadapter.GUID, []byte), in the format the package doc
// describes: keys of one type sort as their values do, and DecodeValue gives
// the value back.
//
// It returns an error wrapping storeadapter.ErrTooLarge when the key would
// exceed storeadapter.MaxKeyChars (a long string or binary: such a value
// cannot be indexed), and one wrapping storeadapter.ErrInvalidInput for a
// value no entity can hold: another Go type or nil (a missing or null
// property is not indexed), a string that is not valid UTF-8, a DateTime
// outside the years 1601–9999.
func EncodeValue(v any) (string, error) {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return "", fmt.Errorf("index: encode Edm.String: %w: not valid UTF-8", storeadapter.ErrInvalidInput)
		}
		return checkLength(storeadapter.EdmString, string(letterString)+EscapeKey(x))
	case bool:
		if x {
			return string(letterBoolean) + "1", nil
		}
		return string(letterBoolean) + "0", nil
	case int32:
		return encodeInt(letterInt32, int64(x), math.MinInt32, 10), nil
	case int64:
		return encodeInt(letterInt64, x, math.MinInt64, 19), nil
	case float64:
		return string(letterDouble) + encodeDouble(x), nil
	case time.Time:
		t := storeadapter.DateTime(x)
		if y := t.Year(); y < 1601 || y > 9999 {
			return "", fmt.Errorf("index: encode Edm.DateTime: %w: year %d is outside 1601-9999", storeadapter.ErrInvalidInput, y)
		}
		return string(letterDateTime) + t.Format(dateTimeLayout) + "Z", nil
	case storeadapter.GUID:
		return string(letterGUID) + x.String(), nil
	case []byte:
		return checkLength(storeadapter.EdmBinary, string(letterBinary)+hex.EncodeToString(x))
	}
	return "", fmt.Errorf("index: encode %T: %w: not an EDM type (a missing or null property is not indexed)", v, storeadapter.ErrInvalidInput)
}

// checkLength returns key, or an ErrTooLarge error when it is longer than a
// key may be.
func checkLength(t storeadapter.EdmType, key string) (string, error) {
	if n := storeadapter.UTF16Len(key); n > storeadapter.MaxKeyChars {
		return "", fmt.Errorf("index: encode %s: %w: the key would be %d characters, more than the %d a key may hold", t, storeadapter.ErrTooLarge, n, storeadapter.MaxKeyChars)
	}
	return key, nil
}

// encodeInt writes v ≥ 0 as width zero-padded digits and v < 0 as "-" and
// the digits of v − minimum, which lies in [0, −minimum).
func encodeInt(letter byte, v, minimum int64, width int) string {
	if v >= 0 {
		return fmt.Sprintf("%c%0*d", letter, width, v)
	}
	return fmt.Sprintf("%c-%0*d", letter, width, uint64(v)-uint64(minimum))
}

// encodeDouble maps a double to 16 hexadecimal digits that sort as the
// values do: -0 as +0, every NaN as one value above +Inf.
func encodeDouble(f float64) string {
	var b uint64
	switch {
	case math.IsNaN(f):
		b = canonicalNaN
	case f == 0:
		b = 0
	default:
		b = math.Float64bits(f)
	}
	if b&(1<<63) != 0 {
		b = ^b
	} else {
		b |= 1 << 63
	}
	return fmt.Sprintf("%016x", b)
}

// DecodeValue returns the value a key made by EncodeValue stands for, of
// the Go type of its EDM type (the type letter says which). Only
// EncodeValue's own output is accepted, so a value's key is unique: any
// other text returns an error wrapping storeadapter.ErrInvalidInput.
//
// The key of a double -0 decodes to +0, and that of a NaN to a NaN (which
// storeadapter.Equal finds equal to every NaN).
func DecodeValue(key string) (any, error) {
	v, err := decode(key)
	if err != nil {
		return nil, fmt.Errorf("index: decode %q: %w: %v", text.Truncate(key, 80), storeadapter.ErrInvalidInput, err)
	}
	// The parsers below are more lenient than the format (they take
	// other widths, "+" signs, upper case); encoding again and comparing
	// refuses everything EncodeValue would not have written.
	if again, err := EncodeValue(v); err != nil || again != key {
		return nil, fmt.Errorf("index: decode %q: %w: not in the canonical form of %s", text.Truncate(key, 80), storeadapter.ErrInvalidInput, storeadapter.Format(v))
	}
	return v, nil
}

// decode parses key according to its type letter, without checking that
// key is in canonical form.
func decode(key string) (any, error) {
	if key == "" {
		return nil, fmt.Errorf("empty")
	}
	text := key[1:]
	switch key[0] {
	case letterBoolean:
		return text == "1", nil
	case letterInt32:
		v, err := decodeInt(text, math.MinInt32, 32)
		return int32(v), err
	case letterInt64:
		return decodeInt(text, math.MinInt64, 64)
	case letterDouble:
		b, err := strconv.ParseUint(text, 16, 64)
		if err != nil {
			return nil, err
		}
		if b&(1<<63) != 0 {
			b &^= 1 << 63
		} else {
			b = ^b
		}
		return math.Float64frombits(b), nil
	case letterDateTime:
		t, ok := strings.CutSuffix(text, "Z")
		if !ok {
			return nil, fmt.Errorf("a DateTime must end with Z")
		}
		return time.Parse(dateTimeLayout, t)
	case letterGUID:
		return storeadapter.ParseGUID(text)
	case letterString:
		return UnescapeKey(text)
	case letterBinary:
		return hex.DecodeString(text)
	}
	return nil, fmt.Errorf("unknown type letter %q", key[0])
}

// decodeInt parses the text of an Int32 or Int64 of the given bit size.
func decodeInt(text string, minimum int64, bits int) (int64, error) {
	if digits, ok := strings.CutPrefix(text, "-"); ok {
		u, err := strconv.ParseUint(digits, 10, bits-1)
		return minimum + int64(u), err
	}
	return strconv.ParseInt(text, 10, bits)
}

// escapeOf returns the escape character of r and true when r is escaped
// (see the package doc), or false when r stands for itself.
func escapeOf(r rune) (byte, bool) {
	switch {
	case r <= 0x20:
		return ' ', true
	case r == '"' || r == '#':
		return '"', true
	case r == '.' || r == '/':
		return '.', true
	case r == '>' || r == '?':
		return '>', true
	case r == '[' || r == '\\':
		return '[', true
	case r >= '~' && r <= 0x9F:
		return '~', true
	}
	return 0, false
}

// EscapeKey escapes s into text a PartitionKey or RowKey may hold, as the
// package doc describes: the characters / \ # ? and control characters, and
// the escape characters (space " . > [ ~), become an escape character and
// two hexadecimal digits. Escaped strings sort as the originals do by
// UTF-16 code units, and UnescapeKey gives s back. It is used for string
// values and for source keys embedded in index keys; the caller checks the
// length of the key it builds (storeadapter.ValidateKey).
//
// s should be valid UTF-8, as every stored string is; invalid bytes are
// copied unchanged, so a key holding them fails storeadapter.ValidateKey.
func EscapeKey(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteByte(s[i])
		} else if e, ok := escapeOf(r); ok {
			b.Grow(3)
			b.WriteByte(e)
			b.WriteString(hex.EncodeToString([]byte{byte(r)}))
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// UnescapeKey returns the string EscapeKey escaped into s. It accepts only
// EscapeKey's output of valid UTF-8: raw / \ # ? or control characters, an
// escape character not followed by two lowercase hexadecimal digits naming a
// character it escapes, or invalid UTF-8 return an error wrapping
// storeadapter.ErrInvalidInput.
func UnescapeKey(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("index: unescape %q: %w: not valid UTF-8", text.Truncate(s, 80), storeadapter.ErrInvalidInput)
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		e, escaped := escapeOf(r)
		switch {
		case !escaped:
			b.WriteString(s[i : i+size])
			i += size
			continue
		case byte(r) != e:
			return "", fmt.Errorf("index: unescape %q: %w: %q at byte %d must be escaped", text.Truncate(s, 80), storeadapter.ErrInvalidInput, r, i)
		}
		c, ok := unhex(s[i+1:])
		if e2, _ := escapeOf(rune(c)); !ok || e2 != e {
			return "", fmt.Errorf("index: unescape %q: %w: the escape %q at byte %d must be followed by two lowercase hexadecimal digits of a character it escapes", text.Truncate(s, 80), storeadapter.ErrInvalidInput, r, i)
		}
		b.WriteRune(rune(c))
		i += 3
	}
	return b.String(), nil
}

// unhex parses the two lowercase hexadecimal digits that start s.
func unhex(s string) (byte, bool) {
	if len(s) < 2 {
		return 0, false
	}
	digit := func(c byte) (byte, bool) {
		switch {
		case '0' <= c && c <= '9':
			return c - '0', true
		case 'a' <= c && c <= 'f':
			return c - 'a' + 10, true
		}
		return 0, false
	}
	hi, ok1 := digit(s[0])
	lo, ok2 := digit(s[1])
	return hi<<4 | lo, ok1 && ok2
}
