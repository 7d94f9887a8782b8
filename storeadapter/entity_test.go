package storeadapter_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func TestGUIDRoundTrip(t *testing.T) {
	tests := []struct {
		g    storeadapter.GUID
		text string
	}{
		{storeadapter.GUID{}, "00000000-0000-0000-0000-000000000000"},
		{
			storeadapter.GUID{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff},
			"00112233-4455-6677-8899-aabbccddeeff",
		},
		{
			storeadapter.GUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			"ffffffff-ffff-ffff-ffff-ffffffffffff",
		},
	}
	for _, tt := range tests {
		if got := tt.g.String(); got != tt.text {
			t.Errorf("GUID%v.String() = %q, want %q", [16]byte(tt.g), got, tt.text)
		}
		for _, text := range []string{tt.text, strings.ToUpper(tt.text)} {
			got, err := storeadapter.ParseGUID(text)
			if err != nil {
				t.Errorf("ParseGUID(%q): %v", text, err)
			} else if got != tt.g {
				t.Errorf("ParseGUID(%q) = %v, want %v", text, got, tt.g)
			}
		}
	}
}

func TestParseGUIDErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"00112233-4455-6677-8899-aabbccddeef",
		"00112233-4455-6677-8899-aabbccddeeff0",
		"00112233445566778899aabbccddeeff",
		"{00112233-4455-6677-8899-aabbccddeeff}",
		"0011223-34455-6677-8899-aabbccddeeff",
		"00112233-4455-6677-8899_aabbccddeeff",
		"g0112233-4455-6677-8899-aabbccddeeff",
		"00112233-4455-6677-8899-aabbccddeef ",
		"00112233-+455-6677-8899-aabbccddeeff",
		"00112233-4455-6677-8899-aabbccddeeé",
	} {
		_, err := storeadapter.ParseGUID(in)
		if !errors.Is(err, storeadapter.ErrInvalidInput) {
			t.Errorf("ParseGUID(%q) = %v, want ErrInvalidInput", in, err)
		} else if !strings.Contains(err.Error(), "guid") {
			t.Errorf("ParseGUID(%q) error %q does not name the field", in, err)
		}
	}
}

func TestDateTime(t *testing.T) {
	zone := time.FixedZone("UTC+2", 2*3600)
	tests := []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"UTC with 100 ns precision", time.Date(2026, 11, 21, 10, 0, 0, 123456700, time.UTC), time.Date(2026, 11, 21, 10, 0, 0, 123456700, time.UTC)},
		{"nanoseconds truncated", time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC), time.Date(2026, 11, 21, 10, 0, 0, 123456700, time.UTC)},
		{"truncated, not rounded", time.Date(2026, 11, 21, 10, 0, 0, 99, time.UTC), time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)},
		{"other zone", time.Date(2026, 11, 21, 12, 0, 0, 5, zone), time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)},
		{"first DateTime", time.Date(1601, 1, 1, 0, 0, 0, 150, time.UTC), time.Date(1601, 1, 1, 0, 0, 0, 100, time.UTC)},
		{"before the Unix epoch", time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 999999900, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := storeadapter.DateTime(tt.in)
			if got != tt.want { // == checks the location and wall/monotonic fields too
				t.Errorf("DateTime(%v) = %v, want %v", tt.in, got, tt.want)
			}
			if got.Location() != time.UTC {
				t.Errorf("DateTime(%v).Location() = %v, want UTC", tt.in, got.Location())
			}
			if again := storeadapter.DateTime(got); again != got {
				t.Errorf("DateTime is not idempotent: %v, then %v", got, again)
			}
		})
	}

	// A time from time.Now carries a monotonic reading, which DateTime drops
	// so that == and reflect.DeepEqual work on values read back.
	now := time.Now()
	got := storeadapter.DateTime(now)
	if strings.Contains(got.String(), "m=") {
		t.Errorf("DateTime(time.Now()) = %v, which keeps the monotonic reading", got)
	}
	if want := storeadapter.DateTime(now.Round(0).In(zone)); got != want {
		t.Errorf("DateTime of the same instant differs: %v and %v", got, want)
	}
}

