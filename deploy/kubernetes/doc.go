// Package kubernetes holds tablekeeper's Kubernetes manifests (KEDA
// ScaledJob or Deployment + ScaledObject, TriggerAuthentication,
// ServiceAccounts, the daily purge CronJob) and render.sh, which fills their
// ${TK_...} placeholders. It has no code: its test decodes every manifest
// strictly into the upstream Kubernetes API types, and into mirrors of
// KEDA's types (keda_test.go), and checks what docs/deploy.md promises.
//
// It must not import any package of the module: it is files and a test.
package kubernetes
