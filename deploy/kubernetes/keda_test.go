package kubernetes

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mirrors of KEDA's keda.sh/v1alpha1 kinds, holding only the fields these
// manifests may use, so that strict decoding refuses anything else (a
// misspelt or misplaced field would otherwise be dropped by the API server
// or refused by KEDA's webhook only at apply time).
//
// Why a mirror and not KEDA's own types: they live in the module
// github.com/kedacore/keda/v2, whose go.mod requires about 110 modules
// directly (every scaler's SDK: AWS, GCP, Kafka, databases…) plus
// controller-runtime and client-go, which its apis/keda/v1alpha1 package
// imports for its admission webhooks; and it pins k8s.io/* with replace
// directives, which do not apply to a module that depends on it. That is a
// heavy and fragile dependency for a test that reads five YAML files. The
// mirror embeds the upstream Kubernetes types where KEDA does (the Job spec,
// the HPA behaviour), so those parts are checked against the real schema.
//
// Each field cites KEDA's documented schema:
//
//	[ScaledJob spec]      https://keda.sh/docs/latest/reference/scaledjob-spec/
//	[ScaledObject spec]   https://keda.sh/docs/latest/reference/scaledobject-spec/
//	[azure-queue scaler]  https://keda.sh/docs/latest/scalers/azure-storage-queue/
//	[workload identity]   https://keda.sh/docs/latest/authentication-providers/azure-ad-workload-identity/
//	[authentication]      https://keda.sh/docs/latest/concepts/authentication/
//	[types]               github.com/kedacore/keda apis/keda/v1alpha1/{scaledjob,scaledobject,scaletriggers,triggerauthentication}_types.go

// ScaledJob mirrors keda.sh/v1alpha1 ScaledJob ([ScaledJob spec]).
type ScaledJob struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ScaledJobSpec     `json:"spec"`
}

// ScaledJobSpec mirrors ScaledJobSpec ([ScaledJob spec], [types]).
type ScaledJobSpec struct {
	// JobTargetRef is a batch/v1 JobSpec: "jobTargetRef … describes the
	// job template" ([ScaledJob spec]); KEDA's type is *batchv1.JobSpec.
	JobTargetRef *batchv1.JobSpec `json:"jobTargetRef"`
	// PollingInterval is how often, in seconds, KEDA checks each trigger
	// (default 30).
	PollingInterval *int32 `json:"pollingInterval,omitempty"`
	// SuccessfulJobsHistoryLimit and FailedJobsHistoryLimit are how many
	// finished Jobs are kept (defaults 100 each).
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`
	FailedJobsHistoryLimit     *int32 `json:"failedJobsHistoryLimit,omitempty"`
	// MinReplicaCount and MaxReplicaCount bound the Jobs KEDA runs at
	// once (defaults 0 and 100).
	MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
	// Rollout says what happens to running Jobs when the ScaledJob
	// changes: "default" deletes them, "gradual" leaves them to finish.
	Rollout *Rollout `json:"rollout,omitempty"`
	// ScalingStrategy picks how many new Jobs to start: default, custom,
	// accurate or eager.
	ScalingStrategy *ScalingStrategy `json:"scalingStrategy,omitempty"`
	// Triggers are the scalers ([azure-queue scaler]).
	Triggers []ScaleTrigger `json:"triggers"`
}

// Rollout mirrors ScaledJobSpec.rollout ([ScaledJob spec]: rollout.strategy
// "default" or "gradual", rollout.propagationPolicy).
type Rollout struct {
	Strategy          string `json:"strategy,omitempty"`
	PropagationPolicy string `json:"propagationPolicy,omitempty"`
}

// ScalingStrategy mirrors ScaledJobSpec.scalingStrategy ([ScaledJob spec]).
type ScalingStrategy struct {
	// Strategy is default, custom, accurate or eager.
	Strategy string `json:"strategy,omitempty"`
	// MultipleScalersCalculation is max, min, avg or sum.
	MultipleScalersCalculation string `json:"multipleScalersCalculation,omitempty"`
	// PendingPodConditions lists the pod conditions that make a Job's pod
	// count as running rather than pending.
	PendingPodConditions []string `json:"pendingPodConditions,omitempty"`
}

// ScaledObject mirrors keda.sh/v1alpha1 ScaledObject ([ScaledObject spec]).
type ScaledObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ScaledObjectSpec  `json:"spec"`
}

// ScaledObjectSpec mirrors ScaledObjectSpec ([ScaledObject spec], [types]).
type ScaledObjectSpec struct {
	// ScaleTargetRef names the workload to scale (a Deployment by default).
	ScaleTargetRef *ScaleTarget `json:"scaleTargetRef"`
	// PollingInterval is how often, in seconds, KEDA checks each trigger
	// (default 30).
	PollingInterval *int32 `json:"pollingInterval,omitempty"`
	// CooldownPeriod is how long, in seconds, after the last active
	// trigger KEDA waits before scaling to zero (only with minReplicaCount 0).
	CooldownPeriod *int32 `json:"cooldownPeriod,omitempty"`
	// MinReplicaCount and MaxReplicaCount bound the replicas (defaults 0
	// and 100).
	MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
	// Advanced holds the HPA settings KEDA passes on.
	Advanced *AdvancedConfig `json:"advanced,omitempty"`
	// Triggers are the scalers ([azure-queue scaler]).
	Triggers []ScaleTrigger `json:"triggers"`
}

// ScaleTarget mirrors scaleTargetRef ([ScaledObject spec]).
type ScaleTarget struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name"`
}

