package kubernetes

// These tests read the manifests as kubectl would receive them from
// render.sh (placeholders filled with the example values below), decode
// every document strictly into the upstream API types (k8s.io/api for the
// core kinds, the mirrors in keda_test.go for KEDA's), and check the pieces
// docs/deploy.md promises: the worker's flags (-drain only in the ScaledJob),
// the probes, a termination grace longer than the worker's shutdown grace,
// a non-root read-only pod, workload identity, and the queueLengthStrategy
// of each variant. No cluster is reachable here, so nothing is applied.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/tablekeeper/tablekeeper/jobs/runner"
)

// example fills the placeholders: distinct values, so a test can tell which
// one landed where (a scaler identity in the worker's place, say).
var example = map[string]string{
	"TK_IMAGE":               "tablekeeper.azurecr.io/tablekeeper:v1.2.3",
	"TK_STORAGE_ACCOUNT":     "tkexamplestore",
	"TK_QUEUE":               "orders",
	"TK_WORKER_CLIENT_ID":    "00000000-0000-0000-0000-00000000000a",
	"TK_SCALER_CLIENT_ID":    "00000000-0000-0000-0000-00000000000b",
	"TK_SCHEDULER_CLIENT_ID": "00000000-0000-0000-0000-00000000000c",
	"TK_PURGE_PREFIX":        "LoginAttempts",
	"TK_PURGE_KEEP_DAYS":     "30",
}

// The names the manifests give and docs/deploy.md uses.
const (
	workerSA    = "tablekeeper-worker"
	schedulerSA = "tablekeeper-scheduler"
	httpAddr    = ":8080"
)

// script is what render.sh declares: its variables and each variant's files.
type script struct {
	vars     []string
	variants map[string][]string
}

func readScript(t *testing.T) script {
	t.Helper()
	b, err := os.ReadFile("render.sh")
	if err != nil {
		t.Fatal(err)
	}
	s := script{variants: map[string][]string{}}
	m := regexp.MustCompile(`(?m)^vars='([^']*)'$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("render.sh: no vars='…' line")
	}
	s.vars = strings.Fields(string(m[1]))
	for _, m := range regexp.MustCompile(`(?m)^(\w+)\) files='([^']*)'`).FindAllSubmatch(b, -1) {
		s.variants[string(m[1])] = strings.Fields(string(m[2]))
	}
	if len(s.variants) != 2 || s.variants["job"] == nil || s.variants["deployment"] == nil {
		t.Fatalf("render.sh: variants %v, want job and deployment", s.variants)
	}
	return s
}

// placeholder matches what render.sh's envsubst substitutes, and any other
// shell-style reference that would be left in the output or mangled.
var placeholder = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// render returns file with its placeholders filled from example, as
// render.sh does with the environment.
func render(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(os.Expand(string(b), func(name string) string {
		v, ok := example[name]
		if !ok {
			t.Errorf("%s: placeholder $%s has no example value (and is it in render.sh's vars?)", file, name)
		}
		return v
	}))
}

// splitDocuments splits a multi-document YAML stream at its "---" lines,
// leaving out documents that hold only comments and blank lines.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1) {
		empty := true
		for _, line := range strings.Split(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// decodeStrict decodes JSON into v refusing unknown fields. encoding/json
// matches keys case-insensitively and the API server does not, so it then
// encodes v again and requires every key and value of the input to come
// back unchanged: "pollinginterval" for "pollingInterval" fails here, as
// does a value the type cannot hold exactly.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	back, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var in, out any
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	if err := json.Unmarshal(back, &out); err != nil {
		return err
	}
	return contained("", in, out)
}

