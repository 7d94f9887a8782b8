package cli

import (
	"strings"
	"testing"
)

// TestUsernamePasswordRedacted: DefaultAzureCredential's
// EnvironmentCredential reads AZURE_USERNAME + AZURE_PASSWORD, so Secrets
// lists the password and a Redactor built from it hides it.
func TestUsernamePasswordRedacted(t *testing.T) {
	t.Setenv(EnvConnectionString, "")
	t.Setenv(EnvSASToken, "")
	t.Setenv("AZURE_USERNAME", "ops@example.com")
	t.Setenv("AZURE_PASSWORD", "Fake-Password-0123456789")
	r := &Redactor{}
	r.Add((&Account{Name: "acct"}).Secrets()...)
	if got := r.String("password Fake-Password-0123456789"); strings.Contains(got, "Fake-Password") {
		t.Errorf("AZURE_PASSWORD not redacted: %q", got)
	}
}

// TestConflictingConnectionStringParts: one connection string that
// carries two credential forms (an account key and a SAS), or
// UseDevelopmentStorage=true next to a real account's name and key, is
// refused as two flags are, without repeating a value.
func TestConflictingConnectionStringParts(t *testing.T) {
	t.Setenv(EnvSASToken, "")
	for name, conn := range map[string]string{
		"key and SAS":                    "AccountName=acct;AccountKey=RkFLRS1LRVktMDEyMzQ1Njc4OQ==;SharedAccessSignature=sv=2020-08-04&sig=FAKESIG0123456789",
		"dev storage and a real account": "UseDevelopmentStorage=true;AccountName=prodacct;AccountKey=RkFLRS1LRVktMDEyMzQ1Njc4OQ==",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(EnvConnectionString, conn)
			_, err := (&Account{}).Connect()
			if err == nil {
				t.Fatal("connection string with two credential forms accepted silently")
			}
			if strings.Contains(err.Error(), "FAKE") || strings.Contains(err.Error(), "RkFLRS") || !strings.Contains(err.Error(), "-connection-string") {
				t.Errorf("error %q: want the flag named and no value repeated", err)
			}
		})
	}
}
