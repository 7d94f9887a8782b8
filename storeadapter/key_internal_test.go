package storeadapter

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestForbiddenInKey checks the byte scan of ValidateKey against the rune
// predicate it replaces, on random valid UTF-8 rich in the characters
// around the forbidden ones.
func TestForbiddenInKey(t *testing.T) {
	reference := func(key string) int {
		return strings.IndexFunc(key, func(r rune) bool { return strings.ContainsRune(`/\#?`, r) || isControl(r) })
	}
	runes := []rune{0, 0x1f, ' ', '!', '#', '/', '?', '\\', 'a', '~', 0x7e, 0x7f, 0x80, 0x9f, 0xa0, 0xbf, 0xc0, 0xff,
		0x100, 0x7ff, 0x800, 0x2028, 0xe000, 0xfffd, 0x10000, 0x1f600, 0x10ffff}
	rng := rand.New(rand.NewPCG(23, 6))
	for range 100_000 {
		rs := make([]rune, rng.IntN(8))
		for i := range rs {
			if rng.IntN(3) == 0 {
				rs[i] = rune(rng.IntN(0x300))
			} else {
				rs[i] = runes[rng.IntN(len(runes))]
			}
		}
		key := string(rs)
		if got, want := forbiddenInKey(key), reference(key); got != want {
			t.Fatalf("forbiddenInKey(%+q) = %d, want %d", key, got, want)
		}
	}
}
