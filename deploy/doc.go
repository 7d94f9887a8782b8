// Package deploy holds tablekeeper's deployment files, not Go code: the
// image (Dockerfile), the Azure Container Apps template (containerapps/)
// and the Kubernetes manifests (kubernetes/). Its tests check what can be
// checked without a container runtime or a cloud: the static build the
// image runs, and the files' promised shape.
//
// It must not import any package of the module outside its tests: the
// image builds cmd/worker, not this package.
package deploy