// contained reports the first key or value of in that out lacks or holds
// differently.
func contained(path string, in, out any) error {
	switch x := in.(type) {
	case map[string]any:
		o, ok := out.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: an object became %T", path, out)
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ov, ok := o[k]
			if !ok {
				return fmt.Errorf("%s.%s: not a field of the type (a key spelt in another case?)", path, k)
			}
			if err := contained(path+"."+k, x[k], ov); err != nil {
				return err
			}
		}
	case []any:
		o, ok := out.([]any)
		if !ok || len(o) != len(x) {
			return fmt.Errorf("%s: a list of %d became %v", path, len(x), out)
		}
		for i := range x {
			if err := contained(fmt.Sprintf("%s[%d]", path, i), x[i], o[i]); err != nil {
				return err
			}
		}
	default:
		if !reflect.DeepEqual(in, out) {
			return fmt.Errorf("%s: %v came back as %v", path, in, out)
		}
	}
	return nil
}

// objects are the decoded documents of one or more manifest files.
type objects struct {
	serviceAccounts map[string]*corev1.ServiceAccount
	triggerAuths    map[string]*TriggerAuthentication
	deployments     []*appsv1.Deployment
	cronJobs        []*batchv1.CronJob
	scaledJobs      []*ScaledJob
	scaledObjects   []*ScaledObject
}

// load renders and strictly decodes every document of files.
func load(t *testing.T, files ...string) *objects {
	t.Helper()
	o := &objects{
		serviceAccounts: map[string]*corev1.ServiceAccount{},
		triggerAuths:    map[string]*TriggerAuthentication{},
	}
	for _, file := range files {
		for i, doc := range splitDocuments(render(t, file)) {
			where := fmt.Sprintf("%s document %d", file, i+1)
			js, err := yaml.YAMLToJSONStrict(doc)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var tm metav1.TypeMeta
			if err := json.Unmarshal(js, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var v any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 ServiceAccount":
				v = &corev1.ServiceAccount{}
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				v = d
				o.deployments = append(o.deployments, d)
			case "batch/v1 CronJob":
				c := &batchv1.CronJob{}
				v = c
				o.cronJobs = append(o.cronJobs, c)
			case "keda.sh/v1alpha1 ScaledJob":
				s := &ScaledJob{}
				v = s
				o.scaledJobs = append(o.scaledJobs, s)
			case "keda.sh/v1alpha1 ScaledObject":
				s := &ScaledObject{}
				v = s
				o.scaledObjects = append(o.scaledObjects, s)
			case "keda.sh/v1alpha1 TriggerAuthentication":
				v = &TriggerAuthentication{}
			default:
				t.Fatalf("%s: kind %q %q is not one the test knows", where, tm.APIVersion, tm.Kind)
			}
			if err := decodeStrict(js, v); err != nil {
				t.Fatalf("%s (%s): %v", where, tm.Kind, err)
			}
			switch x := v.(type) {
			case *corev1.ServiceAccount:
				o.serviceAccounts[x.Name] = x
			case *TriggerAuthentication:
				o.triggerAuths[x.Metadata.Name] = x
			}
		}
	}
	return o
}

func TestStrictDecodingRefusesWhatTheAPIWouldNot(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":      `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledJob","metadata":{"name":"x"},"spec":{"jobTargetRef":{"template":{"spec":{"containers":[{"name":"w","imagePullPolicyy":"Always"}]}}},"triggers":[]}}`,
		"key in other case":  `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledJob","metadata":{"name":"x"},"spec":{"pollinginterval":15,"triggers":[]}}`,
		"misplaced field":    `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledJob","metadata":{"name":"x"},"spec":{"queueLengthStrategy":"visibleonly","triggers":[]}}`,
		"wrong value type":   `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledJob","metadata":{"name":"x"},"spec":{"pollingInterval":"15","triggers":[]}}`,
		"core unknown field": `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"x","annotation":{}}}`,
	} {
		var v any = &ScaledJob{}
		if strings.Contains(doc, "ServiceAccount") {
			v = &corev1.ServiceAccount{}
		}
		if err := decodeStrict([]byte(doc), v); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	// And a document that uses only known fields decodes.
	ok := `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledJob","metadata":{"name":"x"},"spec":{"pollingInterval":15,"triggers":[]}}`
	if err := decodeStrict([]byte(ok), &ScaledJob{}); err != nil {
		t.Errorf("a valid ScaledJob: %v", err)
	}
}

