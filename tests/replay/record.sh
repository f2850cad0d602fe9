#!/usr/bin/env bash
# Record the replay histories from the live dev stack (`slinky dev up` running, bridge worker on the current code).
#
#   tests/replay/record.sh            # writes tests/replay/histories/*.json
#
# Three lifecycles in a fresh namespace (labelled so the admission webhook leaves it alone; deleted afterwards):
# a single pod that runs 2 s, a pod deleted while Running, and a PodGroup gang of two. The gang's second pod is
# created once the lifecycle waits for it, so the history shows the gathering step.
# With free nodes these take the immediate-allocation path. The queued_*.json histories are kept from the code
# before it (job queued, start signal awaited): they guard workflows started by older workers. To record that
# path again, run the worker with SLINKY_SLURM__IMMEDIATE_ALLOCATION=false and rename the outputs. The unfolded_*.json
# histories are from the code before place_pods/release_pods (session 11), and the timer_per_wait_*.json ones from the
code before the one re-check timer (session 15): keep them too.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .slinky-dev/env
OUT=tests/replay/histories
NS="replay-$(date +%s)"
mkdir -p "$OUT"

cleanup() { kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

kubectl create namespace "$NS" >/dev/null
kubectl label namespace "$NS" slinky.slurm.net/webhook=ignore >/dev/null

pod() { # name run-seconds [podgroup]
  local labels=""
  [[ -n "${3:-}" ]] && labels="  labels: {scheduling.x-k8s.io/pod-group: $3}"
  local annotations=""
  [[ -n "$2" ]] && annotations="  annotations: {sim.slinky.slurm.net/run-seconds: \"$2\"}"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $NS
$labels
$annotations
spec:
  schedulerName: slurm-bridge-scheduler
  containers:
  - name: main
    image: registry.k8s.io/pause:3.6
    resources: {requests: {cpu: 100m}}
EOF
}

uid() { kubectl get "$1" -n "$NS" "$2" -o jsonpath='{.metadata.uid}'; }

status() { # workflow id -> RUNNING / COMPLETED / ... (empty while it does not exist)
  temporal workflow describe -w "$1" -o json --address "$TEMPORAL_ADDRESS" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["workflowExecutionInfo"]["status"].split("_")[-1])' ||
    true
}

wait_for() { # description seconds command...
  local what=$1 limit=$2
  shift 2
  for _ in $(seq "$((limit * 5))"); do
    if "$@"; then return 0; fi
    sleep 0.2
  done
  echo "timed out waiting for $what" >&2
  return 1
}

completed() { [[ $(status "$1") == COMPLETED ]]; }
running() { [[ $(kubectl get pod -n "$NS" "$1" -o jsonpath='{.status.phase}') == Running ]]; }
waits_for_members() {
  [[ $(temporal workflow query -w "$1" --type why_pending --address "$TEMPORAL_ADDRESS" 2>/dev/null) == *wait_members* ]]
}

save() { # workflow id, file stem
  wait_for "$1 to complete" 600 completed "$1"
  temporal workflow show -w "$1" -o json --address "$TEMPORAL_ADDRESS" >"$OUT/$2.json"
  echo "recorded $2 ($1)"
}

# 1. A single pod that runs 2 s.
pod happy 2
save "workload/$NS/$(uid pod happy)" pod_happy_path

# 2. A pod deleted while Running.
pod deleted ""
wf="workload/$NS/$(uid pod deleted)"
wait_for "pod deleted Running" 600 running deleted
kubectl delete pod -n "$NS" deleted --wait=false >/dev/null
save "$wf" pod_deleted_while_running

# 3. A PodGroup gang of two (the second member arrives while the lifecycle waits for it).
kubectl apply -f - >/dev/null <<EOF
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: gang, namespace: $NS}
spec: {minMember: 2}
EOF
wf="workload/$NS/podgroup/gang/$(uid podgroup gang)"
pod gang-0 2 gang
wait_for "$wf to wait for members" 60 waits_for_members "$wf"
pod gang-1 2 gang
save "$wf" podgroup_gang_of_two
