package azurite

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strings"
	"time"
)

// sasVersion is the service version the account SAS is signed for: its
// string to sign has no encryption-scope line (that came with 2020-12-06).
const sasVersion = "2020-08-04"

// AccountSAS returns an account SAS token (a query string without the
// leading "?") for the emulator's account, valid for the blob, queue and
// table services, every resource type and every permission until expiry.
// It is signed with the well-known Key, as Azure signs one with an account
// key (learn.microsoft.com: "Create an account SAS"); the SDKs' own helpers
// sign for one service only.
func AccountSAS(expiry time.Time) string {
	q := url.Values{
		"sv":  {sasVersion},
		"ss":  {"bqt"},
		"srt": {"sco"},
		"sp":  {"rwdlacup"},
		"se":  {expiry.UTC().Format(time.RFC3339)},
		"spr": {"https,http"},
	}
	toSign := strings.Join([]string{Account, q.Get("sp"), q.Get("ss"), q.Get("srt"), "", q.Get("se"), "", q.Get("spr"), q.Get("sv"), ""}, "\n")
	key, err := base64.StdEncoding.DecodeString(Key)
	if err != nil {
		panic("azurite: the well-known key is not base64: " + err.Error())
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(toSign))
	q.Set("sig", base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return q.Encode()
}
