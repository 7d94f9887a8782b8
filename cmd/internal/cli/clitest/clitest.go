package clitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// Form is one way of giving a command its credentials.
type Form struct {
	// Name says what the form is, for test names.
	Name string
	// Env holds the variables the form sets; Apply clears every other
	// variable that selects an account or holds a credential.
	Env map[string]string
	// Endpoints, when set, is where the name forms connect
	// (cli.Account.Endpoints).
	Endpoints func(account string) azstore.Endpoints
	// Credential, when set, holds DefaultAzureCredential's options
	// (cli.Account.Credential).
	Credential *azidentity.DefaultAzureCredentialOptions
	// Secrets are the values that must never be printed.
	Secrets []string
	// Hint, in RefusingForms, is what a command's error must say about the
	// form when storage refuses its credential.
	Hint string
}

// credentialEnv lists the variables Apply controls: the account's and
// those DefaultAzureCredential reads.
var credentialEnv = []string{
	cli.EnvConnectionString, cli.EnvAccount, cli.EnvSASToken,
	"AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
	"AZURE_CLIENT_CERTIFICATE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_AUTHORITY_HOST",
	"AZURE_USERNAME", "AZURE_PASSWORD", "AZURE_TOKEN_CREDENTIALS", "IDENTITY_ENDPOINT", "MSI_ENDPOINT",
}

// Apply sets the form's environment for the rest of the test and clears
// the other credential variables.
func (f Form) Apply(t *testing.T) {
	t.Helper()
	for _, name := range credentialEnv {
		t.Setenv(name, f.Env[name])
	}
}

// ApplyAsFlags sets the form's environment but for the account's own
// variables, which it returns as the flags that stand for them
// (-connection-string, -account, -sas-token).
func (f Form) ApplyAsFlags(t *testing.T) []string {
	t.Helper()
	var args []string
	env := map[string]string{}
	for k, v := range f.Env {
		switch k {
		case cli.EnvConnectionString:
			args = append(args, "-connection-string", v)
		case cli.EnvAccount:
			args = append(args, "-account", v)
		case cli.EnvSASToken:
			args = append(args, "-sas-token", v)
		default:
			env[k] = v
		}
	}
	Form{Env: env}.Apply(t)
	return args
}

// Configure points an account at the form's endpoints (for the name
// forms); commands' tests call it on the account they build.
func (f Form) Configure(a *cli.Account) {
	if f.Endpoints != nil {
		a.Endpoints = f.Endpoints
	}
	if f.Credential != nil {
		a.Credential = f.Credential
	}
}

// CheckNoSecret fails the test when any output holds one of the form's
// secrets, as given or as JSON or a URL would write it.
func (f Form) CheckNoSecret(t *testing.T, outputs ...string) {
	t.Helper()
	for _, secret := range f.Secrets {
		for _, v := range variants(secret) {
			for i, out := range outputs {
				if strings.Contains(out, v) {
					t.Errorf("%s: output %d holds a secret (%d characters):\n%s", f.Name, i, len(v), strings.ReplaceAll(out, v, "<<SECRET>>"))
				}
			}
		}
	}
}

// variants returns s and how JSON and URLs write it.
func variants(s string) []string {
	return []string{s, strings.ReplaceAll(s, "&", `\u0026`), urlEscape(s)}
}

func urlEscape(s string) string {
	r := strings.NewReplacer("+", "%2B", "/", "%2F", "=", "%3D")
	return r.Replace(s)
}

// Fake credential values: long and unmistakable, so a leak is found and
// not confused with other text.
const (
	fakeKey          = "RkFLRS1BQ0NPVU5ULUtFWS0wMTIzNDU2Nzg5LWRvLW5vdC1wcmludA=="
	fakeSig          = "FAKESIGNATURE0123456789abcdefDoNotPrint%2B%3D"
	fakeClientSecret = "FAKE-CLIENT-SECRET-0123456789-do-not-print"
	fakeFederated    = "eyJhbGciOiJSUzI1NiJ9.FAKE-FEDERATED-TOKEN-do-not-print.c2ln"
)

// closed is an endpoint nobody listens on: every call fails at once.
const closed = "http://127.0.0.1:1/acct"

