package main

import (
	"context"
	"os"
	"strings"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	copykind "github.com/tablekeeper/tablekeeper/jobs/copy"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
)

// copyArgsFlags renames the copy args fields in validation errors to the
// flags that set them. Longer names come first: the replacer tries its
// pairs in order at each position.
var copyArgsFlags = strings.NewReplacer(
	"args.target", "-target",
	"args.table", "-table",
	"args.rkFrom", "-rk-from",
	"args.rkTo", "-rk-to",
	"args.from", "-from",
	"args.mode", "-mode",
	"args.pk", "-pk",
	"args.to", "-to",
)

// runCopy enqueues one copy built from flags. The args are validated by
// the copy kind's own parser and Validate, and -from and -to against the
// "accounts" section of -config when one is given, so nothing is sent
// that the worker would refuse.
func (m *Main) runCopy(ctx context.Context, args []string) error {
	var (
		c                common
		src              sourceFlags
		table, from, to  string
		target, mode, id string
		cfgPath          string
	)
	fs := m.newFlagSet("copy",
		"copy -table T [-pk P [-rk-from A] [-rk-to B]] [-from NAME] [-to NAME] [-target T2] [-mode insert|replace] [-id ID] [flags]",
		"Enqueues a copy of a table, a partition (-pk) or the RowKey range [-rk-from, -rk-to) of one to a\n"+
			"table of the same or another storage account, page by page in batches of 100, resuming from a\n"+
			"checkpoint. Other accounts are named in the worker's config file (\"accounts\" section); -from\n"+
			"and -to are checked against -config when one is given. It prints the op id and the message id.", &c)
	fs.StringVar(&table, "table", "", "table to copy (required)")
	src.register(fs, "copy")
	fs.StringVar(&from, "from", "", "account to read, a name of the worker's \"accounts\" section (default: the worker's own)")
	fs.StringVar(&to, "to", "", "account to write, a name of the worker's \"accounts\" section (default: the worker's own)")
	fs.StringVar(&target, "target", "", "table to write, created when missing (default: -table's name; required when -from and -to are the same)")
	fs.StringVar(&mode, "mode", "", "insert: add the rows the target lacks, leave the others; replace: upsert every row (default insert)")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	fs.StringVar(&cfgPath, "config", os.Getenv(cli.EnvConfig), "the worker's config file, to check -from and -to against its \"accounts\" section (env "+cli.EnvConfig+"); optional")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	a := copykind.Args{Table: table, From: from, To: to, Target: target, Mode: mode}
	a.PK, a.RKFrom, a.RKTo = src.given(set)
	if cfgPath != "" {
		if err := checkAccounts(cfgPath, map[string]string{"from": from, "to": to}); err != nil {
			return err
		}
	}
	return m.sendKind(ctx, &c, set["id"], id, a, copyArgsFlags)
}

// checkAccounts reads the "accounts" section of the config file at path
// and refuses a name of names (by flag) it does not declare: usage errors
// naming the flag, the file and the declared names.
func checkAccounts(path string, names map[string]string) error {
	var f configFile
	if err := cli.ReadConfigFile(path, &f); err != nil {
		return &usageError{err: err}
	}
	if err := f.Accounts.Validate(); err != nil {
		return usagef("-config %s: %v", path, err)
	}
	for _, flag := range []string{"from", "to"} {
		if kit.ValidateAccountName(names[flag]) != nil {
			continue // "" (the worker's own), or a bad name the kind's rule names
		}
		if err := f.Accounts.Check(names[flag]); err != nil {
			return usagef("-%s: %v (-config %s)", flag, err, path)
		}
	}
	return nil
}
