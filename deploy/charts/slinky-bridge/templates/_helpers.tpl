{{/* Full name of the release's objects: <release> when it already holds the chart name. */}}
{{- define "slinky-bridge.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "slinky-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slinky-temporal
{{- end -}}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "bridge"). */}}
{{- define "slinky-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "slinky-bridge.serviceAccountName" -}}
{{- default (include "slinky-bridge.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "slinky-bridge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "slinky-bridge.webhookName" -}}
{{- default (printf "%s-pods.slinky.slurm.net" .Release.Name) .Values.webhook.configurationName -}}
{{- end -}}

{{/* managedNamespaceSelector as a label selector string (k=v,k2=v2), "" when unset. */}}
{{- define "slinky-bridge.selectorString" -}}
{{- $terms := list -}}
{{- range $k, $v := .Values.managedNamespaceSelector -}}
{{- $terms = append $terms (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $terms -}}
{{- end -}}

{{- define "slinky-bridge.jwtPath" -}}
{{- printf "/var/run/secrets/slurm/%s" .Values.slurm.jwtSecret.key -}}
{{- end -}}

{{/* Restricted container security context (non-root, read-only root, no capabilities). */}}
{{- define "slinky-bridge.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
{{- end -}}

{{/*
"true" when the leader takes its followers' submits: several replicas, leader election, a port.
*/}}
{{- define "slinky-bridge.submitRelay" -}}
{{- if and .Values.bridge.leaderElection.enabled (gt (int .Values.bridge.replicas) 1) .Values.bridge.submitRelayPort -}}
true
{{- end -}}
{{- end }}

{{- define "slinky-bridge.apiAccessVolume" -}}
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

{{- define "slinky-bridge.apiAccessMount" -}}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end -}}