// TestRenderScript checks that render.sh substitutes exactly the
// placeholders the manifests hold, and that each variant is a complete,
// non-overlapping set: every manifest is in a variant, and the two worker
// forms are never applied together.
func TestRenderScript(t *testing.T) {
	s := readScript(t)
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range placeholder.FindAllStringSubmatch(string(b), -1) {
			if !strings.HasPrefix(m[0], "${") || !strings.HasSuffix(m[0], "}") {
				t.Errorf("%s: %q: write placeholders as ${TK_NAME}", f, m[0])
			}
			used[m[1]] = true
		}
	}
	var usedList []string
	for v := range used {
		usedList = append(usedList, v)
	}
	sort.Strings(usedList)
	declared := slices.Sorted(slices.Values(s.vars))
	if !slices.Equal(usedList, declared) {
		t.Errorf("placeholders in the manifests %v, render.sh substitutes %v", usedList, declared)
	}
	exampled := slices.Sorted(func(yield func(string) bool) {
		for k := range example {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(exampled, declared) {
		t.Errorf("the test's example values %v, render.sh's variables %v", exampled, declared)
	}
	inVariant := map[string]bool{}
	for name, fs := range s.variants {
		for _, f := range fs {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("render.sh %s: %v", name, err)
			}
			inVariant[f] = true
		}
	}
	for _, f := range files {
		if !inVariant[f] {
			t.Errorf("%s is in no variant of render.sh", f)
		}
	}
	job, dep := s.variants["job"], s.variants["deployment"]
	if slices.Contains(job, "deployment.yaml") || slices.Contains(job, "scaledobject.yaml") ||
		slices.Contains(dep, "scaledjob.yaml") {
		t.Errorf("a variant holds both worker forms: job %v, deployment %v", job, dep)
	}
}

// flagValue returns the value of -name in a command's arguments (as
// "-name value" or "-name=value"; one or two dashes, as Go's flag package
// accepts) and whether the flag is there at all.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				return args[i+1], true
			}
			return "", true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// shutdownGrace is the worker's -shutdown-grace in args, or its default.
func shutdownGrace(t *testing.T, args []string) time.Duration {
	t.Helper()
	v, ok := flagValue(args, "shutdown-grace")
	if !ok {
		return runner.DefaultShutdownGrace
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("-shutdown-grace %q: %v", v, err)
	}
	return d
}

// checkPod checks what every tablekeeper pod promises: the ServiceAccount
// it names exists and carries a workload identity client id (want), the
// pod is labelled for the identity webhook, runs as a numeric non-root
// user, and each container has a read-only root, no privilege escalation,
// no capabilities, the image, the storage account by name and no secret.
func checkPod(t *testing.T, what string, o *objects, pod corev1.PodTemplateSpec, sa, wantClientID string) {
	t.Helper()
	spec := pod.Spec
	if spec.ServiceAccountName != sa {
		t.Errorf("%s: serviceAccountName %q, want %q", what, spec.ServiceAccountName, sa)
	}
	if acct := o.serviceAccounts[spec.ServiceAccountName]; acct == nil {
		t.Errorf("%s: ServiceAccount %q is not in the variant", what, spec.ServiceAccountName)
	} else {
		if got := acct.Annotations["azure.workload.identity/client-id"]; got != wantClientID {
			t.Errorf("%s: ServiceAccount %s client-id %q, want %q", what, acct.Name, got, wantClientID)
		}
		if acct.AutomountServiceAccountToken == nil || *acct.AutomountServiceAccountToken {
			t.Errorf("%s: ServiceAccount %s mounts a Kubernetes API token it does not need", what, acct.Name)
		}
	}
	if got := pod.Labels["azure.workload.identity/use"]; got != "true" {
		t.Errorf(`%s: pod label azure.workload.identity/use %q, want "true"`, what, got)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod securityContext.runAsNonRoot is not true", what)
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: pod securityContext.runAsUser is not a numeric non-root user", what)
	}
	if len(spec.Containers) == 0 {
		t.Fatalf("%s: no containers", what)
	}
	for _, c := range spec.Containers {
		where := what + " container " + c.Name
		if c.Image != example["TK_IMAGE"] {
			t.Errorf("%s: image %q, want %q", where, c.Image, example["TK_IMAGE"])
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem is not true", where)
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", where)
		}
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities must drop ALL and add none", where)
		}
		account := ""
		for _, e := range c.Env {
			if e.Name == "AZURE_STORAGE_ACCOUNT" {
				account = e.Value
			}
			if e.Name == "AZURE_STORAGE_CONNECTION_STRING" || e.Name == "AZURE_STORAGE_SAS_TOKEN" ||
				strings.Contains(e.Value, "AccountKey=") || strings.Contains(e.Value, "sig=") {
				t.Errorf("%s: env %s holds a secret; the pods authenticate with workload identity", where, e.Name)
			}
		}
		if account != example["TK_STORAGE_ACCOUNT"] {
			t.Errorf("%s: AZURE_STORAGE_ACCOUNT %q, want %q", where, account, example["TK_STORAGE_ACCOUNT"])
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: no memory limit", where)
		}
	}
}

