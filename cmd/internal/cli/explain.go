package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/client"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Explain returns err, when storage refused the account's credential
// (storeadapter.ErrAuthentication) or a permission it lacks
// (storeadapter.ErrForbidden), with the credential form in force, the flags
// and variables that gave it, and what to check for that form; any other
// error as it is. It never quotes a credential.
func (a *Account) Explain(err error) error {
	if !errors.Is(err, storeadapter.ErrForbidden) {
		return err
	}
	form, ferr := a.Auth()
	if ferr != nil {
		return err
	}
	var desc, credential, permission string
	switch form {
	case client.AuthConnectionString:
		cs := strings.ToLower(a.connectionString())
		switch {
		case strings.Contains(cs, "usedevelopmentstorage=true"):
			desc = "development storage (UseDevelopmentStorage=true in -connection-string or $" + EnvConnectionString + ")"
			credential = "that the emulator at 127.0.0.1:10000-10002 is Azurite with its well-known account"
			permission = credential
		case strings.Contains(cs, "sharedaccesssignature="):
			desc = "a connection string with a SAS (-connection-string or $" + EnvConnectionString + ")"
			credential, permission = sasCheck, sasPermissionCheck
		default:
			desc = "a connection string with an account key (-connection-string or $" + EnvConnectionString + ")"
			credential = "that its AccountKey is one of the account's two current keys (az storage account keys list: a rotated key is refused), " +
				"that AccountName is the account the key belongs to, and " + networkCheck
			permission = "that shared key access is allowed on the account (allowSharedKeyAccess), and " + networkCheck
		}
	case client.AuthSASToken:
		desc = "an account name with a SAS token (-account or $" + EnvAccount + ", with -sas-token or $" + EnvSASToken + ")"
		credential, permission = sasCheck, sasPermissionCheck
	case client.AuthEntraID:
		desc = "an account name with DefaultAzureCredential (-account or $" + EnvAccount + " alone)"
		credential = "that an identity is available to DefaultAzureCredential here (a managed identity, with AZURE_CLIENT_ID for a user-assigned one; " +
			"workload identity's AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE; or az login), that it can sign in (the error says why not), " +
			"that -account names the right account, and " + networkCheck
		permission = "that the identity holds Storage Queue Data Contributor, Storage Table Data Contributor and Storage Blob Data Contributor " +
			"on the account (a new role assignment takes minutes to apply)"
	default:
		return err
	}
	if errors.Is(err, storeadapter.ErrAuthentication) {
		return fmt.Errorf("%w; storage refused the credential in force, %s: check %s", err, desc, credential)
	}
	return fmt.Errorf("%w; storage refused the request for a permission the credential in force lacks, %s: check %s", err, desc, permission)
}

// What to check for a refused credential, shared by the forms.
const (
	networkCheck = "that the account's network rules (firewall, private endpoints) admit this client"
	sasCheck     = "that the SAS has not expired (se=) and its key was not rotated, that it is an account SAS for the blob, queue and table services " +
		"(ss=bqt) and every resource type (srt=sco), allowed over this protocol and from this address, and " + networkCheck
	sasPermissionCheck = "that the SAS grants the permissions rwdlacup (sp=)"
)
