{{/* Chart name, at most 63 characters. */}}
{{- define "switchboard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects, at most 63 characters. */}}
{{- define "switchboard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object; each adds its own app.kubernetes.io/component. */}}
{{- define "switchboard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "switchboard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchboard
{{- end }}

{{/* Labels that select the manager pods. */}}
{{- define "switchboard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchboard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{/* Name of the manager's ServiceAccount. */}}
{{- define "switchboard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchboard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The manager image; stdio server pods copy their bridge from the same one. */}}
{{- define "switchboard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* True ("true") when RBAC and the manager's watch are limited to rbac.namespaces. */}}
{{- define "switchboard.namespaced" -}}
{{- if eq .Values.rbac.scope "Namespaced" }}true{{ end }}
{{- end }}

{{/*
Rules of the manager, read from files/rbac/role.yaml, the ClusterRole controller-gen
generates (config/rbac/role.yaml, copied by `make manifests`), split into rules on
cluster-scoped resources (the catalogue's TokenReviews and SubjectAccessReviews, the
MCPIdentityProviders, and the non-resource URLs of the ServiceAccount issuer's discovery,
which have no resources) and rules on namespaced ones. controller-gen merges resources
with the same verbs into one rule, so a rule is split resource by resource. Call with
(list . "cluster") or (list . "namespaced").
*/}}
{{- define "switchboard.managerRules" -}}
{{- $root := index . 0 }}
{{- $want := index . 1 }}
{{- $clusterScoped := list "tokenreviews" "subjectaccessreviews" "mcpidentityproviders" "mcpidentityproviders/status" }}
{{- $rules := list }}
{{- range ($root.Files.Get "files/rbac/role.yaml" | fromYaml).rules }}
{{- if not .resources }}
{{- if eq $want "cluster" }}{{ $rules = append $rules . }}{{ end }}
{{- else }}
{{- $picked := list }}
{{- range .resources }}
{{- if eq (has . $clusterScoped) (eq $want "cluster") }}{{ $picked = append $picked . }}{{ end }}
{{- end }}
{{- if $picked }}
{{- $rules = append $rules (set (deepCopy .) "resources" $picked) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/*
The Secret holding the gateway's approval key: the one the values name, or the chart's.
*/}}
{{- define "switchboard.approvalKeySecret" -}}
{{- .Values.manager.gateway.approvalKeySecret | default (printf "%s-approval-key" (include "switchboard.fullname" .)) -}}
{{- end }}

{{/*
The Secret of the keys that seal persons' grants: the one the values name, or the chart's.
*/}}
{{- define "switchboard.userGrantsKeySecret" -}}
{{- .Values.manager.gateway.userGrantsKeySecret | default (printf "%s-user-grant-keys" (include "switchboard.fullname" .)) -}}
{{- end }}