// checkWorker checks the worker container of a pod: its queue and -http
// flags, and that the HTTP port and probes agree with them. It returns the
// container.
func checkWorker(t *testing.T, what string, pod corev1.PodTemplateSpec, probes map[string]string) corev1.Container {
	t.Helper()
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want the worker alone", what, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if len(c.Command) > 0 {
		t.Errorf("%s: command %v overrides the image's entrypoint, /worker", what, c.Command)
	}
	if q, _ := flagValue(c.Args, "queue"); q != example["TK_QUEUE"] {
		t.Errorf("%s: -queue %q, want %q", what, q, example["TK_QUEUE"])
	}
	addr, _ := flagValue(c.Args, "http")
	if addr != httpAddr {
		t.Fatalf("%s: -http %q, want %q", what, addr, httpAddr)
	}
	port, _ := strconv.Atoi(strings.TrimPrefix(addr, ":"))
	named := map[string]int32{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	probe := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe}
	for kind, p := range probe {
		want, promised := probes[kind]
		switch {
		case p == nil && promised:
			t.Errorf("%s: no %s probe, want GET %s", what, kind, want)
		case p != nil && !promised:
			t.Errorf("%s: a %s probe docs/deploy.md does not describe", what, kind)
		case p != nil:
			g := p.HTTPGet
			if g == nil {
				t.Errorf("%s: %s probe is not an HTTP GET", what, kind)
				continue
			}
			if g.Path != want {
				t.Errorf("%s: %s probe path %q, want %q", what, kind, g.Path, want)
			}
			got := g.Port.IntVal
			if g.Port.StrVal != "" {
				got = named[g.Port.StrVal]
			}
			if int(got) != port {
				t.Errorf("%s: %s probe port %v is not the -http port %d", what, kind, g.Port.String(), port)
			}
		}
	}
	return c
}

