package containerapps

// No Bicep compiler (az bicep, bicep) is reachable on the machines that run
// these tests, so main.bicep is read as text: its resource blocks are cut
// out by brace matching and checked for the pieces docs/deploy.md's "Azure
// Container Apps" section promises. This catches a removed or renamed piece, not a type
// error: run `az bicep build -f deploy/containerapps/main.bicep` before a
// deployment.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const jobsAPIVersion = "2026-01-01"

// resource is one `resource name 'type@version' … = … { … }` block.
type resource struct {
	name, typ, apiVersion string
	existing              bool
	body                  string // from the opening brace to its match
}

var resourceHead = regexp.MustCompile(`(?m)^resource (\w+) '([^'@]+)@([^']+)'( existing)? = `)

// parseResources returns main.bicep's resources by symbolic name.
func parseResources(t *testing.T, src string) map[string]resource {
	t.Helper()
	out := map[string]resource{}
	for _, m := range resourceHead.FindAllStringSubmatchIndex(src, -1) {
		r := resource{name: src[m[2]:m[3]], typ: src[m[4]:m[5]], apiVersion: src[m[6]:m[7]], existing: m[8] >= 0}
		open := strings.Index(src[m[1]:], "{")
		if open < 0 {
			t.Fatalf("resource %s has no body", r.name)
		}
		start := m[1] + open
		depth := 0
		end := -1
		for i := start; i < len(src) && end < 0; i++ {
			switch src[i] {
			case '{':
				depth++
			case '}':
				depth--
				if depth == 0 {
					end = i + 1
				}
			}
		}
		if end < 0 {
			t.Fatalf("resource %s: unbalanced braces", r.name)
		}
		r.body = src[start:end]
		out[r.name] = r
	}
	return out
}

