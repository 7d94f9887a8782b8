package tableexport

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ParseTarget splits a target "container" or "container/prefix" and
// checks it: a valid container name, and no "." or ".." segments in the
// prefix (Azure treats \ as /), which would name blobs outside it. The
// prefix comes back without leading or trailing slashes. Errors name the
// rule, not the field: the caller prefixes its field's name.
func ParseTarget(target string) (container, prefix string, err error) {
	container, prefix, _ = strings.Cut(target, "/")
	if err := storeadapter.ValidateContainerName(container); err != nil {
		return "", "", err
	}
	if err := checkPrefix(prefix); err != nil {
		return "", "", fmt.Errorf("%q: %w", target, err)
	}
	return container, strings.Trim(prefix, "/"), nil
}

// ValidateNames checks that the blobs an export of table under prefix
// writes have valid names whatever its operation id: the longest, the
// manifest's with an id of 128 characters, must fit Azure's limits.
func ValidateNames(prefix, table string) error {
	name := table + "/2026/11/21/1030/manifest-" + strings.Repeat("o", 128) + ".json"
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		name = prefix + "/" + name
	}
	if err := storeadapter.ValidateBlobName(name); err != nil {
		return fmt.Errorf("the prefix is too long for the names of the parts and the manifest (%w)", err)
	}
	return nil
}

func checkPrefix(prefix string) error {
	for _, seg := range strings.FieldsFunc(prefix, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return errors.New(`the prefix must not hold "." or ".." path segments`)
		}
	}
	return nil
}
