package kit

import (
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// MaxAccountNameLength is the longest name of another storage account in
// the config's "accounts" section.
const MaxAccountNameLength = 32

// ValidateAccountName checks the name of another storage account, as the
// config's "accounts" section declares it and a kind's args refer to it:
// 1-32 lower-case letters, digits and hyphens, starting with a letter.
// The empty name is this account (Deps.Store) and is not valid here.
func ValidateAccountName(name string) error {
	ok := name != "" && len(name) <= MaxAccountNameLength && name[0] >= 'a' && name[0] <= 'z'
	for _, r := range name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}
	if !ok {
		return fmt.Errorf("must be 1-%d lower-case letters, digits and hyphens, starting with a letter, got %q", MaxAccountNameLength, name)
	}
	return nil
}

// ErrNoAccounts is returned by Deps.Account for another account when the
// worker has no Accounts hook (its config declares no other account).
var ErrNoAccounts = errors.New(`the worker's config declares no other storage account (its "accounts" section is empty)`)

// Account returns the store of the account name: Store for "", else the
// Accounts hook's store of that name. The hook's errors (an account the
// config does not declare, a credential variable that is not set) are
// returned as they are; they are configuration errors that a retry on
// this worker does not cure.
func (d Deps) Account(name string) (storeadapter.Store, error) {
	switch {
	case name == "":
		return d.Store, nil
	case d.Accounts == nil:
		return nil, fmt.Errorf("account %q: %w", name, ErrNoAccounts)
	}
	return d.Accounts(name)
}
