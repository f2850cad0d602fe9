{{/* Full name of the release's objects: <release> when it already holds the chart name. */}}
{{- define "slinky-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "slinky-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slinky-temporal
app.kubernetes.io/component: operator
{{- end -}}

{{- define "slinky-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "slinky-operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "slinky-operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "slinky-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Lease of the leader election: one per installation. */}}
{{- define "slinky-operator.leaseName" -}}
{{- include "slinky-operator.fullname" . -}}
{{- end -}}

{{/* operator.namespaces as a JSON list, from a list or upstream's comma-separated string. */}}
{{- define "slinky-operator.namespaces" -}}
{{- $given := .Values.operator.namespaces -}}
{{- $names := list -}}
{{- if kindIs "string" $given -}}
{{- range splitList "," $given -}}
{{- with trim . -}}
{{- $names = append $names . -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $names = default (list) $given -}}
{{- end -}}
{{- $names | uniq | toJson -}}
{{- end -}}

{{- /*
The rules of the namespaced resources, from the code (callers of slinky/clients/kube.py that the operator runs):
  pods                  get (scale-in activities), list watch (NodeSet pod watch), create (new pods),
                        patch (annotations, labels: also the Controller's controller.slinky.slurm.net/active),
                        delete (failed pods, drift, drained pods)
                                                        workers/operator/nodeset.py, activities/nodeset.py
  pods/status           patch (SlurmNodeState* conditions)                 workers/operator/nodeset.py
  pods/log              get (slurmd's last words on a NodeSet's SlurmdRegistered condition)
  persistentvolumeclaims list watch create delete (a NodeSet's volumeClaimTemplates, whenScaled: Delete;
                        list watch: an HA Controller's persistence.existingClaim)
                                                        workers/operator/nodeset/claims.py, workers/operator/controller.py
  servicemonitors       get create patch delete (monitoring.coreos.com: a Controller's metrics.serviceMonitor)
                                                        workers/operator/controller.py
                                                        workers/operator/nodeset/pods.py
  secrets               get (Controller jwtKeyRef, Token Secrets), list watch (Token Secrets), create patch
                        (the Token's JWT Secret)              workers/operator/slurm_clients.py, workers/operator/token.py
  events                create (Events on NodeSets, pods, Tokens)          slinky/clients/events.py
  poddisruptionbudgets  create (the Controller's shared <controller>-workers-pdb, policy/v1beta1 on 1.20)
  nodesets, tokens      list watch; their /status patch; their /finalizers update (the ownerReferences with
                        blockOwnerDeletion on pods and Secrets, when OwnerReferencesPermissionEnforcement is on)
  nodesets              patch (a ScheduledUpdate's reservation finalizer and window annotation)
                                                        workers/operator/nodeset/scheduled.py
  controllers           get (the NodeSet's controllerRef), list watch (managed clusters); /status patch
                                                        workers/operator/slurm_clients.py, workers/operator/controller.py
  restapis              get list (a managed Controller's oldest RestApi), watch; /status patch
                                                        workers/operator/slurm_clients.py, workers/operator/restapi.py
  accountings           list watch (a Controller's accountingRef, the Accounting reconciler); /status patch
  loginsets             list watch; /status patch (replicas, selector, Ready)  workers/operator/loginset.py
  configmaps            get create patch (<controller>-config), list watch (configFileRefs)
  services              get create patch (<controller>-controller, -internal, -workers, <restapi>-restapi)
  endpoints             get (slurmrestd's address when operator.serviceAddresses is endpoints)
  statefulsets          get create patch (<controller>-controller), list watch (its readiness)
  deployments           get create patch (<restapi>-restapi), list watch (its readiness)
                                                        workers/operator/apply.py
*/ -}}
{{- define "slinky-operator.namespacedRules" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, watch, create, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors]
  verbs: [get, create, patch, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [create]
- apiGroups: [slinky.slurm.net]
  resources: [nodesets, tokens]
  verbs: [list, watch]
- apiGroups: [slinky.slurm.net]
  resources: [nodesets]
  verbs: [patch]
- apiGroups: [slinky.slurm.net]
  resources: [nodesets/status, tokens/status]
  verbs: [patch]
- apiGroups: [slinky.slurm.net]
  resources: [nodesets/finalizers, tokens/finalizers]
  verbs: [update]
- apiGroups: [slinky.slurm.net]
  resources: [controllers]
  verbs: [get, list, watch]
- apiGroups: [slinky.slurm.net]
  resources: [restapis]
  verbs: [get, list, watch]
- apiGroups: [slinky.slurm.net]
  resources: [accountings, loginsets]
  verbs: [list, watch]
- apiGroups: [slinky.slurm.net]
  resources: [controllers/status, restapis/status, accountings/status, loginsets/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [endpoints]
  verbs: [get]
- apiGroups: [apps]
  resources: [statefulsets, deployments]
  verbs: [get, list, watch, create, patch]
{{- end -}}

{{/* Kubernetes nodes, always cluster-wide: the node watch (cordon propagation, DaemonSet mode). */}}
{{- define "slinky-operator.clusterRules" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
{{- end -}}

{{/* Restricted container security context (non-root, read-only root, no capabilities), as the bridge's. */}}
{{- define "slinky-operator.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "slinky-operator.apiAccessVolume" -}}
# The ServiceAccount's token, the cluster's CA and the namespace, where in-cluster clients read them: what
# Kubernetes 1.21+ injects for automountServiceAccountToken, written out so the pods get it on a cluster whose
# ServiceAccount admission plugin is off too. The kubelet renews the token (TokenRequest); 3607 s lets a
# 1.20+ API server extend it for clients that read the file once.
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end -}}

{{- define "slinky-operator.apiAccessMount" -}}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end -}}
