package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
)

// Account says how to reach an Azure Storage account, in exactly one of
// the three forms the tablekeeper commands accept:
//
//   - ConnectionString: an account name and key, a SAS
//     (SharedAccessSignature=, with service endpoints or an account name),
//     or UseDevelopmentStorage=true (Azurite);
//   - Name alone: Microsoft Entra ID, through DefaultAzureCredential
//     (managed identity, workload identity, Azure CLI) or Credential;
//   - Name and SASToken: an account SAS for the blob, queue and table
//     services.
//
// Errors about an Account name its fields (Account.ConnectionString,
// Account.Name, Account.SASToken) and never quote a credential.
type Account struct {
	ConnectionString string
	Name             string
	SASToken         string
	// Credential, with Name alone, signs in instead of
	// DefaultAzureCredential.
	Credential azcore.TokenCredential
	// CredentialOptions tune DefaultAzureCredential; nil keeps the SDK's
	// defaults.
	CredentialOptions *azidentity.DefaultAzureCredentialOptions
	// Endpoints returns the service URLs of an account name (the Name
	// forms); nil is the public cloud's (azstore.AccountEndpoints).
	Endpoints func(account string) azstore.Endpoints
	// Options tune the SDK clients (retries, call timeouts, hooks); nil
	// keeps azstore's defaults.
	Options *azstore.Options
}

// AuthForm is the credential form an Account resolves to.
type AuthForm string

// The credential forms.
const (
	AuthConnectionString AuthForm = "connection string"
	AuthSASToken         AuthForm = "account name + SAS token"
	AuthEntraID          AuthForm = "account name + DefaultAzureCredential"
)

// Form returns the credential form a holds, or an error naming the
// fields that conflict or are missing.
func (a Account) Form() (AuthForm, error) {
	cs, name, sas := strings.TrimSpace(a.ConnectionString) != "", strings.TrimSpace(a.Name) != "", strings.TrimSpace(a.SASToken) != ""
	switch {
	case cs && sas:
		return "", errors.New("both Account.ConnectionString and Account.SASToken are set: give one credential form (a connection string can carry a SAS itself)")
	case cs && name:
		return "", errors.New("both Account.ConnectionString and Account.Name are set: give one credential form (a connection string names its own account)")
	case cs:
		if err := connectionStringForm(a.ConnectionString); err != nil {
			return "", fmt.Errorf("Account.ConnectionString: %w", err)
		}
		return AuthConnectionString, nil
	case sas && !name:
		return "", errors.New("Account.SASToken needs Account.Name, the account the token was made for")
	case sas:
		return AuthSASToken, nil
	case name:
		return AuthEntraID, nil
	}
	return "", errors.New("no storage account: set Account.ConnectionString, or Account.Name for DefaultAzureCredential, or Account.Name with Account.SASToken")
}

// connectionStringForm refuses a connection string that carries two
// credential forms, as Form refuses two: an AccountKey beside a
// SharedAccessSignature (the SDK would silently take the key), or
// UseDevelopmentStorage=true beside an account or credential of its own
// (the emulator would silently stand in for the named account). Values
// are not repeated.
func connectionStringForm(cs string) error {
	has := map[string]bool{}
	dev := false
	for part := range strings.SplitSeq(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		has[k] = true
		if k == "usedevelopmentstorage" && strings.EqualFold(strings.TrimSpace(v), "true") {
			dev = true
		}
	}
	switch {
	case has["accountkey"] && has["sharedaccesssignature"]:
		return errors.New("holds both AccountKey and SharedAccessSignature: give one credential")
	case dev && (has["accountname"] || has["accountkey"] || has["sharedaccesssignature"]):
		return errors.New("holds UseDevelopmentStorage=true and an account or credential too: give one (the emulator's, or the account's)")
	}
	return nil
}

// Store returns the storage a describes (see Form). It calls no service.
// Its errors never quote a credential; a panic of the SDK while the
// clients are built becomes an error that withholds its details, as they
// may hold a credential.
func (a Account) Store() (s *azstore.Store, err error) {
	form, err := a.Form()
	if err != nil {
		return nil, err
	}
	defer func() {
		if recover() != nil {
			s, err = nil, errors.New("the storage clients could not be built (the SDK panicked; details withheld as they may hold a credential): check the endpoints")
		}
	}()
	if form == AuthConnectionString {
		return azstore.NewFromConnectionString(strings.TrimSpace(a.ConnectionString), a.Options)
	}
	endpoints := a.Endpoints
	if endpoints == nil {
		endpoints = azstore.AccountEndpoints
	}
	name := strings.TrimSpace(a.Name)
	if err := ValidAccountName(name); err != nil {
		return nil, err
	}
	if form == AuthSASToken {
		s, err := azstore.NewWithSAS(endpoints(name), strings.TrimSpace(a.SASToken), a.Options)
		if err != nil {
			return nil, fmt.Errorf("Account.SASToken: %w", err)
		}
		return s, nil
	}
	cred := a.Credential
	if cred == nil {
		if cred, err = azidentity.NewDefaultAzureCredential(a.CredentialOptions); err != nil {
			return nil, fmt.Errorf("DefaultAzureCredential: %w", err)
		}
	}
	return azstore.NewWithCredential(endpoints(name), cred, a.Options)
}

// ValidAccountName checks Azure's rule for storage account names (3–24
// lower-case letters and digits), so that a typo is an error naming the
// field rather than a DNS failure on the first call. The name is not
// repeated: a credential pasted into the wrong place would be.
func ValidAccountName(name string) error {
	ok := len(name) >= 3 && len(name) <= 24
	for _, r := range name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}
	if !ok {
		return errors.New("Account.Name: must be a storage account name, 3-24 lower-case letters and digits (the value is not repeated here)")
	}
	return nil
}

// Connect returns a client of the account a describes (see Account and
// Config; cfg.Store is set from a). It creates the work queue if it is
// missing — the one storage call it makes, which also tells at once
// whether the credential is good.
func Connect(ctx context.Context, a Account, cfg Config) (*Client, error) {
	s, err := a.Store()
	if err != nil {
		return nil, err
	}
	cfg.Store = s
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.queue.Create(ctx); err != nil {
		return nil, fmt.Errorf("client: create queue %s: %w", c.queue.Name(), err)
	}
	return c, nil
}