// checkTrigger checks an azure-queue trigger: documented metadata names
// only, the account and queue, a whole queueLength, the strategy, and an
// authenticationRef to a TriggerAuthentication of the variant.
func checkTrigger(t *testing.T, what string, o *objects, triggers []ScaleTrigger, strategy string) {
	t.Helper()
	if len(triggers) != 1 {
		t.Fatalf("%s: %d triggers, want the work queue's", what, len(triggers))
	}
	tr := triggers[0]
	if tr.Type != "azure-queue" {
		t.Errorf("%s: trigger type %q", what, tr.Type)
	}
	for k := range tr.Metadata {
		if !azureQueueMetadata[k] {
			t.Errorf("%s: trigger metadata %q is not an azure-queue parameter", what, k)
		}
	}
	md := tr.Metadata
	if md["accountName"] != example["TK_STORAGE_ACCOUNT"] || md["queueName"] != example["TK_QUEUE"] {
		t.Errorf("%s: trigger account %q queue %q", what, md["accountName"], md["queueName"])
	}
	if n, err := strconv.Atoi(md["queueLength"]); err != nil || n < 1 {
		t.Errorf("%s: queueLength %q is not a whole number >= 1", what, md["queueLength"])
	}
	if md["queueLengthStrategy"] != strategy {
		t.Errorf("%s: queueLengthStrategy %q, want %q", what, md["queueLengthStrategy"], strategy)
	}
	if md["connectionFromEnv"] != "" {
		t.Errorf("%s: the scaler uses a connection string; it must use workload identity", what)
	}
	ref := tr.AuthenticationRef
	if ref == nil || (ref.Kind != "" && ref.Kind != "TriggerAuthentication") || o.triggerAuths[ref.Name] == nil {
		t.Fatalf("%s: authenticationRef %+v names no TriggerAuthentication of the variant", what, ref)
	}
	pi := o.triggerAuths[ref.Name].Spec.PodIdentity
	if pi == nil || pi.Provider != "azure-workload" {
		t.Fatalf("%s: TriggerAuthentication %s: podIdentity.provider is not azure-workload", what, ref.Name)
	}
	if pi.IdentityID == nil || *pi.IdentityID != example["TK_SCALER_CLIENT_ID"] {
		t.Errorf("%s: TriggerAuthentication %s: identityId %v, want the scaler identity %q", what, ref.Name, show(pi.IdentityID), example["TK_SCALER_CLIENT_ID"])
	}
}

// checkCronJob checks the daily purge: one enqueue purgeday a day, never
// two at once, sending with the scheduler identity.
func checkCronJob(t *testing.T, o *objects) {
	t.Helper()
	if len(o.cronJobs) != 1 {
		t.Fatalf("%d CronJobs, want the daily purge", len(o.cronJobs))
	}
	cj := o.cronJobs[0]
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("CronJob concurrencyPolicy %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	if f := strings.Fields(cj.Spec.Schedule); len(f) != 5 || f[2] != "*" || f[3] != "*" || f[4] != "*" {
		t.Errorf("CronJob schedule %q is not once a day", cj.Spec.Schedule)
	}
	if cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Etc/UTC" {
		t.Errorf("CronJob timeZone %v: day tables are named in UTC", show(cj.Spec.TimeZone))
	}
	pod := cj.Spec.JobTemplate.Spec.Template
	checkPod(t, "CronJob", o, pod, schedulerSA, example["TK_SCHEDULER_CLIENT_ID"])
	c := pod.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/enqueue"}) || len(c.Args) == 0 || c.Args[0] != "purgeday" {
		t.Fatalf("CronJob runs %v %v, want /enqueue purgeday", c.Command, c.Args)
	}
	for flag, want := range map[string]string{"queue": example["TK_QUEUE"], "prefix": example["TK_PURGE_PREFIX"], "keep-days": example["TK_PURGE_KEEP_DAYS"]} {
		if got, _ := flagValue(c.Args[1:], flag); got != want {
			t.Errorf("CronJob -%s %q, want %q", flag, got, want)
		}
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever && pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("CronJob restartPolicy %q", pod.Spec.RestartPolicy)
	}
}