func TestClone(t *testing.T) {
	orig := storeadapter.Entity{
		PartitionKey: "pk",
		RowKey:       "rk",
		ETag:         `W/"1"`,
		Properties:   map[string]any{"Bin": []byte{1, 2, 3}, "Name": "Jones", "N": int64(7)},
	}
	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("Clone() differs (-want +got):\n- %#v\n+ %#v", orig, c)
	}
	c.Properties["Bin"].([]byte)[0] = 99
	c.Properties["Name"] = "Smith"
	c.Properties["New"] = true
	want := map[string]any{"Bin": []byte{1, 2, 3}, "Name": "Jones", "N": int64(7)}
	if !reflect.DeepEqual(orig.Properties, want) {
		t.Errorf("changing the clone changed the original (-want +got):\n- %#v\n+ %#v", want, orig.Properties)
	}

	if got := (storeadapter.Entity{PartitionKey: "pk"}).Clone(); got.Properties != nil {
		t.Errorf("Clone of nil properties = %#v, want nil", got.Properties)
	}
	if got := storeadapter.CloneValue(nil); got != nil {
		t.Errorf("CloneValue(nil) = %#v, want nil", got)
	}
	b := []byte{4, 5}
	cb := storeadapter.CloneValue(b).([]byte)
	cb[0] = 0
	if b[0] != 4 {
		t.Errorf("CloneValue shares the []byte's memory")
	}
}

func TestMerge(t *testing.T) {
	base := storeadapter.Entity{PartitionKey: "pk", RowKey: "rk", Properties: map[string]any{"A": int32(1), "B": "old"}}
	bin := []byte{1}
	patch := storeadapter.Entity{PartitionKey: "pk", RowKey: "rk", Properties: map[string]any{"B": "new", "C": true, "D": bin}}
	got := base.Merge(patch)
	want := map[string]any{"A": int32(1), "B": "new", "C": true, "D": []byte{1}}
	if !reflect.DeepEqual(got.Properties, want) {
		t.Errorf("Merge() (-want +got):\n- %#v\n+ %#v", want, got.Properties)
	}
	if wantBase := map[string]any{"A": int32(1), "B": "old"}; !reflect.DeepEqual(base.Properties, wantBase) {
		t.Errorf("Merge changed its receiver (-want +got):\n- %#v\n+ %#v", wantBase, base.Properties)
	}
	bin[0] = 9
	if got.Properties["D"].([]byte)[0] != 1 {
		t.Errorf("Merge result shares a []byte with the patch")
	}
	if got.PartitionKey != "pk" || got.RowKey != "rk" {
		t.Errorf("Merge() keys = %q/%q, want pk/rk", got.PartitionKey, got.RowKey)
	}

	empty := storeadapter.Entity{PartitionKey: "pk"}
	if got := empty.Merge(patch); !reflect.DeepEqual(got.Properties, map[string]any{"B": "new", "C": true, "D": []byte{9}}) {
		t.Errorf("Merge into nil properties = %#v", got.Properties)
	}
	if got := base.Merge(storeadapter.Entity{}); !reflect.DeepEqual(got.Properties, base.Properties) {
		t.Errorf("Merge of an empty patch = %#v, want %#v", got.Properties, base.Properties)
	}
}