// FailingForms returns every credential form pointed at storage that
// cannot be reached or cannot be addressed, and at a token authority that
// does not answer. The forms that never reach the network (a malformed
// SAS, a bad key) are among them.
func FailingForms(t *testing.T) []Form {
	t.Helper()
	sas := "sv=2020-08-04&ss=bqt&srt=sco&sp=rwdlacup&se=2099-01-01T00%3A00%3A00Z&sig=" + fakeSig
	eps := "BlobEndpoint=" + closed + ";QueueEndpoint=" + closed + ";TableEndpoint=" + closed + ";"
	closedEndpoints := func(string) azstore.Endpoints { return azstore.Endpoints{Table: closed, Queue: closed, Blob: closed} }
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(fakeFederated), 0o600); err != nil {
		t.Fatal(err)
	}
	// The Entra ID forms ask a token authority that refuses connections
	// (bearer tokens go over https only, so the storage endpoint is https
	// too).
	const closedTLS = "https://127.0.0.1:1/acct"
	closedTLSEndpoints := func(string) azstore.Endpoints {
		return azstore.Endpoints{Table: closedTLS, Queue: closedTLS, Blob: closedTLS}
	}
	entra := func(extra map[string]string) map[string]string {
		env := map[string]string{cli.EnvAccount: "acct", "AZURE_TENANT_ID": "00000000-0000-0000-0000-000000000001",
			"AZURE_CLIENT_ID": "00000000-0000-0000-0000-000000000002", "AZURE_AUTHORITY_HOST": "https://127.0.0.1:1/"}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	// Offline, so no instance discovery (it would ask
	// login.microsoftonline.com), and no retries of the token request.
	credOpts := &azidentity.DefaultAzureCredentialOptions{DisableInstanceDiscovery: true}
	credOpts.Retry.MaxRetries = -1
	return []Form{
		{Name: "connection string with account key", Secrets: []string{fakeKey},
			Env: map[string]string{cli.EnvConnectionString: "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + fakeKey + ";" + eps}},
		{Name: "connection string with a key that is not base64", Secrets: []string{"not!base64" + fakeKey},
			Env: map[string]string{cli.EnvConnectionString: "AccountName=acct;AccountKey=not!base64" + fakeKey}},
		{Name: "connection string with SAS", Secrets: []string{sas, fakeSig},
			Env: map[string]string{cli.EnvConnectionString: eps + "SharedAccessSignature=" + sas}},
		{Name: "connection string with SAS and a malformed endpoint", Secrets: []string{sas, fakeSig},
			Env: map[string]string{cli.EnvConnectionString: "BlobEndpoint=http://[::1/a;QueueEndpoint=http://127.0.0.1:bad/a;TableEndpoint=http://%zz/a;SharedAccessSignature=" + sas}},
		{Name: "development storage", Secrets: []string{azurite.Key},
			Env: map[string]string{cli.EnvConnectionString: "UseDevelopmentStorage=true"}},
		{Name: "account name + SAS token", Secrets: []string{sas, fakeSig}, Endpoints: closedEndpoints,
			Env: map[string]string{cli.EnvAccount: "acct", cli.EnvSASToken: "?" + sas}},
		{Name: "account name + SAS token without sv", Secrets: []string{fakeSig},
			Env: map[string]string{cli.EnvAccount: "acct", cli.EnvSASToken: "sig=" + fakeSig}},
		{Name: "conflicting connection string and SAS token", Secrets: []string{sas, fakeSig, fakeKey},
			Env: map[string]string{cli.EnvConnectionString: "AccountName=acct;AccountKey=" + fakeKey, cli.EnvAccount: "acct", cli.EnvSASToken: sas}},
		{Name: "account name + DefaultAzureCredential (client secret)", Secrets: []string{fakeClientSecret}, Endpoints: closedTLSEndpoints, Credential: credOpts,
			Env: entra(map[string]string{"AZURE_CLIENT_SECRET": fakeClientSecret, "AZURE_TOKEN_CREDENTIALS": "EnvironmentCredential"})},
		{Name: "account name + DefaultAzureCredential (workload identity)", Secrets: []string{fakeFederated}, Endpoints: closedTLSEndpoints, Credential: credOpts,
			Env: entra(map[string]string{"AZURE_FEDERATED_TOKEN_FILE": tokenFile, "AZURE_TOKEN_CREDENTIALS": "WorkloadIdentityCredential"})},
	}
}

// WorkingForms returns the forms an emulator accepts, given its
// connection string (account key, with explicit endpoints): that one, the
// same endpoints with an account SAS, and the account name with the SAS
// token. The emulator's key is public, but it stands in for a secret here.
func WorkingForms(t *testing.T, conn string) []Form {
	t.Helper()
	ep := map[string]string{}
	var eps string
	for part := range strings.SplitSeq(conn, ";") {
		k, v, _ := strings.Cut(part, "=")
		if strings.HasSuffix(k, "Endpoint") {
			ep[k] = v
			eps += part + ";"
		}
	}
	if len(ep) != 3 {
		t.Fatalf("the emulator's connection string lacks its three endpoints")
	}
	endpoints := func(string) azstore.Endpoints {
		return azstore.Endpoints{Table: ep["TableEndpoint"], Queue: ep["QueueEndpoint"], Blob: ep["BlobEndpoint"]}
	}
	sas := azurite.AccountSAS(time.Now().Add(time.Hour))
	sig := sas[strings.Index(sas, "sig=")+len("sig="):]
	if i := strings.IndexByte(sig, '&'); i >= 0 {
		sig = sig[:i]
	}
	return []Form{
		{Name: "connection string with account key", Secrets: []string{azurite.Key}, Env: map[string]string{cli.EnvConnectionString: conn}},
		{Name: "connection string with SAS", Secrets: []string{sas, sig}, Env: map[string]string{cli.EnvConnectionString: eps + "SharedAccessSignature=" + sas}},
		{Name: "account name + SAS token", Secrets: []string{sas, sig}, Endpoints: endpoints,
			Env: map[string]string{cli.EnvAccount: azurite.Account, cli.EnvSASToken: sas}},
	}
}

// RefusingForms returns every credential form aimed at storage that
// refuses it: a server that answers every request 403 AuthenticationFailed,
// as Azure answers a wrong or rotated key or an expired SAS, for the key
// and SAS forms; a token authority that refuses connections for the Entra
// ID forms (the sign-in cannot succeed). Each form's Hint is the
// description of the form a command's error must give.
func RefusingForms(t *testing.T) []Form {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ms-error-code", "AuthenticationFailed")
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthenticationFailed</Code>`+
			`<Message>Server failed to authenticate the request.</Message></Error>`)
	}))
	t.Cleanup(srv.Close)
	refusing := srv.URL + "/acct"
	sas := "sv=2020-08-04&ss=bqt&srt=sco&sp=rwdlacup&se=2020-01-01T00%3A00%3A00Z&sig=" + fakeSig
	eps := "BlobEndpoint=" + refusing + ";QueueEndpoint=" + refusing + ";TableEndpoint=" + refusing + ";"
	var forms []Form
	for _, f := range FailingForms(t) {
		switch f.Name {
		case "connection string with account key":
			f.Env = map[string]string{cli.EnvConnectionString: "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + fakeKey + ";" + eps}
			f.Hint = "a connection string with an account key"
		case "connection string with SAS":
			f.Env = map[string]string{cli.EnvConnectionString: eps + "SharedAccessSignature=" + sas}
			f.Secrets, f.Hint = []string{sas, fakeSig}, "a connection string with a SAS"
		case "account name + SAS token":
			f.Env[cli.EnvSASToken], f.Secrets = sas, []string{sas, fakeSig}
			f.Endpoints = func(string) azstore.Endpoints {
				return azstore.Endpoints{Table: refusing, Queue: refusing, Blob: refusing}
			}
			f.Hint = "an account name with a SAS token"
		case "account name + DefaultAzureCredential (client secret)", "account name + DefaultAzureCredential (workload identity)":
			f.Hint = "an account name with DefaultAzureCredential"
		default:
			continue
		}
		forms = append(forms, f)
	}
	return forms
}

// SilentConnectionString returns a connection string (account key form)
// whose three endpoints are host (see netfault.Silent).
func SilentConnectionString(host string) string {
	ep := "http://" + host + "/acct"
	return "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + fakeKey + ";BlobEndpoint=" + ep + ";QueueEndpoint=" + ep + ";TableEndpoint=" + ep + ";"
}