// TestScaledJobVariant checks render.sh job: KEDA starts Jobs that drain.
func TestScaledJobVariant(t *testing.T) {
	o := load(t, readScript(t).variants["job"]...)
	if len(o.scaledJobs) != 1 || len(o.deployments) != 0 || len(o.scaledObjects) != 0 {
		t.Fatalf("%d ScaledJobs, %d Deployments, %d ScaledObjects; want one ScaledJob alone", len(o.scaledJobs), len(o.deployments), len(o.scaledObjects))
	}
	sj := o.scaledJobs[0]
	s := sj.Spec
	for name, p := range map[string]*int32{
		"pollingInterval": s.PollingInterval, "maxReplicaCount": s.MaxReplicaCount,
		"successfulJobsHistoryLimit": s.SuccessfulJobsHistoryLimit, "failedJobsHistoryLimit": s.FailedJobsHistoryLimit,
	} {
		if p == nil || *p < 1 {
			t.Errorf("ScaledJob %s is not set to 1 or more", name)
		}
	}
	if s.ScalingStrategy == nil || s.ScalingStrategy.Strategy != "accurate" {
		t.Errorf("ScaledJob scalingStrategy %+v, want accurate (the queue length leaves out running Jobs' messages)", s.ScalingStrategy)
	}
	if s.Rollout == nil || s.Rollout.Strategy != "gradual" {
		t.Errorf("ScaledJob rollout %+v, want gradual (an update must not delete running Jobs)", s.Rollout)
	}
	checkTrigger(t, "ScaledJob", o, s.Triggers, "visibleonly")

	jt := s.JobTargetRef
	if jt == nil {
		t.Fatal("ScaledJob has no jobTargetRef")
	}
	pod := jt.Template
	checkPod(t, "ScaledJob", o, pod, workerSA, example["TK_WORKER_CLIENT_ID"])
	c := checkWorker(t, "ScaledJob", pod, map[string]string{"liveness": "/healthz"})
	if _, drain := flagValue(c.Args, "drain"); !drain {
		t.Errorf("ScaledJob worker args %v lack -drain: the Job would never complete", c.Args)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("ScaledJob restartPolicy %q, want Never", pod.Spec.RestartPolicy)
	}
	// KEDA's CRD requires what batch/v1 marks required without omitempty
	// (a Job's API defaulting fills onPodConditions' status; a ScaledJob's
	// jobTargetRef gets none), which strict decoding does not check.
	if p := jt.PodFailurePolicy; p != nil {
		for i, r := range p.Rules {
			for j, pc := range r.OnPodConditions {
				if pc.Type == "" || pc.Status == "" {
					t.Errorf("ScaledJob podFailurePolicy.rules[%d].onPodConditions[%d] = %+v: type and status are required by KEDA's CRD", i, j, pc)
				}
			}
		}
	}
	grace := shutdownGrace(t, c.Args)
	tgp := pod.Spec.TerminationGracePeriodSeconds
	if tgp == nil || time.Duration(*tgp)*time.Second <= grace {
		t.Errorf("ScaledJob terminationGracePeriodSeconds %v is not longer than -shutdown-grace %v", show(tgp), grace)
	}
	if v, ok := flagValue(c.Args, "max-duration"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("-max-duration %q: %v", v, err)
		}
		if jt.ActiveDeadlineSeconds == nil || time.Duration(*jt.ActiveDeadlineSeconds)*time.Second <= d+grace {
			t.Errorf("ScaledJob activeDeadlineSeconds %v would kill a worker before -max-duration %v and its grace %v", show(jt.ActiveDeadlineSeconds), d, grace)
		}
	}
	checkCronJob(t, o)
}

// TestDeploymentVariant checks render.sh deployment: long-running workers
// with probes, scaled by a ScaledObject.
func TestDeploymentVariant(t *testing.T) {
	o := load(t, readScript(t).variants["deployment"]...)
	if len(o.deployments) != 1 || len(o.scaledObjects) != 1 || len(o.scaledJobs) != 0 {
		t.Fatalf("%d Deployments, %d ScaledObjects, %d ScaledJobs; want one Deployment and its ScaledObject", len(o.deployments), len(o.scaledObjects), len(o.scaledJobs))
	}
	d, so := o.deployments[0], o.scaledObjects[0]
	pod := d.Spec.Template
	checkPod(t, "Deployment", o, pod, workerSA, example["TK_WORKER_CLIENT_ID"])
	c := checkWorker(t, "Deployment", pod, map[string]string{"liveness": "/healthz", "readiness": "/readyz"})
	if _, drain := flagValue(c.Args, "drain"); drain {
		t.Errorf("Deployment worker args %v hold -drain: the pod would exit and restart whenever the queue is empty", c.Args)
	}
	grace := shutdownGrace(t, c.Args)
	tgp := pod.Spec.TerminationGracePeriodSeconds
	if tgp == nil || time.Duration(*tgp)*time.Second <= grace {
		t.Errorf("Deployment terminationGracePeriodSeconds %v is not longer than -shutdown-grace %v", show(tgp), grace)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("Deployment selector %v does not select its pods %v", sel, pod.Labels)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("Deployment rollingUpdate %+v: maxUnavailable must be 0 so readiness gates a rollout", ru)
	}

	ref := so.Spec.ScaleTargetRef
	if ref == nil || ref.Name != d.Name || (ref.Kind != "" && ref.Kind != "Deployment") || (ref.APIVersion != "" && ref.APIVersion != "apps/v1") {
		t.Errorf("ScaledObject scaleTargetRef %+v does not name Deployment %s", ref, d.Name)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
		t.Fatalf("ScaledObject minReplicaCount %v: docs/deploy.md promises one warm replica", show(so.Spec.MinReplicaCount))
	}
	if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount < *so.Spec.MinReplicaCount {
		t.Errorf("ScaledObject maxReplicaCount %v", show(so.Spec.MaxReplicaCount))
	}
	checkTrigger(t, "ScaledObject", o, so.Spec.Triggers, "all")
	checkCronJob(t, o)
}

