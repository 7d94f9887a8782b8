package kubernetes

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// backupExample are the backup recipe's own placeholders' example values.
var backupExample = map[string]string{
	"TK_BACKUP_TABLE":     "Orders",
	"TK_BACKUP_TO":        "backups/orders",
	"TK_BACKUP_KEEP_DAYS": "35",
}

// TestBackupRecipe checks backup/backup.yaml, the scheduled backup of
// docs/deploy.md: strictly decoded CronJobs (as the API server would take
// them), every placeholder with a value; a weekly full export and a
// nightly increment on the other days (-after-latest), both sending as the
// scheduler; a daily prune with -yes as the worker (it deletes blobs);
// never two runs of one at once, in UTC, each pod as locked down as the
// other manifests'.
func TestBackupRecipe(t *testing.T) {
	const file = "backup/backup.yaml"
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rendered := os.Expand(string(raw), func(name string) string {
		if v, ok := backupExample[name]; ok {
			return v
		}
		v, ok := example[name]
		if !ok {
			t.Errorf("%s: placeholder $%s has no example value", file, name)
		}
		return v
	})
	// The comment's envsubst line lists every placeholder the file uses.
	for _, m := range placeholder.FindAllStringSubmatch(string(raw), -1) {
		if !strings.Contains(string(raw), "'${"+m[1]+"}") && !strings.Contains(string(raw), " ${"+m[1]+"}") {
			t.Errorf("%s: the envsubst line does not list ${%s}", file, m[1])
		}
	}
	o := load(t, "serviceaccount.yaml")
	jobs := map[string]*batchv1.CronJob{}
	for i, doc := range splitDocuments([]byte(rendered)) {
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Fatalf("%s document %d: %v", file, i+1, err)
		}
		cj := &batchv1.CronJob{}
		if err := decodeStrict(js, cj); err != nil || cj.Kind != "CronJob" || cj.APIVersion != "batch/v1" {
			t.Fatalf("%s document %d: %s %s, %v", file, i+1, cj.APIVersion, cj.Kind, err)
		}
		jobs[cj.Name] = cj
	}
	for _, c := range []struct {
		name, schedule, sa string
		args               []string
	}{
		{"tablekeeper-backup-weekly", "30 1 * * 0", schedulerSA, []string{"export", "-queue", "orders", "-table", "Orders", "-to", "backups/orders", "-gzip"}},
		{"tablekeeper-backup-nightly", "30 1 * * 1-6", schedulerSA, []string{"export", "-queue", "orders", "-table", "Orders", "-to", "backups/orders", "-after-latest", "-gzip"}},
		{"tablekeeper-backup-prune", "0 5 * * *", workerSA, []string{"export", "prune", "-to", "backups/orders", "-keep-days", "35", "-yes"}},
	} {
		cj := jobs[c.name]
		if cj == nil {
			t.Errorf("no CronJob %s", c.name)
			continue
		}
		if cj.Spec.Schedule != c.schedule || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Etc/UTC" {
			t.Errorf("%s: schedule %q, concurrencyPolicy %q, timeZone %v; want %q, Forbid, Etc/UTC", c.name, cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy, show(cj.Spec.TimeZone), c.schedule)
		}
		pod := cj.Spec.JobTemplate.Spec.Template
		clientID := example["TK_SCHEDULER_CLIENT_ID"]
		if c.sa == workerSA {
			clientID = example["TK_WORKER_CLIENT_ID"]
		}
		checkPod(t, c.name, o, pod, c.sa, clientID)
		ct := pod.Spec.Containers[0]
		if !slices.Equal(ct.Command, []string{"/enqueue"}) || !slices.Equal(ct.Args, c.args) {
			t.Errorf("%s runs %v %v, want /enqueue %v", c.name, ct.Command, ct.Args, c.args)
		}
		if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("%s: restartPolicy %q", c.name, pod.Spec.RestartPolicy)
		}
	}
	if len(jobs) != 3 {
		t.Errorf("%d CronJobs, want 3", len(jobs))
	}
}
