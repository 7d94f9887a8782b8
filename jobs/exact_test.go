package jobs

import (
	"reflect"
	"testing"
)

// TestEnvelopeKeysExact: the envelope's keys are named exactly, so its
// decode takes DecodeStrict's fast path; a type with an interface field
// does not.
func TestEnvelopeKeysExact(t *testing.T) {
	if !keysExact(reflect.TypeFor[*Envelope]()) {
		t.Error("the envelope's decode would take the slow path")
	}
	if keysExact(reflect.TypeFor[*struct {
		A map[string]any `json:"a"`
	}]()) {
		t.Error("a map of interfaces counted as exactly named")
	}
}
