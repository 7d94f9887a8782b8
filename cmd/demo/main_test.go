package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
)

// TestDemo runs the README's first command in-process and checks the
// summary reports what the demo is meant to show.
func TestDemo(t *testing.T) {
	var out, errOut bytes.Buffer
	log, err := cli.NewLogger(&errOut, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	if err := runDemo(context.Background(), &out, log, runner.Config{}, catalog.Config{}); err != nil {
		t.Fatalf("demo: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{
		"processed 3", "retried 4", "poisoned 2",
		"op-demo-bad    delivery 1  permanent: args.to: is required",
		"op-demo-stuck  delivery 5  dequeue count 5 reached the maximum 5",
		"table is being deleted",
		"table Employees  ", "78 entities", "11 entities",
		"blob archive/2026/Employees/Engineering/000003.json",
		"storage calls by the worker",
		// The index part: a rebuild, then lookups before and after the changes.
		"rebuilt: 78 entities reconciled, 0 stale entries swept",
		`lookup lastName "Jones": Engineering 000010 000017 000024; Marketing 000003 000024; Sales 000003 000010 000017 000024 (lastNameRows says the same)`,
		`lookup email "dev.3@contoso.example" in Sales: Sales/000003, the copy holds FirstName=Dev LastName=Jones Email=dev.3@contoso.example`,
		"messages:  received 5  processed 5  retried 0  poisoned 0",
		"not changed (the message repeated)          indexes unchanged  2 calls",
		`lookup lastName "Jones": Engineering 000010 000017; Marketing 000003 000005 000024; Sales 000003 000017 000024 (lastNameRows says the same)`,
		`lookup email "dev.jones@contoso.example" in Sales: Sales/000003, the copy holds FirstName=Dev LastName=Jones Email=dev.jones@contoso.example`,
		`lookup email "dev.3@contoso.example" in Sales: none`,
		// High-volume delete: a DeleteTable per day against EGT batches.
		"a table per day, 1 purgeday message                4 (DeleteTable 3, ListTables 1)",
		"deleted 3 of 7 day tables",
		"Transact 30", "3000 entities deleted in EGT batches",
		"LoginAttemptsAll holds 4000 entities",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
