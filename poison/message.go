package poison

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Summary is the compact failure summary a poison message carries (see the
// package documentation for the whole format). The failure record holds
// the details.
type Summary struct {
	// MessageID is the original queue message id.
	MessageID string `json:"messageId"`
	// OpID and Kind come from the envelope ("" when it did not decode).
	OpID string `json:"opId"`
	Kind string `json:"kind"`
	// Reason says why the message was poisoned.
	Reason string `json:"reason"`
	// DequeueCount is the highest dequeue count an attempt recorded.
	DequeueCount int64 `json:"dequeueCount"`
	// FirstAttempt and LastAttempt bound the recorded attempts.
	FirstAttempt time.Time `json:"firstAttempt"`
	LastAttempt  time.Time `json:"lastAttempt"`
	// Host is the worker that poisoned the message.
	Host string `json:"host"`
	// Queue is the work queue the message came from.
	Queue string `json:"queue"`
}

// messageVersion is the "v" of the poison message format.
const messageVersion = 1

// wireMessage is the JSON of a poison message. Original is a pointer so that
// an empty original is still written.
type wireMessage struct {
	V           int     `json:"v"`
	Poison      Summary `json:"poison"`
	Original    *string `json:"original,omitempty"`
	OriginalRef string  `json:"originalRef,omitempty"`
}

// encodeMessage returns the text of a poison message: base64 of its JSON.
// Exactly one of original (when ref is "") and ref is written.
func encodeMessage(s Summary, original, ref string) (string, error) {
	w := wireMessage{V: messageVersion, Poison: s}
	if ref != "" {
		w.OriginalRef = ref
	} else {
		w.Original = &original
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the text is base64 anyway; keep it compact
	if err := enc.Encode(w); err != nil {
		return "", fmt.Errorf("poison: encode message %s: %w", s.MessageID, err)
	}
	return base64.StdEncoding.EncodeToString(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// DecodeMessage parses a poison message's text: base64 of the JSON the
// package documentation describes (plain JSON is accepted too). It returns
// the summary and either the original text or, when the original is in a
// blob, its reference "<container>/<blob>" (original is then "").
func DecodeMessage(text string) (s Summary, original, originalRef string, err error) {
	data := []byte(text)
	if !strings.HasPrefix(strings.TrimSpace(text), "{") {
		if data, err = base64.StdEncoding.DecodeString(strings.TrimSpace(text)); err != nil {
			return Summary{}, "", "", fmt.Errorf("poison: decode message: not base64: %w", err)
		}
	}
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return Summary{}, "", "", fmt.Errorf("poison: decode message: %w", err)
	}
	switch {
	case w.V != messageVersion:
		return Summary{}, "", "", fmt.Errorf("poison: decode message: version %d is not %d", w.V, messageVersion)
	case w.Poison.MessageID == "":
		return Summary{}, "", "", errors.New("poison: decode message: poison.messageId is missing")
	case (w.Original == nil) == (w.OriginalRef == ""):
		return Summary{}, "", "", errors.New("poison: decode message: exactly one of original and originalRef must be set")
	}
	if w.Original != nil {
		original = *w.Original
	}
	return w.Poison, original, w.OriginalRef, nil
}
