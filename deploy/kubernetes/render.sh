#!/bin/sh
# render.sh prints tablekeeper's Kubernetes manifests for one variant with the
# ${TK_...} placeholders filled from the environment, for kubectl apply -f -:
#
#   deploy/kubernetes/render.sh job | kubectl apply -n tablekeeper -f -
#
# Variants: job (ScaledJob: a Job per burst, scale to zero) or deployment
# (Deployment + ScaledObject: long-running pods). Both include the
# ServiceAccounts, the KEDA TriggerAuthentication and the daily purge CronJob.
# It refuses to print anything while a variable is unset or empty, so a typo
# never reaches the cluster as an empty account or queue name. Only the
# variables below are substituted (envsubst with an explicit list).
set -eu

vars='TK_IMAGE TK_STORAGE_ACCOUNT TK_QUEUE TK_WORKER_CLIENT_ID TK_SCALER_CLIENT_ID TK_SCHEDULER_CLIENT_ID TK_PURGE_PREFIX TK_PURGE_KEEP_DAYS'

case "${1:-}" in
job) files='serviceaccount.yaml triggerauthentication.yaml scaledjob.yaml cronjob.yaml' ;;
deployment) files='serviceaccount.yaml triggerauthentication.yaml deployment.yaml scaledobject.yaml cronjob.yaml' ;;
*)
	echo "usage: $0 job|deployment" >&2
	exit 2
	;;
esac

command -v envsubst >/dev/null || {
	echo "$0: envsubst is required (Debian/Ubuntu: gettext-base; macOS: brew install gettext)" >&2
	exit 1
}
missing=
list=
for v in $vars; do
	eval "val=\${$v:-}"
	[ -n "$val" ] || missing="$missing $v"
	list="$list \${$v}"
done
if [ -n "$missing" ]; then
	echo "$0: set these environment variables first:$missing" >&2
	exit 1
fi

dir=$(dirname "$0")
sep=
for f in $files; do
	printf '%s' "$sep"
	envsubst "$list" <"$dir/$f"
	sep='---
'
done