// params returns main.bicep's parameter names, and those lacking a
// @description among the decorators right above them (each param and its
// decorators are one paragraph).
func params(src string) (names, undocumented []string) {
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "param" {
			continue
		}
		names = append(names, f[1])
		// The decorators are the lines right above, up to a blank line.
		documented := false
		for j := i - 1; j >= 0 && strings.TrimSpace(lines[j]) != ""; j-- {
			if strings.HasPrefix(strings.TrimSpace(lines[j]), "@description(") {
				documented = true
			}
		}
		if !documented {
			undocumented = append(undocumented, f[1])
		}
	}
	return names, undocumented
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mustContain fails for each want missing from the block.
func mustContain(t *testing.T, what, block string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(block, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

func TestTemplate(t *testing.T) {
	src := read(t, "main.bicep")
	res := parseResources(t, src)

	var jobs []resource
	for _, r := range res {
		if r.typ == "Microsoft.App/jobs" {
			jobs = append(jobs, r)
			if r.apiVersion != jobsAPIVersion {
				t.Errorf("job %s uses API version %s, want %s", r.name, r.apiVersion, jobsAPIVersion)
			}
		}
	}
	if len(jobs) != 3 {
		t.Fatalf("%d Microsoft.App/jobs resources, want 3 (worker, purgeday, the backups' loop)", len(jobs))
	}
	mustContain(t, "the header comment", src, "stable/"+jobsAPIVersion+"/Jobs.json")

	worker, ok := res["workerJob"]
	if !ok {
		t.Fatal("no workerJob resource")
	}
	mustContain(t, "workerJob", worker.body,
		"triggerType: 'Event'",
		"eventTriggerConfig: {",
		"minExecutions: 0",
		"maxExecutions: maxExecutions",
		"pollingInterval: pollingInterval",
		"type: 'azure-queue'",
		"accountName: storageAccountName",
		"queueName: queueName",
		"queueLength: string(queueLength)",
		"queueLengthStrategy: queueLengthStrategy",
		"identity: workerIdentity.id",
		"replicaTimeout: replicaTimeout",
		"replicaRetryLimit: replicaRetryLimit",
		"'-drain'",
		"name: 'AZURE_STORAGE_ACCOUNT'",
		"name: 'AZURE_CLIENT_ID'",
		"value: workerIdentity.properties.clientId",
		"'${workerIdentity.id}': {}",
	)
	// The rule's identity sits inside the azure-queue rule, not only on the job.
	rule := worker.body[strings.Index(worker.body, "rules: ["):]
	rule = rule[:strings.Index(rule, "\n          ]")]
	mustContain(t, "the azure-queue rule", rule, "type: 'azure-queue'", "identity: workerIdentity.id")

	purge, ok := res["schedulerJob"]
	if !ok {
		t.Fatal("no schedulerJob resource")
	}
	mustContain(t, "schedulerJob", purge.body,
		"triggerType: 'Schedule'",
		"cronExpression: purgeSchedule",
		"'/enqueue'",
		"'purgeday'",
		"'-queue'", "'-prefix'", "'-keep-days'",
		"value: schedulerIdentity!.properties.clientId",
	)
	if strings.Contains(purge.body, "workerIdentity") {
		t.Error("the scheduled job uses the worker's identity: it must have its own, with only Message Sender")
	}

	// The backups: three scheduled jobs from one loop over backupJobs; the
	// exports as the scheduler, the prune as the worker.
	backup, ok := res["backupJob"]
	if !ok {
		t.Fatal("no backupJob resource")
	}
	mustContain(t, "backupJob", backup.body,
		"triggerType: 'Schedule'",
		"cronExpression: j.cron",
		"'/enqueue'",
		"args: j.args",
		"'${j.worker ? workerIdentity.id : schedulerIdentity!.id}': {}",
		"value: j.worker ? workerIdentity.properties.clientId : schedulerIdentity!.properties.clientId",
	)
	if !strings.Contains(src, "resource backupJob 'Microsoft.App/jobs@"+jobsAPIVersion+"' = [for j in backupJobs: if (backups) {") {
		t.Error("backupJob is not one job per backupJobs entry, only when backups are asked for")
	}
	list := src[strings.Index(src, "var backupJobs = ["):]
	list = list[:strings.Index(list, "\n]\n")]
	entries := strings.Split(list, "\n  {\n")[1:]
	if len(entries) != 3 {
		t.Fatalf("backupJobs has %d entries, want 3", len(entries))
	}
	for i, want := range []struct{ name, cron, worker string }{
		{"'backup-weekly'", "backupFullSchedule", "false"},
		{"'backup-nightly'", "backupIncrementSchedule", "false"},
		{"'backup-prune'", "backupPruneSchedule", "true"},
	} {
		mustContain(t, "backupJobs["+want.name+"]", entries[i], "name: "+want.name, "cron: "+want.cron, "worker: "+want.worker)
	}
	mustContain(t, "the weekly export", entries[0], "'export'", "'-queue'", "queueName", "'-table'", "backupTable", "'-to'", "backupTo", "'-gzip'")
	mustContain(t, "the nightly increment", entries[1], "'export'", "'-table'", "backupTable", "'-to'", "backupTo", "'-after-latest'")
	mustContain(t, "the prune", entries[2], "'export'\n      'prune'", "'-to'", "backupTo", "'-keep-days'", "string(backupKeepDays)", "'-yes'")
	if strings.Contains(entries[0]+entries[1], "'-yes'") || strings.Contains(entries[2], "'-queue'") {
		t.Error("the exports must only send, the prune must not send")
	}
	reader := res["schedulerBackupReader"]
	mustContain(t, "schedulerBackupReader", reader.body, "scope: backupContainer", "roles.storageBlobDataReader", "principalId: schedulerIdentity!.properties.principalId")
	mustContain(t, "the roles variable", src, "storageBlobDataReader: '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1'")
	for _, r := range []string{"schedulerIdentity", "schedulerSender"} {
		head := regexp.MustCompile(`(?m)^resource ` + r + ` .*$`).FindString(src)
		if !strings.HasSuffix(head, "= if (scheduled) {") {
			t.Errorf("%s must exist when anything is scheduled (purge or backups): %q", r, head)
		}
	}

	// The three data roles, by GUID, assigned to the worker's identity on the
	// one (existing) storage account.
	if sa := res["storageAccount"]; !sa.existing || sa.typ != "Microsoft.Storage/storageAccounts" {
		t.Errorf("storageAccount is not an existing Microsoft.Storage/storageAccounts: %+v", sa)
	}
	for name, guid := range map[string]string{
		"storageQueueDataContributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
		"storageTableDataContributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
		"storageBlobDataContributor":  "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
	} {
		mustContain(t, "the roles variable", src, name+": '"+guid+"'")
		mustContain(t, "workerRoleIds", src[strings.Index(src, "var workerRoleIds"):], "roles."+name)
	}
	roles := res["workerRoles"]
	mustContain(t, "workerRoles", roles.body, "scope: storageAccount", "principalId: workerIdentity.properties.principalId", "roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)")
	if !strings.Contains(src, "resource workerRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in workerRoleIds: {") {
		t.Error("workerRoles does not assign each of workerRoleIds")
	}
	sender := res["schedulerSender"]
	mustContain(t, "schedulerSender", sender.body, "scope: workQueue", "roles.storageQueueDataMessageSender")
	mustContain(t, "the roles variable", src, "storageQueueDataMessageSender: 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'")

	names, undocumented := params(src)
	if len(names) < 10 {
		t.Fatalf("found only %d params: %v", len(names), names)
	}
	if len(undocumented) > 0 {
		t.Errorf("params without @description: %v", undocumented)
	}
}

// TestParamsNamedExist: every parameter the Container Apps section of
// docs/deploy.md and the example parameters file name is a param of
// main.bicep.
func TestParamsNamedExist(t *testing.T) {
	names, _ := params(read(t, "main.bicep"))

	doc := read(t, filepath.Join("..", "..", "docs", "deploy.md"))
	const heading = "\n## Azure Container Apps\n"
	start := strings.Index(doc, heading)
	if start < 0 {
		t.Fatalf("docs/deploy.md has no %q section", strings.TrimSpace(heading))
	}
	aca := doc[start+1:]
	if end := strings.Index(aca[1:], "\n## "); end >= 0 {
		aca = aca[:end+1]
	}

	var named []string
	// -p key=value … in the az deployment group create command.
	cmd := aca[strings.Index(aca, "az deployment group create"):]
	cmd = cmd[:strings.Index(cmd, "```")]
	for _, m := range regexp.MustCompile(`(?:^|\s)([a-zA-Z]\w*)=`).FindAllStringSubmatch(strings.ReplaceAll(cmd, "\\\n", " "), -1) {
		named = append(named, m[1])
	}
	// The first column of the parameters table: `a`, `b`.
	for _, line := range strings.Split(aca, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`(\\w+)`").FindAllStringSubmatch(first, -1) {
			named = append(named, m[1])
		}
	}
	// Parameters named in prose as <name>.
	for _, m := range regexp.MustCompile(`<(\w+)(?: − 60)?>`).FindAllStringSubmatch(aca, -1) {
		named = append(named, m[1])
	}
	if len(named) < 15 {
		t.Fatalf("found only %d parameter names in docs/deploy.md's Container Apps section: %v", len(named), named)
	}
	for _, n := range named {
		if !slices.Contains(names, n) {
			t.Errorf("docs/deploy.md names parameter %q, which main.bicep does not declare", n)
		}
	}

	for _, m := range regexp.MustCompile(`(?m)^param (\w+) =`).FindAllStringSubmatch(read(t, "main.bicepparam"), -1) {
		if !slices.Contains(names, m[1]) {
			t.Errorf("main.bicepparam sets %q, which main.bicep does not declare", m[1])
		}
	}
}
