package largeentity

import (
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TableConfig is the offload declaration of one table: where its
// offloaded properties go and which properties an offload that names none
// moves.
type TableConfig struct {
	// Table is the table's name.
	Table string `json:"table"`
	// Container receives the table's offloaded properties (when the
	// offload's args name no container).
	Container string `json:"container"`
	// Prefix, optional, goes before the managed blob names in Container
	// (and only there): <prefix>/<table>/<pk>/<rk>/<property>/<sha256>.
	// An offload, attach or reconcile of the table with another container
	// uses no prefix there (see Layout.PrefixFor). No "." or ".." segments.
	Prefix string `json:"prefix,omitempty"`
	// Properties are offloaded by every offload of the table that names
	// no property (when the entity has them).
	Properties []string `json:"properties,omitempty"`
	// OffloadOver, when above 0, also offloads every String or Binary
	// property larger than this many bytes (UTF-8 bytes of a string, the
	// bytes of a binary: what the blob holds).
	OffloadOver int64 `json:"offloadOver,omitempty"`
}

// Layout is where each table's managed blobs live: the offload
// declarations of the blobsync config section. Every kind that writes or
// reads managed names (blobsync itself, and archive when it carries an
// entity's blobs to its new key) follows it.
type Layout []TableConfig

// Validate checks each declaration; errors name the field under
// section (such as "blobsync.tables") and the rule.
func (l Layout) Validate(section string) error {
	seen := map[string]bool{}
	for i, tc := range l {
		at := fmt.Sprintf("%s[%d]", section, i)
		if err := storeadapter.ValidateTableName(tc.Table); err != nil {
			return fmt.Errorf("%s.table: %w", at, err)
		}
		if low := strings.ToLower(tc.Table); seen[low] {
			return fmt.Errorf("%s.table: %s is declared twice (table names ignore case)", at, tc.Table)
		} else {
			seen[low] = true
		}
		if err := storeadapter.ValidateContainerName(tc.Container); err != nil {
			return fmt.Errorf("%s.container: %w", at, err)
		}
		if _, err := CleanPrefix(tc.Prefix); err != nil {
			return fmt.Errorf("%s.prefix: %w", at, err)
		}
		props := map[string]bool{}
		for j, p := range tc.Properties {
			if err := CheckProperty(p); err != nil {
				return fmt.Errorf("%s.properties[%d]: %w", at, j, err)
			}
			if props[p] {
				return fmt.Errorf("%s.properties[%d]: %s is listed twice", at, j, p)
			}
			props[p] = true
		}
		if tc.OffloadOver < 0 {
			return fmt.Errorf("%s.offloadOver: must be 0 (off) or a number of bytes, got %d", at, tc.OffloadOver)
		}
	}
	return nil
}

// Table returns the declaration of a table, nil when it has none.
func (l Layout) Table(name string) *TableConfig {
	for i := range l {
		if strings.EqualFold(l[i].Table, name) {
			return &l[i]
		}
	}
	return nil
}

// PrefixFor is the prefix of the managed names of table in container,
// the one rule every writer of managed names shares: the table's
// declared prefix applies to the table's declared container only; any
// other container holds the table's managed names from its root.
func (l Layout) PrefixFor(table, container string) string {
	if tc := l.Table(table); tc != nil && tc.Container == container {
		p, _ := CleanPrefix(tc.Prefix) // validated with the config
		return p
	}
	return ""
}

// ManagedIn reports whether name is a managed name in container under
// any prefix that may be in force there (none, or the prefix of a table
// declared with that container), and returns that prefix with its slash.
// A blob in the managed layout belongs to the entity its name holds.
func (l Layout) ManagedIn(container, name string) (string, bool) {
	prefixes := []string{""}
	for _, tc := range l {
		if tc.Container == container {
			p, _ := CleanPrefix(tc.Prefix)
			prefixes = append(prefixes, p)
		}
	}
	for _, p := range prefixes {
		if _, ok := ParseBlobName(p, name); ok {
			if p != "" {
				p += "/"
			}
			return p, true
		}
	}
	return "", false
}