// AdvancedConfig mirrors advanced ([ScaledObject spec]).
type AdvancedConfig struct {
	HorizontalPodAutoscalerConfig *HorizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
}

// HorizontalPodAutoscalerConfig mirrors advanced.horizontalPodAutoscalerConfig:
// behavior is the autoscaling/v2 HPA behaviour KEDA copies into its HPA.
type HorizontalPodAutoscalerConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

// ScaleTrigger mirrors one entry of triggers ([types] ScaleTriggers).
type ScaleTrigger struct {
	// Type names the scaler: azure-queue here.
	Type string `json:"type"`
	// Name is optional and unique among a resource's triggers.
	Name string `json:"name,omitempty"`
	// Metadata is the scaler's parameters, all strings; their names are
	// checked against azureQueueMetadata.
	Metadata map[string]string `json:"metadata"`
	// AuthenticationRef names a TriggerAuthentication (kind defaults to
	// TriggerAuthentication) or a ClusterTriggerAuthentication.
	AuthenticationRef *AuthenticationRef `json:"authenticationRef,omitempty"`
}

// AuthenticationRef mirrors triggers[].authenticationRef ([authentication]).
type AuthenticationRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// azureQueueMetadata is every parameter the azure-queue scaler documents
// ([azure-queue scaler], "Parameter list"): metadata is a free map in
// KEDA's type, so the names are checked here instead of by decoding.
var azureQueueMetadata = map[string]bool{
	"queueName":             true,
	"queueLength":           true,
	"queueLengthStrategy":   true, // all (default) or visibleonly
	"activationQueueLength": true,
	"connectionFromEnv":     true,
	"accountName":           true,
	"cloud":                 true,
	"endpointSuffix":        true,
}

// TriggerAuthentication mirrors keda.sh/v1alpha1 TriggerAuthentication
// ([authentication]).
type TriggerAuthentication struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta         `json:"metadata"`
	Spec            TriggerAuthenticationSpec `json:"spec"`
}

// TriggerAuthenticationSpec mirrors the spec; only podIdentity is used
// here (no secrets: [workload identity]).
type TriggerAuthenticationSpec struct {
	PodIdentity *AuthPodIdentity `json:"podIdentity,omitempty"`
}

// AuthPodIdentity mirrors podIdentity ([workload identity]): provider
// azure-workload; identityId, the client id of the managed identity the
// KEDA operator signs in as (default: the one on the operator's
// ServiceAccount); identityTenantId and identityAuthorityHost override the
// tenant and authority.
type AuthPodIdentity struct {
	Provider              string  `json:"provider"`
	IdentityID            *string `json:"identityId,omitempty"`
	IdentityTenantID      *string `json:"identityTenantId,omitempty"`
	IdentityAuthorityHost *string `json:"identityAuthorityHost,omitempty"`
}
