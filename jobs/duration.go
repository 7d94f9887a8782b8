package jobs

import (
	"encoding/json"
	"fmt"
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

// DefaultTimeBudget is the time budget of a long kind's delivery (see
// Budget and ContinueLater) when its config sets none and its maximum run
// time allows it; see RunLimits.
const DefaultTimeBudget = 5 * time.Minute

// RunLimits fills in and checks the time settings of a kind that
// continues later, naming section's fields in errors: maxRunTime defaults
// to DefaultMaxRunTime and must be 1s-24h; timeBudget defaults to
// DefaultTimeBudget, or half of maxRunTime when that is shorter (so a
// config that sets only a short maxRunTime stays valid), and must be at
// least 1s and below maxRunTime, leaving room for the last unit of work
// after the budget is spent.
func RunLimits(section string, timeBudget, maxRunTime *Duration) error {
	if *maxRunTime == 0 {
		*maxRunTime = Duration(DefaultMaxRunTime)
	}
	if d := time.Duration(*maxRunTime); d < time.Second || d > 24*time.Hour {
		return fmt.Errorf("%s.maxRunTime: must be 1s-24h, got %v", section, d)
	}
	if *timeBudget == 0 {
		*timeBudget = Duration(min(DefaultTimeBudget, time.Duration(*maxRunTime)/2))
	}
	if d := time.Duration(*timeBudget); d < time.Second || d >= time.Duration(*maxRunTime) {
		return fmt.Errorf("%s.timeBudget: must be at least 1s and less than %s.maxRunTime (%v), got %v", section, section, time.Duration(*maxRunTime), d)
	}
	return nil
}
