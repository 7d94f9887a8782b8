package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/jobs"
)

// EnvConfig is the environment variable that names the config file when
// -config is not given (enqueue reads its "index" section).
const EnvConfig = "TABLEKEEPER_CONFIG"

// ReadConfigFile reads the JSON object in the file at path into v
// strictly, with jobs.DecodeStrict: an unknown, misspelt or repeated key
// or a value of the wrong type is an error. Every error starts with
// "-config PATH", and one about a key or value continues with its
// ":line:column" in the file, so an operator can go straight to it; an
// unknown key gets a did-you-mean among its object's keys.
func ReadConfigFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-config: %w", err)
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("-config %s: not a JSON object", path)
	}
	if err := jobs.DecodeStrict(data, v, ""); err != nil {
		var de *jobs.DecodeError
		if errors.As(err, &de) {
			line, col := LineColumn(data, de.Offset)
			hint := DidYouMean(de.Key, de.Known)
			if strings.Contains(err.Error(), "did you mean") {
				hint = ""
			}
			return fmt.Errorf("-config %s:%d:%d: %w%s%s", path, line, col, err, hint, secretKeyHint(err.Error(), de.Key))
		}
		return fmt.Errorf("-config %s: %w", path, err)
	}
	return nil
}

// LineColumn returns the 1-based line and column (in characters) of the
// byte offset in data.
func LineColumn(data []byte, offset int64) (line, col int) {
	before := data[:min(max(offset, 0), int64(len(data)))]
	line = bytes.Count(before, []byte("\n")) + 1
	return line, utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
}

// secretKeyHint explains the refusal of an unknown key of the "accounts"
// section that names a secret (sasToken, accountKey, connectionString,
// …): the file holds no secret, only the name of the variable that does.
// msg is the decoder's error, which starts with the key's path.
func secretKeyHint(msg, key string) string {
	k := strings.ToLower(key)
	if !strings.HasPrefix(msg, "accounts.") || k == "" || strings.HasSuffix(k, "env") {
		return ""
	}
	for _, s := range []string{"key", "sas", "secret", "password", "token", "sig", "connection"} {
		if strings.Contains(k, s) {
			return ": secrets are never read from the config file; put it in an environment variable and name that variable in sasTokenEnv or connectionStringEnv"
		}
	}
	return ""
}
