{{/* The objects' base name: the release name when it holds the chart name (`helm install slurm`), else
<release>-<chart>; `fullnameOverride` wins. */}}
{{- define "slurm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "slurm.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "slurm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slurm
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* An image: `repository:tag` from a map, or a string as given. */}}
{{- define "slurm.image" -}}
{{- if kindIs "map" . -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/* Slurm options from a map: `Key=v` (a list value joined with commas), sorted by key, joined by `sep`. */}}
{{- define "slurm.confFromMap" -}}
{{- $out := list -}}
{{- range $key, $value := .map -}}
{{- if kindIs "slice" $value -}}
{{- $out = append $out (printf "%s=%s" $key (join "," $value)) -}}
{{- else -}}
{{- $out = append $out (printf "%s=%v" $key $value) -}}
{{- end -}}
{{- end -}}
{{- join .sep $out -}}
{{- end -}}

{{/* `extraConf` if set, else `extraConfMap` rendered with `sep`. Input: dict "conf" "map" "sep". */}}
{{- define "slurm.extraConf" -}}
{{- if .conf -}}
{{- .conf -}}
{{- else if .map -}}
{{- include "slurm.confFromMap" (dict "map" .map "sep" .sep) -}}
{{- end -}}
{{- end -}}

{{- define "slurm.slurmKeyRef" -}}
name: {{ default (printf "%s-auth-slurm" (include "slurm.fullname" .)) .Values.slurmKey.secretRef.name }}
key: {{ default "slurm.key" .Values.slurmKey.secretRef.key }}
{{- end -}}

{{- define "slurm.jwtKeyRef" -}}
name: {{ default (printf "%s-auth-jwt" (include "slurm.fullname" .)) .Values.jwtKey.secretRef.name }}
key: {{ default "jwt.key" .Values.jwtKey.secretRef.key }}
{{- end -}}

{{- define "slurm.sssdConfRef" -}}
name: {{ default (printf "%s-sssd-conf" (include "slurm.fullname" .)) .Values.sssd.secretRef.name }}
key: {{ default "sssd.conf" .Values.sssd.secretRef.key }}
{{- end -}}

{{/* The pod template of a component: `metadata` and `podSpec`, the chart's pull secrets added. Input: dict
"root" $ "component" <values of the component>. */}}
{{- define "slurm.template" -}}
{{- $spec := deepCopy (default (dict) .component.podSpec) -}}
{{- if .root.Values.imagePullSecrets -}}
{{- $_ := set $spec "imagePullSecrets" .root.Values.imagePullSecrets -}}
{{- end -}}
metadata: {{ toJson (default (dict) .component.metadata) }}
spec: {{ toJson $spec }}
{{- end -}}

{{/* The enabled entries of `nodesets` (or `loginsets`), each merged over its defaults, as JSON name -> values.
Input: dict "entries" .Values.nodesets "defaults" .Values.nodesetDefaults. */}}
{{- define "slurm.merged" -}}
{{- $out := dict -}}
{{- range $name, $entry := .entries -}}
{{- $merged := mergeOverwrite (deepCopy $.defaults) (deepCopy (default (dict) $entry)) -}}
{{- if $merged.enabled -}}
{{- $_ := set $out $name $merged -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* slurm.conf lines of the `partitions` map: `PartitionName=<name> Nodes=<nodesets or ALL> <config>`. */}}
{{- define "slurm.partitions" -}}
{{- $lines := list -}}
{{- range $name, $p := .Values.partitions -}}
{{- if $p.enabled -}}
{{- $nodes := list -}}
{{- range $p.nodesets -}}
{{- $nodes = append $nodes (ternary "ALL" . (eq (upper .) "ALL")) -}}
{{- end -}}
{{- $config := include "slurm.extraConf" (dict "conf" $p.config "map" $p.configMap "sep" " ") -}}
{{- $lines = append $lines (trim (printf "PartitionName=%s Nodes=%s %s" $name (join "," $nodes) $config)) -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}