func TestEqual(t *testing.T) {
	instant := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		a, b any
		want bool
	}{
		{"same string", "a", "a", true},
		{"different string", "a", "b", false},
		{"same Int32", int32(1), int32(1), true},
		{"Int32 and Int64", int32(1), int64(1), false},
		{"Int64 and Double", int64(1), 1.0, false},
		{"same Double", 2.5, 2.5, true},
		{"NaN and NaN", math.NaN(), math.NaN(), true},
		{"NaN and a number", math.NaN(), 1.0, false},
		{"zero and negative zero", 0.0, math.Copysign(0, -1), false},
		{"negative zero and itself", math.Copysign(0, -1), math.Copysign(0, -1), true},
		{"infinities", math.Inf(1), math.Inf(1), true},
		{"opposite infinities", math.Inf(1), math.Inf(-1), false},
		{"Double and string", 1.0, "1", false},
		{"same bool", true, true, true},
		{"same instant in two zones", instant, instant.In(time.FixedZone("UTC-5", -5*3600)), true},
		{"different instants", instant, instant.Add(100 * time.Nanosecond), false},
		{"time and string", instant, instant.String(), false},
		{"same GUID", storeadapter.GUID{1, 2}, storeadapter.GUID{1, 2}, true},
		{"different GUID", storeadapter.GUID{1, 2}, storeadapter.GUID{2, 1}, false},
		{"same binary", []byte{1, 2}, []byte{1, 2}, true},
		{"different binary", []byte{1, 2}, []byte{1, 3}, false},
		{"nil and empty binary", []byte(nil), []byte{}, true},
		{"binary and string", []byte("a"), "a", false},
		{"string and binary", "a", []byte("a"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := storeadapter.Equal(tt.a, tt.b); got != tt.want {
				t.Errorf("Equal(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
			if got := storeadapter.Equal(tt.b, tt.a); got != tt.want {
				t.Errorf("Equal(%v, %v) = %v, want %v (swapped)", tt.b, tt.a, got, tt.want)
			}
		})
	}
}

func TestTypeOf(t *testing.T) {
	tests := []struct {
		in     any
		want   storeadapter.EdmType
		wantOK bool
	}{
		{"s", storeadapter.EdmString, true},
		{true, storeadapter.EdmBoolean, true},
		{int32(1), storeadapter.EdmInt32, true},
		{int64(1), storeadapter.EdmInt64, true},
		{1.5, storeadapter.EdmDouble, true},
		{time.Time{}, storeadapter.EdmDateTime, true},
		{storeadapter.GUID{}, storeadapter.EdmGUID, true},
		{[]byte(nil), storeadapter.EdmBinary, true},
		{1, 0, false},
		{float32(1), 0, false},
		{uint8(1), 0, false},
		{time.Second, 0, false},
		{nil, 0, false},
		{[16]byte{}, 0, false},
	}
	for _, tt := range tests {
		got, ok := storeadapter.TypeOf(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("TypeOf(%T) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestEdmTypeNames(t *testing.T) {
	names := map[storeadapter.EdmType]string{
		storeadapter.EdmString:   "Edm.String",
		storeadapter.EdmBoolean:  "Edm.Boolean",
		storeadapter.EdmInt32:    "Edm.Int32",
		storeadapter.EdmInt64:    "Edm.Int64",
		storeadapter.EdmDouble:   "Edm.Double",
		storeadapter.EdmDateTime: "Edm.DateTime",
		storeadapter.EdmGUID:     "Edm.Guid",
		storeadapter.EdmBinary:   "Edm.Binary",
	}
	for typ, name := range names {
		if got := typ.String(); got != name {
			t.Errorf("EdmType(%d).String() = %q, want %q", uint8(typ), got, name)
		}
		got, ok := storeadapter.ParseEdmType(name)
		if !ok || got != typ {
			t.Errorf("ParseEdmType(%q) = %v, %v; want %v, true", name, got, ok, typ)
		}
	}
	for _, typ := range []storeadapter.EdmType{0, 9, 255} {
		if got, want := typ.String(), fmt.Sprintf("EdmType(%d)", uint8(typ)); got != want {
			t.Errorf("EdmType(%d).String() = %q, want %q", uint8(typ), got, want)
		}
	}
	for _, name := range []string{"", "Edm.Int", "edm.string", "String", "Edm.Single", "EdmType(0)"} {
		if got, ok := storeadapter.ParseEdmType(name); ok {
			t.Errorf("ParseEdmType(%q) = %v, true; want false", name, got)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{int64(math.MaxInt64), "Edm.Int64(9223372036854775807)"},
		{int32(-1), "Edm.Int32(-1)"},
		{"Jones", "Edm.String(Jones)"},
		{[]byte{0xca, 0xfe}, "Edm.Binary(cafe)"},
		{time.Date(2026, 11, 21, 12, 0, 0, 0, time.FixedZone("UTC+2", 7200)), "Edm.DateTime(2026-11-21T10:00:00Z)"},
		{strings.Repeat("s", 100), "Edm.String(" + strings.Repeat("s", 77) + "...)"},
		{1, "int(1)"},
	}
	for _, tt := range tests {
		if got := storeadapter.Format(tt.in); got != tt.want {
			t.Errorf("Format(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// timeoutError is a net.Error whose Timeout reports true.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

func TestIsTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"unavailable", storeadapter.ErrUnavailable, true},
		{"wrapped unavailable", fmt.Errorf("azstore: get entity pk/rk: %w", storeadapter.ErrUnavailable), true},
		{"table being deleted", storeadapter.ErrTableBeingDeleted, true},
		{"wrapped table being deleted", fmt.Errorf("create table: %w", storeadapter.ErrTableBeingDeleted), true},
		{"transaction error wrapping unavailable", &storeadapter.TransactionError{Index: -1, Err: storeadapter.ErrUnavailable}, true},
		{"context canceled", context.Canceled, false},
		{"wrapped context canceled", fmt.Errorf("receive: %w", context.Canceled), false},
		{"canceled while unavailable", errors.Join(storeadapter.ErrUnavailable, context.Canceled), false},
		{"not found", storeadapter.ErrNotFound, false},
		{"already exists", storeadapter.ErrAlreadyExists, false},
		{"precondition failed", storeadapter.ErrPreconditionFailed, false},
		{"invalid input", storeadapter.ErrInvalidInput, false},
		{"too large", storeadapter.ErrTooLarge, false},
		{"pop receipt mismatch", storeadapter.ErrPopReceiptMismatch, false},
		{"plain error", errors.New("boom"), false},
		{"net.Error timeout", timeoutError{}, true},
		{"wrapped net.Error timeout", fmt.Errorf("dial: %w", timeoutError{}), true},
		{"net.OpError timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"DNS timeout", &net.DNSError{Err: "timeout", Name: "example.net", IsTimeout: true}, true},
		// "a network operation failed" is transient by IsTransient's doc
		// comment, and so is a connection error by ErrUnavailable's.
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := storeadapter.IsTransient(tt.err); got != tt.want {
				t.Errorf("IsTransient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestTransactionError(t *testing.T) {
	cause := fmt.Errorf("localstore: transact pk/r3: %w", storeadapter.ErrAlreadyExists)
	err := error(&storeadapter.TransactionError{Index: 3, Err: cause})
	if got, want := err.Error(), "transaction operation 3 failed: localstore: transact pk/r3: already exists"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, storeadapter.ErrAlreadyExists) {
		t.Errorf("errors.Is(%v, ErrAlreadyExists) = false", err)
	}
	if errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) = true", err)
	}
	if got := errors.Unwrap(err); got != cause {
		t.Errorf("Unwrap() = %v, want %v", got, cause)
	}

	wrapped := fmt.Errorf("archive: %w", err)
	var txErr *storeadapter.TransactionError
	if !errors.As(wrapped, &txErr) || txErr.Index != 3 {
		t.Errorf("errors.As(%v) = %v, want the *TransactionError with Index 3", wrapped, txErr)
	}

	unknown := &storeadapter.TransactionError{Index: -1, Err: storeadapter.ErrPreconditionFailed}
	if got, want := unknown.Error(), "transaction failed: precondition failed"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
