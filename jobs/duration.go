package jobs

import (
	"encoding/json"
	"reflect"
	"time"
)

// Duration is a time.Duration that JSON reads and writes as text with its
// unit, such as "30s" or "1m30s": the form of durations in the config file
// and in -print-config.
type Duration time.Duration

// MarshalJSON writes d as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration written with its unit. Anything else is a
// *json.UnmarshalTypeError, which DecodeStrict reports with the field's name.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if v, err := time.ParseDuration(s); err == nil {
			*d = Duration(v)
			return nil
		}
	}
	return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
}