// TestStrategiesAreExplained checks that each queueLengthStrategy comes
// with its reason in the manifest, as docs/deploy.md says.
func TestStrategiesAreExplained(t *testing.T) {
	for file, words := range map[string][]string{
		"scaledjob.yaml":    {"queueLengthStrategy: visibleonly", "retry backoff", "scalingStrategy: accurate"},
		"scaledobject.yaml": {"queueLengthStrategy: all", "visibleonly"},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var comments strings.Builder
		for _, line := range strings.Split(string(b), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "#") {
				comments.WriteString(l + "\n")
			}
		}
		for _, w := range words {
			if !strings.Contains(comments.String(), w) {
				t.Errorf("%s: the comments do not mention %q", file, w)
			}
		}
	}
}

// TestDeployDoc checks the Kubernetes section of docs/deploy.md: it names
// every variable render.sh needs, every ServiceAccount (the federated
// credentials' subjects), KEDA's operator account, and the commands that
// take a user from nothing to a running ScaledJob.
func TestDeployDoc(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	const heading = "## Kubernetes with KEDA"
	_, sec, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/deploy.md has no %q section", heading)
	}
	sec = untilHeading(sec)
	s := readScript(t)
	for _, v := range s.vars {
		if !regexp.MustCompile(`(?m)^(export )?` + v + `=`).MatchString(sec) {
			t.Errorf("docs/deploy.md: the Kubernetes section does not set %s", v)
		}
	}
	o := load(t, "serviceaccount.yaml")
	for name := range o.serviceAccounts {
		if !strings.Contains(sec, ":"+name) {
			t.Errorf("docs/deploy.md: no federated credential subject for ServiceAccount %s", name)
		}
	}
	for _, w := range []string{
		"--enable-oidc-issuer", "--enable-workload-identity", // the cluster
		"podIdentity.azureWorkload.enabled=true", "system:serviceaccount:keda:keda-operator", // KEDA
		"az identity federated-credential create",
		"Storage Queue Data Contributor", "Storage Table Data Contributor", "Storage Blob Data Contributor",
		"Storage Queue Data Reader", "Storage Queue Data Message Sender",
		"az storage queue create",
		"render.sh job", "render.sh deployment", "kubectl apply",
		"visibleonly", "queueLengthStrategy",
	} {
		if !strings.Contains(sec, w) {
			t.Errorf("docs/deploy.md: the Kubernetes section does not mention %q", w)
		}
	}
}

// untilHeading returns md up to its first heading of level 1 to 3 outside
// a fenced code block (a shell comment in a block is not a heading).
func untilHeading(md string) string {
	fenced := false
	n := 0
	for _, line := range strings.SplitAfter(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && regexp.MustCompile(`^#{1,3} `).MatchString(line) {
			break
		}
		n += len(line)
	}
	return md[:n]
}

// show formats an optional field for a message: its value, or "unset".
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
