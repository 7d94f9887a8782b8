package storeadapter

import (
	"math"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Queue service limits, as Azure documents them. Both implementations enforce them
// through the Validate functions below, before calling the service.
const (
	MaxMessageBytes = 65536 // queue message text, UTF-8 bytes
	MaxReceiveCount = 32    // messages in one receive
	MaxVisibility   = 7 * 24 * time.Hour
)

// queueNameRE is the shape of a queue name (its length apart: see
// validQueueName).
var queueNameRE = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)*$`)

// ValidateQueueName checks Azure's queue name rule: 3–63 lowercase letters,
// digits and single hyphens, starting and ending with a letter or digit.
func ValidateQueueName(name string) error {
	if !validQueueName(name) {
		return invalid("queue name", "%q must be 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit", name)
	}
	return nil
}

// validQueueName reports whether name follows the queue and container name
// rule: 3–63 characters of the shape queueNameRE describes. The length is
// checked apart because a repetition count in the pattern would count "-x"
// as one unit, refusing "a-b" and allowing up to 125 characters.
func validQueueName(name string) bool {
	return len(name) >= 3 && len(name) <= 63 && queueNameRE.MatchString(name)
}

// ValidateMessageText checks a queue message: at most 64 KiB of UTF-8, and
// only characters XML 1.0 can carry (the service's wire format would
// silently replace others). tablekeeper sends base64, which always passes.
func ValidateMessageText(text string) error {
	if len(text) > MaxMessageBytes {
		return tooLarge("message", "%d bytes exceeds %d", len(text), MaxMessageBytes)
	}
	if !utf8.ValidString(text) {
		return invalid("message", "must be valid UTF-8")
	}
	if i := strings.IndexFunc(text, func(r rune) bool {
		return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(text[i:]) // the character, not its first byte
		return invalid("message", "character %q at byte %d cannot be sent as XML text (send base64)", r, i)
	}
	return nil
}

// ValidateReceive checks a receive call: 1–32 messages and a visibility
// timeout from 1 s to 7 days.
func ValidateReceive(n int, visibility time.Duration) error {
	if n < 1 || n > MaxReceiveCount {
		return invalid("count", "must be 1-%d, got %d", MaxReceiveCount, n)
	}
	if visibility < time.Second || visibility > MaxVisibility {
		return invalid("visibility timeout", "must be 1s-7d, got %v", visibility)
	}
	return nil
}

// ValidateVisibility checks a visibility delay or timeout of 0 to 7 days
// (whole seconds are what the service keeps; shorter parts are dropped).
func ValidateVisibility(field string, d time.Duration) error {
	if d < 0 || d > MaxVisibility {
		return invalid(field, "must be 0-7d, got %v", d)
	}
	return nil
}

// ValidateSend checks send options: a delay of 0–7 days, a TTL of at least
// 1 s or NeverExpire (0 means the default 7 days), and a delay shorter than
// the TTL.
func ValidateSend(text string, o SendOptions) error {
	if err := ValidateMessageText(text); err != nil {
		return err
	}
	if err := ValidateVisibility("visibility delay", o.VisibilityDelay); err != nil {
		return err
	}
	ttl := o.TTL
	switch {
	case ttl == NeverExpire:
		return nil
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < time.Second:
		return invalid("ttl", "must be at least 1s, 0 (7 days) or NeverExpire, got %v", o.TTL)
	}
	// The service keeps whole seconds of both (see Seconds), so compare
	// what it will see: a 1.5 s delay with a 1.9 s TTL is 1 s against 1 s.
	if Seconds(o.VisibilityDelay) >= Seconds(ttl) {
		return invalid("visibility delay", "%v must be shorter than the ttl %v", o.VisibilityDelay, ttl)
	}
	return nil
}

// Seconds returns d in whole seconds, rounded down, as queue APIs take it.
func Seconds(d time.Duration) int32 {
	return int32(min(d/time.Second, math.MaxInt32))
}
